// Package mig is NVIDIA Multi-Instance GPU as one scheme on package
// partition, with no NVML dependency: the profile catalog per GPU model
// (placements per profile, engines), NVIDIA's names for devices,
// counters and attributes, the mapping from what NVML reports, and
// pictures of a GPU's layout. A Product is a MIG-capable GPU model;
// Product.Scheme is it as a partition.Scheme (memory slices placed,
// compute slices counted, the media engines an extra counter, names from
// SchemeNames). The layouts, the counter model, the planner's order,
// PlanFleet, Optimum and Defragment are partition's, here under
// NVIDIA's names (GPU, FleetGPU, Product) with unchanged behaviour; the
// figures below are theirs on NVIDIA's products.
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
// # Dynamic MIG at fleet scale: what to publish
//
// With dynamic MIG the scheduler picks the partition, so every advertised
// profile x placement is a device that kube-scheduler converts, evaluates
// with CEL and keeps in memory, on every node, for every pod. The fleet
// benchmark ("drakit mig bench -fleet", package mig/bench) measures this
// with the real structured allocator driven as kube-scheduler 1.37 drives
// it (one allocator per pod over all slices, Allocate per node). A
// dynamic-MIG driver publishes, chosen by its numbers (8 x H100 per node,
// one 1g claim, CPU time per pod, the last of three runs on a loaded
// two-core machine; ratios are the range over the three):
//
//	                                         slices/node  1,000 nodes: empty   half    nearly full
//	today: every profile, every device         654 KiB                 331 ms  434 ms  3,509 ms
//	DefaultProfiles + WithFitOnly + classes    386 KiB                 288 ms  151 ms     55 ms
//	whole GPUs only (no MIG), for scale         13 KiB                  26 ms    7 ms     11 ms
//
// The levers, each measured alone against today's model in the same run:
//
//   - DefaultProfiles, one profile per compute size (15 devices per H100
//     instead of 26), with the advertised set a driver setting:
//     654 -> 385 KiB of slices per node, 0.43-0.50x the CPU on nearly full
//     nodes. Every extra profile adds its placements to every node.
//   - Only the devices that can still be allocated:
//     CounterModel.PreferredPools(node name, node, WithFitOnly()), the
//     planner's order restricted to the model's devices (the same as
//     Preference with WithProfiles and WithFitOnly, then Only, then
//     Pools), republished after every change. A full node then publishes its in-use devices (which the
//     scheduler skips without evaluating them) and little else: 0.02x the
//     CPU of today's model on nearly full nodes, 0.42-0.53x on half-full
//     ones,
//     with the same allocations (TestFitOnlyKeepsAllocations).
//   - One pool per GPU for a driver that republishes after every MIG
//     change (CounterModel.GPUPools, what the reference driver ships).
//     One pool for a node of 8 GPUs spans two device slices; a change
//     that touches both starts a new pool generation, and until the
//     scheduler has seen every new slice the whole pool, every GPU of
//     the node, is incomplete and skipped. A GPU's pool is one counter
//     slice and one device slice, which a change rewrites in place. The
//     cost is the order across GPUs: the allocator walks pools by name,
//     so the planner's placement on a GPU is kept but the GPU is the
//     first in index order that fits (the same device as the one-pool
//     planner order on 21% of half-full nodes; the online benchmark's
//     "planner, pool per GPU" row says what it costs the packing). With
//     a static publication (no republish), one pool per node keeps the
//     planner's order whole.
//   - A DeviceClass per profile whose selector tests the profile, named
//     by claims instead of a MIG class plus a request selector: one CEL
//     program per device instead of two (0.54-0.72x on nearly full nodes).
//   - At most 8 attributes per device. The API types keep attributes in
//     a Go map, and a map of up to 8 entries fits one group: 16
//     attributes per device (GPU facts repeated on every MIG device)
//     double the slices (1,399 KiB per node) and cost 1.24-1.32x the CPU; 5
//     instead of 8 make no consistent difference (0.86-1.12x).
//
// Claims for several MIG devices on one GPU must use one request with a
// count and a matchAttribute constraint on the GPU index:
//
//	requests:
//	- name: mig
//	  exactly: {deviceClassName: <the profile's class>, count: 4}
//	constraints:
//	- matchAttribute: <driver>/index
//
// The allocator then tries each set of devices once: 8 x 1g on one H100,
// which can never fit, is refused in 123-138 ms per node, 7 (every GPU
// one short) in 39-61 ms. The same devices asked for as k requests of one device
// each under the constraint are tried in every order: 4 requests 14-24 ms,
// 6 requests 0.45-0.65 s, 7 and 8 requests more than 3 s per node on nodes
// where they do not fit, against the scheduler's 10 s filter timeout;
// "drakit explain" warns about that shape (four or more interchangeable
// requests under one constraint). Requests for different profiles under
// one constraint (a 3g and a 1g on one GPU) each have their own devices
// and are few; the benchmark does not time them.
//
// # Planner
//
// PlanFleet turns a fleet and requests into create/destroy operations
// that never touch in-use instances, place as much compute as possible and
// keep whole GPUs free and free space in large aligned blocks. A fleet's
// GPUs carry their *Product itself (from Lookup, or from FromNVML for
// what a real GPU reports), so a real GPU's tables reach the planner.
// When its fragmentation-aware heuristic leaves requests unplaced,
// searches follow: a split by product for two products that share a
// profile name, a neighbourhood search that re-packs pairs and triples of
// GPUs exactly, and an exact search over the whole fleet (branch and
// bound over per-GPU maximal patterns, interchangeable GPUs as one class,
// memoized), all within one budget of counted work (WithWorkBudget), so
// that a plan is the same on a busy and an idle machine; Plan.Search
// reports them. Exact fills of 64 GPUs, one product or H100 with A100,
// are placed completely within the default budget. Optimum is the independent
// exhaustive yardstick for small fleets. Preference is the online mode: an
// order of a node's devices that makes the scheduler's first fit the
// planner's choice when slices are published in that order; WithReserve
// adds admission control. Fragmentation scores are memoized by each
// Product, so no cache outlives the products it scores.
//
// # Defragmenter
//
// Defragment answers what no order of devices can: a request that fits
// nowhere because the free slices are scattered. Given the instances a
// workload may restart elsewhere (Instance.Restartable), it returns the
// fewest of them to move (at most WithMaxMoves), where each goes and
// where the request goes, ties broken by the planner's score of the
// result. The search is exact and bounded by counted work
// (WithWorkBudget), not time, so a busy machine gets the same answer as
// an idle one; Defrag.Complete and Defrag.Reason say when it gave up.
// "drakit mig bench -part defrag" measures it as an online policy: the
// planner's order, and when a 3g, 4g or 7g arrival finds no room, at most
// k moves. At load 1.0 on 8 x H100 (10 seeds of 3,000 arrivals, gains in
// points of compute-weighted acceptance over the planner, mean of
// per-seed differences ± standard error; two busy cores, about 12
// minutes for these rows):
//
//	every pod restartable   k=1 +4.18 ± 0.32   43.6 moves per 1,000 arrivals
//	                        k=2 +5.33 ± 0.32   82.1
//	                        k=3 +6.24 ± 0.40  105.7
//	half of them            k=1 +2.86 ± 0.32   27.7
//	                        k=2 +3.79 ± 0.28   54.5
//	                        k=3 +4.23 ± 0.33   75.4 ± 2.0
//
// (the planner itself: +2.25 ± 0.33 over first fit, never below it on
// any seed; the k=3 row with half restartable is "drakit mig bench -part
// defrag -loads 1.0 -policies first-fit,planner,defrag-k3-r0.5", the
// same seeds, whose first-fit and planner rows repeat the table's). k=2
// with every pod restartable across loads, the same way (10 seeds of
// 3,000 arrivals; gain over the planner, moves per 1,000 arrivals, and
// the planner over first fit with its worst seed):
//
//	load 0.6   +2.91 ± 0.17   23.4 ± 1.3   planner +1.73 ± 0.18 (worst seed +0.88)
//	load 0.8   +5.09 ± 0.20   58.9 ± 2.8   planner +2.62 ± 0.28 (worst seed +1.44)
//	load 1.0   +5.33 ± 0.32   82.1 ± 1.6   planner +2.25 ± 0.33 (worst seed +0.15)
//	load 1.2   +5.58 ± 0.28   94.1 ± 1.6   planner +2.24 ± 0.34 (worst seed +0.85)
//
// With
// half the pods restartable, k=3 gains about what k=1 gains with all.
// Package mig/defrag does it on a cluster (package partition/defrag with
// NVIDIA's names): it evicts pods that opted in, within their
// PodDisruptionBudgets, and gives the freed placement to the pod that
// waits for it.
package mig
