// Package plan decides where partitions go, generic over any
// partition.Scheme:
//
//   - PlanFleet turns a fleet's cards and one-partition requests into
//     create and destroy operations that never touch an in-use partition,
//     place as much compute as possible and keep whole cards free, with
//     exact searches bounded by counted work; Optimum is the exhaustive
//     yardstick for small fleets.
//   - Defragment answers what no order can: a request that fits nowhere
//     because the free units are scattered. It finds the fewest
//     restartable partitions to move, exactly and within counted work.
//   - PlanLayouts (and PlanLayout for one card) chooses the layout each
//     card of a node publishes ahead of demand, for the layout publication
//     (counter.Model.LayoutPools, partition/ledger).
//   - AssignFleet assigns pending requests to nodes for the layout
//     publication: a burst on as few nodes as it needs, aged requests
//     first, a card reserved for a larger profile that fits nowhere.
//
// Each entry point has its own option type (FleetOption, DefragOption,
// LayoutOption, AssignOption); an option that means nothing to an entry
// point does not compile there. Work budgets count search nodes, not
// time, so a plan is the same on a busy and an idle machine. Every entry
// point is deterministic and safe for concurrent use; errors are for
// invalid input only and wrap partition.ErrFleet.
package plan
