// Package partition is dynamic partitioning for any vendor's accelerator:
// a card split, when a pod asks, into partitions of the sizes and at the
// places its hardware allows. A vendor describes its partition scheme
// once, in its own names; the package gives the KEP-4815 counter model
// the scheduler allocates from, the order of devices that makes the
// scheduler's first fit a fragmentation-aware choice, a planner for
// fleets and a defragmenter, all generic over the scheme.
//
// # Scheme
//
// A Scheme is one card model: its memory and compute units, each placed
// (a partition sits on particular units, at one of its profile's allowed
// placements, and no two partitions share a unit) or counted (partitions
// take units wherever they sit); its profiles (units, memory bytes,
// allowed placements for memory and compute separately, a per-card
// maximum, extras taken, a card-wide mode); per-card limits (extras such
// as media engines as named counters, Scheme.MaxPartitions, one mode per
// card); and its Names: device, counter-set, counter, attribute,
// capacity and type names, and the nouns of its messages. NewScheme
// checks it and builds the tables the rest needs.
//
// Schemes it expresses, among others: memory placed at aligned starts and
// compute counted, with a media engine as an extra; compute placed
// in partition modes set for the whole card, memory placed in a second
// mode, or shared (modes such as SPX/DPX/QPX/CPX with NPS1/NPS4, each
// profile one combination); compute and memory placed independently,
// each partition taking units of both.
//
// # Layouts
//
// A Layout is the set of partitions of one card ("profile@start", "*"
// when in use). Scheme.Validate checks the rules with errors that name
// the partition and wrap a sentinel (ErrPlacement, ErrOverlap,
// ErrMaxCount, ErrExtra, ErrCompute, ErrMemory, ErrPartitions, ErrMode);
// Scheme.Layouts enumerates every valid layout exactly; Scheme.Picture
// draws one; Scheme.Score is the planner's fragmentation score.
//
// # Counter model
//
// NewCounterModel gives, for a node's cards, one counter set per card and
// one device per whole card and per profile x placement, each consuming
// the counters it covers, so that the scheduler's allocator accepts
// exactly the valid layouts (the tests prove it with the real
// k8s.io/dynamic-resource-allocation structured allocator for several
// schemes). CounterModel.Pools turns it into device pools a driver hands
// to driver.WithDiscoverer through a device.Inventory; device splits
// them under the API's limits. DefaultProfiles is a default advertised
// set (every advertised device costs the scheduler on every node).
//
// # Online order and fit-only publishing
//
// Preference orders a node's devices so that the allocator's first fit
// is the planner's choice: the least fragmentation loss first. A driver
// republishes after every change; CounterModel.PreferredPools with
// WithFitOnly publishes only the devices that can still be allocated
// (the same allocations, far less for the scheduler to evaluate), and
// CounterModel.CardPools the same as one pool per card, which a change
// rewrites in place. Whole cards come after the partitions, so a claim
// that any device satisfies gets the smallest partition that fits, not a
// whole card (see Preference; WithCardsFirst is the other order).
//
// # Layout publication (without counters)
//
// The shape chosen in docs/dynamic-mig-publication.md and the reference
// driver's default: per card either the whole card's device or one
// device per partition of its current layout, no counters, one pool of
// one slice per node. PlanLayouts chooses the layouts (in-use partitions
// kept, the pending Demand placed by PlanFleet's order, the rest filled
// by DefaultMix or WithDefaultMix; Scheme.PlanLayout for one card);
// CounterModel.LayoutPools and CounterModel.LayoutSlices publish them
// (cut by groups of cards beyond LayoutMaxDevices, WithPoolDevices;
// LayoutCardPools says which pool a card's devices are in). What makes
// replacing a free device by an overlapping one safe across processes
// and clocks is package partition/ledger (a per-node ledger in the API
// server, changed only by compare-and-swap); AssignFleet and package
// partition/fleet decide which node lays out for which pending request.
// LayoutPublisher, the single-process sequencer with a time fence, is
// deprecated for drivers (its fence counts from a decision): the
// benchmarks keep it as the design it replaced.
//
// # Fleets and defragmentation
//
// AssignFleet assigns pending requests to nodes for the layout
// publication: a burst on as few nodes as it needs, aged requests first,
// a card reserved for a larger profile that fits nowhere. PlanFleet turns a fleet and requests into create and destroy
// operations that never touch in-use partitions, place as much compute
// as possible and keep whole cards free, with exact searches bounded by
// counted work (WithWorkBudget), so a plan is the same on a busy and an
// idle machine. Optimum is the exhaustive yardstick for small fleets.
// Defragment answers what no order can: a request that fits nowhere
// because the free units are scattered. It returns the fewest
// restartable partitions to move (Instance.Restartable, at most
// WithMaxMoves), where each goes and where the request goes, exactly and
// within counted work.
package partition
