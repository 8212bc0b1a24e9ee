// Package ledger keeps a node's layout publication safe across
// processes and clocks: the layout ledger, one object per node in the API
// server that says which of the node's layout devices may be allocated
// (Open) and which claims hold (Held), changed only by compare-and-swap
// (docs/dynamic-mig-publication.md).
//
// A driver that publishes a layout (plan.PlanLayouts: per card the
// whole card or the partitions of its current layout, no counters)
// replaces free devices by overlapping ones as demand moves. The
// scheduler allocates from the slices it last saw and writes the
// allocation later, possibly much later (a gang pod waits in Permit);
// two instances of the driver run during a rolling update; a slice write
// lands late or after a conflict. The ledger makes overlap impossible
// whatever the order:
//
//   - the allocation check (package admission's LayoutGuard, a webhook on
//     resourceclaims/status) admits an allocation of a layout device only
//     by moving it from Open to Held (Ledger.Admit, Store.Update);
//   - the node's agent opens devices only together with the ledger it
//     replaces (Ledger.Publish, Agent): per card, Held ∪ Busy ∪ Open is
//     a valid layout;
//   - a Held entry goes only when the claim is observed at a newer
//     resourceVersion without those devices, or deleted (Ledger.Observe):
//     the allocation write compared the claim's resourceVersion too, so it
//     can no longer commit.
//
// What a caller may rely on: every allocation committed through Admit
// holds devices that are valid together with everything else held on
// their card, so a prepare never meets an overlapping partition made for
// another claim. What it must do: pass to Admit only devices of the
// ledger's pools, give Publish everything in use on the node (Busy: what
// the hardware lists and the partition lifecycle's journal holds, joined
// by InUse.Card), and publish the node's slice from the ledger
// (Ledger.Layout). The tests
// include an adversarial model (two agents per node, restarts at every
// step, slice writes delayed 30 s and retried after conflicts, lagging
// watches, gang pods in Permit for minutes) with the real allocator.
package ledger
