// Package lifecycle runs the lifecycle of partitions that a DRA driver
// makes when a claim is prepared and destroys when its last holder is
// unprepared, for any vendor's partitionable cards, crash-safely: a
// driver killed at any step, its state lost, a card lost or a second
// driver started on the node never leaks a partition, destroys one that a
// claim holds, hands one out twice or touches an administrator's.
//
// A vendor implements [Tool]: create, destroy and list the partitions of
// a card (and optionally [WholeSwitcher], the switch that makes a card
// whole again), keyed by [Key] (card, profile, start), plus a [KeyFunc]
// that names the partition an allocated device is. [Open] returns the
// [Manager], which does the rest:
//
//   - The intent journal: a partition is recorded as held by its claim
//     before it is made, and forgotten only after it is destroyed, in
//     one file in the state folder.
//   - Recorded ownership: the administrator names the dynamic cards
//     ([WithDynamicCards]); every partition on them is the lifecycle's.
//     No card is dynamic by default, and none is ever taken for dynamic
//     from what it holds at first sight. A card no longer named is
//     drained ([Draining]): what claims use stays until their release,
//     the rest of the lifecycle's goes, the administrator's partitions
//     are never touched.
//   - Reconcile at start against the claims the runtime holds
//     ([Manager.Reconcile], a [driver.Reconciler]): what a held claim
//     names is kept (and recorded, also when the journal was lost); what
//     none names is destroyed, partitions made only in part included.
//   - Admin access never creates, destroys or switches anything.
//   - One driver per state folder ([ErrStateInUse]); the two instances
//     of a rolling update share it ([WithRollingUpdate]), and a third
//     process, or a second release of the driver, is refused.
//   - Rollback: a failed prepare leaves nothing of its claim.
//   - A lost card never blocks another card's prepare, unprepare or
//     start: the work on each card is serialized on its own, a release
//     calls the tool on its own partitions' cards only, and a partition
//     whose destroy failed stays its claim's until the runtime's next
//     unprepare of that claim (or the next start) destroys it.
//   - Republish coalescing under churn ([WithRepublish]).
//
// The vendor's [driver.Preparer] calls [Manager.PrepareClaim],
// [Manager.UnprepareClaim] and [Manager.Reconcile] (or embeds the
// Manager, which implements [driver.ClaimPreparer] and
// [driver.Reconciler]), hands each container its partition from
// [Manager.Made], and publishes its inventory with
// [device.DynamicDiscoverer], whose Changed the Manager calls after every
// change. The package's Example is a complete small binding.
//
// # The state folder
//
// It holds intents.json (the journal), cards.json (the card states) and
// lifecycle.lock (the instance lock). It must survive a driver restart
// (a host folder, not the container's), and may be lost: what is lost
// then is what only it knew. With the journal lost, Reconcile rebuilds
// it from the partitions on the dynamic cards and the claims the
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
package lifecycle
