// Package counter publishes a node's partitionable cards to the
// scheduler. NewModel builds the KEP-4815 counter model of the node's
// cards: one counter set per card, one device per whole card and per
// profile x placement, each consuming the counters it covers, so that
// the scheduler's allocator accepts exactly the valid layouts of each
// card's partition.Scheme.
//
// A driver that partitions at prepare publishes the model in one of
// three shapes: Model.Pools (every device, in model order),
// Model.PreferredPools (the devices in Preference's order, the
// planner's choice made the allocator's first fit, with WithFitOnly
// only those that can still be allocated) or Model.CardPools (the same,
// one pool per card, so a change rewrites one slice in place). A driver
// that lays cards out ahead of demand (the layout publication) publishes
// each card's current layout with Model.LayoutPools, without counters;
// package partition/plan chooses those layouts and package
// partition/ledger makes replacing them safe.
//
// The order and fit-only publications take OrderOption, the layout
// publication LayoutOption: an option of one cannot be passed to the
// other. docs/partition.md explains the shapes and their costs.
package counter
