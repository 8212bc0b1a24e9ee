// Package mig holds NVIDIA Multi-Instance GPU knowledge with no NVML
// dependency: the profile catalog, layouts, the counter model for
// partitionable devices, and a fragmentation-aware partition planner.
//
// # Catalog
//
// Lookup finds a Product (A100-40GB/80GB, A30, H100-80/94/96GB,
// H200-141GB, GH200-96/144GB, B200, GB200) by the name NVML reports;
// FromNVML builds one from what a real GPU reports, which then overrides
// the table. A Product lists its Profiles (name, GI profile ID, compute
// and memory slices, memory, maximum count, allowed placement starts).
// ParseProfileName reads names such as "1g.10gb" or "1g.10gb+me".
//
// # Layouts
//
// A Layout is the set of GPU instances of one GPU. Product.Validate checks
// the placement rules (allowed start, no shared memory slice, per-profile
// maximum, at most one "+me" instance) with errors that name the instance;
// Product.Layouts enumerates every valid layout exactly (2,318 for an
// H100 with all profiles); Product.Picture draws a layout on one line.
//
// # Counter model (KEP-4815 partitionable devices)
//
// NewCounterModel gives, for a node's GPUs, one counter set per GPU
// (memory-slice-0..N, compute-slices, media-extensions) and one device per
// full GPU and per profile x placement, each consuming the counters it
// covers. Tests prove with the real k8s.io/dynamic-resource-allocation
// structured allocator that it accepts exactly the valid layouts.
// CounterModel.Pools turns it into device pools, so a driver publishes it
// like any device.Inventory (device splits it under the API limits:
// counters in their own slices, 8 counter sets and 64 devices per slice);
// CounterModel.Slices gives the same slices as objects for in-process use.
// DefaultProfiles is the advertised profile set a driver starts from;
// Preference's WithProfiles names the same reduced set.
// Device names are DNS labels: "gpu-<index>" and
// "gpu-<index>-<c>g-<m>gb[-me]-<start>" (see ParseDeviceName).
//
// # Planner
//
// PlanFleet turns a fleet and requests into create/destroy operations
// that never touch in-use instances, place as much compute as possible and
// keep whole GPUs free and free space in large aligned blocks. A fleet's
// GPUs carry their *Product itself (from Lookup, or from FromNVML for
// what a real GPU reports), so a real GPU's tables reach the planner.
// When its fragmentation-aware heuristic leaves requests unplaced, an
// exact search (branch and bound over per-GPU maximal patterns,
// interchangeable GPUs as one class, memoized) finds the best plan within
// a time budget (WithSearchBudget), and Plan.Search reports it: PlanFleet
// places every request whenever some plan can. Optimum is the independent
// exhaustive yardstick for small fleets. Preference is the online mode: an
// order of a node's devices that makes the scheduler's first fit the
// planner's choice when slices are published in that order; WithReserve
// adds admission control. Fragmentation scores are memoized by each
// Product, so no cache outlives the products it scores.
package mig
