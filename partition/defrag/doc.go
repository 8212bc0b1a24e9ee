// Package defrag is a cluster controller that makes room for a large
// partition by moving one or two restartable pods: plan.Defragment on a
// live cluster, for any vendor's partition.Scheme. A Vendor names the
// vendor's domain and card models; package mig/defrag is NVIDIA MIG's.
//
// When partitions end out of order, a card's free units scatter and a
// pod that asks for a large profile stays Pending although moving a
// small partition would make room. Each Step:
//
//  1. finds pods unschedulable because a card's shared counters are
//     exhausted (package explain: the scheduler's own allocator);
//  2. reads the cards from the driver's ResourceSlices (devices of the
//     counter model whose model attribute names a Vendor scheme, named as
//     Scheme.ParseDeviceName reads them; a fit-only publication is
//     completed with the model's missing devices) and the allocated
//     claims;
//  3. lets a partition move when every pod holding it opted in (annotation
//     Vendor.Domain+"/defrag" set to AllowValue), has a controller that
//     starts it again without counting a failure, holds no other
//     partition, outranks nothing it makes room for and every
//     PodDisruptionBudget allows it; plan.Defragment finds the fewest
//     moves (WithMaxMoves) and the real allocator confirms the waiting
//     claim takes the freed device;
//  4. refuses a plan unless each evicted pod's replacement lands at its
//     destination: node selection, the scheduler's other filters, and the
//     allocator for its claim's spec (RefusedPlans counts refusals);
//  5. taints the freed region and the destinations (a DeviceTaintRule per
//     device, NoSchedule) and evicts the pods through the Eviction API;
//  6. allocates the waiting claim, and each replacement's claim, to its
//     device once the region is free and published, and removes the
//     taints when the pods are bound or the operation times out.
//
// The controller's guarantees: an operation is recorded on its
// DeviceTaintRules before anything changes, and a controller that starts
// carries it on (rolling back a region tainted in part); at most
// WithEvictionBudget evictions an hour, read back from its own Events
// after a restart; never a system-critical pod or one of a higher
// priority than the waiting pod; every decision is an Event on the pods
// involved; WithDryRun changes nothing. With WithLayoutLedgers it acts on
// the cards the layout publication's fleet planner reserved instead.
// docs/defrag.md explains the design and the API access it needs.
package defrag
