// Package partition describes a vendor's dynamic partitioning: a card
// split, when a pod asks, into partitions of the sizes and at the places
// its hardware allows. It is the vocabulary the other packages share:
//
//   - partition (this package): the Scheme (units, profiles, placements,
//     extras, modes, names), its Layouts, their validation, score and
//     picture, and the one name of a partition at a place (Instance on a
//     card; DeviceRef for a card index; Scheme.DeviceName and
//     Scheme.ParseDeviceName, the one parser of a scheme's device names).
//   - partition/counter: the KEP-4815 counter model of a node's cards and
//     its publications (all placements, fit-only in the planner's order,
//     a pool per card, the current layouts), with their options.
//   - partition/plan: planning for pending demand: PlanFleet and
//     Optimum, Defragment, PlanLayouts, AssignFleet, with one option type
//     per entry point.
//   - partition/ledger, partition/fleet, partition/claimwatch,
//     partition/lifecycle: the layout publication's per-node ledger, its
//     fleet planner, the claim watch, and the crash-safe lifecycle of
//     partitions made at prepare.
//
// A Scheme is one card model. Memory and compute units are each placed
// (a partition sits on particular units, at one of its profile's
// allowed placements, and no two partitions share a unit) or counted
// (partitions take units wherever they sit). A Profile gives the units,
// memory bytes, allowed placements, a per-card maximum, extras taken and
// a card-wide mode; Names gives the published names and the nouns of the
// messages. NewScheme checks the definition and builds the tables every
// other package needs: a Scheme not built by NewScheme is refused with
// ErrSchemeNotBuilt.
//
// A Layout is the set of partitions of one card ("profile@start", "*"
// when in use). Scheme.Validate checks the rules with errors that name
// the partition and wrap a sentinel (ErrPlacement, ErrOverlap,
// ErrMaxCount, ErrExtra, ErrCompute, ErrMemory, ErrPartitions,
// ErrMode); Scheme.Layouts enumerates every valid layout exactly;
// Scheme.Picture draws one; Scheme.Score is the planner's fragmentation
// score. docs/partition.md explains the design.
package partition
