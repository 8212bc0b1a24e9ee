// Package lifecycle runs the lifecycle of partitions that a DRA driver
// makes when a claim is prepared and destroys when its last holder is
// unprepared, for any vendor's partitionable cards, crash-safely: a
// driver killed at any step, its state lost, a card lost or a second
// driver started on the node never leaks a partition, destroys one that a
// claim holds, hands one out twice or touches an administrator's.
//
// # A driver in a page
//
// A vendor writes a [Binding]: the node's cards ([Card]: a stable ID and
// a partition.Scheme each, models may mix), its partition tool ([Tool]:
// create, destroy and list the partitions of a card, keyed by [Key]),
// the container edits of a prepared device, and optionally the claims'
// configuration (a driver.ConfigScheme) and a health check. [NewNode]
// turns it into a [Node], the driver's discoverer and preparer for
// driver.New: it publishes, card by card, only the devices that still
// fit, checks every device's configuration before anything of the claim
// is made, hands it to a [ConfigCreator]'s create, offers each card whole
// (with a [WholeSwitcher] or without one), and records each device's key
// for the next start. [Classes] are the driver's DeviceClasses. Package
// lifecycletest runs a driver built this way through the faults below
// with the real runtime. The examples instinct (a card with card-wide
// modes) and tiles (none, and a setting at create) are complete drivers.
//
// # What the lifecycle guarantees
//
// [Open] returns the [Manager] a Node embeds, for a driver that binds the
// pieces itself:
//
//   - The intent journal: a partition is recorded as held by its claim
//     before it is made, and forgotten only after it is destroyed, in
//     one file in the state folder.
//   - Recorded ownership: the administrator names the dynamic cards
//     ([WithDynamicCards]; a Node names all its cards); every partition
//     on them is the lifecycle's. No card is taken for dynamic from what
//     it holds at first sight. A card no longer named is drained
//     ([Draining]): what claims use stays until their release, the rest
//     of the lifecycle's goes, the administrator's partitions are never
//     touched.
//   - Reconcile at start against the claims the runtime holds
//     ([Manager.Reconcile], a driver.Reconciler): what a held claim
//     names is kept (and recorded, also when the journal was lost); what
//     none names is destroyed, partitions made only in part included.
//   - Concurrent calls: prepares and unprepares of different claims run
//     at once, the work on each card one at a time, and what a release
//     destroys is decided under its card's lock from the journal as it
//     is then, so a prepare of the same partition by another claim keeps
//     it.
//   - Admin access never creates, destroys or switches anything.
//   - One driver per state folder ([ErrStateInUse]); the two instances
//     of a rolling update share it ([WithRollingUpdate]), and a third
//     process, or a second release of the driver, is refused with a
//     message naming the folder and the processes that hold it.
//   - Rollback: a failed prepare leaves nothing of its claim.
//   - A lost card fails only the calls that need it: a release calls the
//     tool on its own partitions' cards only, a start gives each card
//     [WithCardTimeout], and a prepare holds its claim's card locks only
//     until its calls fail or its context ends. A partition whose destroy
//     failed stays its claim's until the runtime's next unprepare of that
//     claim (or the next start) destroys it.
//   - Republish coalescing under churn ([WithRepublish]).
//
// # The state folder
//
// It holds intents.json (the journal), cards.json (the card states) and
// the instance lock's files (lifecycle.*). It must survive a driver
// restart (a host folder, not the container's), and may be lost: what is
// lost then is what only it knew. With the journal lost, Reconcile
// rebuilds it from the partitions on the dynamic cards and the claims the
// runtime holds (their devices' data, through the KeyFunc). With
// cards.json lost, the cards named stay dynamic (the administrator names
// them again at every start), and a card dropped from the list is
// drained as far as the journal still names its partitions; with both
// lost, the lifecycle's partitions on a card no longer named look like
// the administrator's and are left alone. Nothing beyond what is
// recorded is ever taken for the lifecycle's.
//
// # What the administrator decides
//
// Naming a card dynamic hands it over: at the next start, every
// partition on it that no held claim names is destroyed, whoever made
// it, and those a held claim uses are kept and become the lifecycle's
// (destroyed at the claim's release). Dropping a card from the list while
// claims hold partitions on it keeps those partitions until their
// claims are unprepared, makes nothing new on it, and leaves the
// administrator's partitions on it alone; once nothing of the
// lifecycle's is left on it, it is the administrator's.
//
// Why each rule is what it is: docs/lifecycle.md in the drakit
// repository.
package lifecycle
