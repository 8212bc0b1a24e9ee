// Package defrag is a cluster controller that makes room for a large MIG
// device by moving one or two restartable pods: mig.Defragment on a live
// cluster.
//
// With dynamic MIG the scheduler picks the partition, and when instances
// end out of order a GPU's free slices end up scattered: four 1g
// instances at placements 0, 2, 4 and 6 leave three compute slices free,
// yet no 3g or 4g fits. A pod that asks for the large profile then stays
// Pending although moving one or two small instances would make room.
// The controller does that move, with the workloads' consent:
//
//  1. It finds pods that are unschedulable because a MIG GPU's shared
//     counters are exhausted (package explain: the scheduler's own
//     allocator, reduced until the reason shows).
//  2. It reads each node's dynamic MIG GPUs from the driver's
//     ResourceSlices (the devices of mig's counter model, named as
//     mig.ParseDeviceName reads them) and the allocated ResourceClaims.
//  3. An instance may move when every pod that holds it opted in (the
//     annotation [AnnotationDefrag] set to "allow"), has a controller that
//     starts it again without counting a failure (a ReplicaSet's, a
//     StatefulSet's, a ReplicationController's, a Job's only when its
//     pod failure policy ignores disruptions: an eviction counts against
//     any other Job's backoffLimit, and one with backoffLimit 0 fails
//     whole; a DaemonSet's pod, or a gang controller's, is not moved), holds no
//     other MIG device, and every PodDisruptionBudget that selects it
//     allows a disruption now. mig.Defragment finds the fewest such
//     instances to move (at most [WithMaxMoves]) so that the large
//     request fits, and the real allocator confirms that the waiting
//     claim can have the freed device once they are gone.
//  4. mig.Defragment knows only profiles, so the plan's destinations are
//     checked before anything is evicted: for each evicted pod, the
//     destination node must pass its node selection (spec.nodeSelector,
//     required node affinity, cordon and taints it does not tolerate)
//     and kube-scheduler's other filters for its replacement (its
//     requests and the pod count against the node's allocatable less
//     its pods', host ports, the topology of its volumes, its topology
//     spread constraints, required pod affinity and anti-affinity, with
//     the evicted pods gone and the earlier replacements landed: the
//     replacement's claim is pinned to the destination, so a
//     replacement that fits nowhere else would be a kill),
//     and the real allocator must give its claim's spec (the template's:
//     the replacement's claim is made from it) the device at the
//     destination and no other, with the cluster as it will be (the
//     moved claims gone, the waiting claim and the earlier replacements
//     on their devices). A plan that fails is refused
//     ([Controller.RefusedPlans], logged at V(2)) and the next GPU or
//     profile is tried; without one, nothing is evicted and the log says
//     which pod could not land and why. Evicting a pod whose claim only
//     accepts its own GPU, or whose node selector only its own node,
//     would leave its replacement Pending for nothing.
//  5. It taints every device of the region being freed and every device
//     overlapping a destination (a DeviceTaintRule per device, effect
//     NoSchedule, key [TaintKey]), so that neither the evicted pods'
//     replacements, which the scheduler places while the old pods
//     terminate, take the region back, nor another pod takes a
//     destination; then it evicts the pods through the Eviction API
//     (policy/v1), which honours their PodDisruptionBudgets: a refusal
//     (429) abandons the operation.
//  6. Once the evicted claims have let go of the region, it allocates the
//     waiting claim itself: it writes the claim's status.allocation with
//     the allocator's result for the freed device (the device, the node
//     selector, the class configuration), as a claim allocated ahead of
//     scheduling. kube-scheduler honours an allocated claim: it only
//     checks the node selector, reserves the claim for the pod and binds
//     it. Each replacement (a new pod of the evicted pod's controller,
//     made after the operation started) whose claim is not allocated
//     gets its claim allocated the same way to its destination, once the
//     destination is free and published (Event
//     [ReasonReplacementAllocated]); a replacement the scheduler placed
//     elsewhere first is left there.
//  7. When the waiting pod and every replacement are bound (or the
//     operation times out, see [WithTimeout], which also ends the wait
//     for a replacement that never comes, or the pod or its claim is
//     gone), it deletes the DeviceTaintRules.
//
// Why a taint plus a controller-written allocation rather than a taint
// that only the waiting claim tolerates: tolerations are part of a
// claim's spec, which is immutable once the claim exists, and the pod's
// claim exists (made from its template) before the controller sees it.
//
// # Crash safety
//
// The operation is recorded before anything changes, in the cluster: as
// JSON in an annotation of each of its DeviceTaintRules (labelled with
// the operation's ID), with the number of rules it makes. One operation
// runs at a time, and a controller that starts (after a kill, a node
// drain, a new leader) carries on from that record at its first Step:
//   - fewer rules than recorded: the previous controller stopped while
//     tainting, before any eviction (evictions come after the last
//     taint). The rules are deleted at once (Event [ReasonRolledBack])
//     and the pod is planned for again.
//   - every rule: it evicts the operation's pods that still run (a pod
//     already terminating, gone or replaced is not evicted again), then
//     goes on as above. The timeout counts from the operation's start
//     plus the longest termination grace period of the pods it evicts,
//     so that a slow pod does not abandon it.
//
// With [WithOwner] every rule is owned by the controller's ClusterRole,
// so that deleting it (uninstalling or switching the controller off)
// lets the garbage collector delete the rules: no device stays
// NoSchedule behind a controller that is gone.
//
// While [Controller.Run] runs, a Step reads the cluster from informers
// (one watch per kind) instead of listing it every interval; what
// decides an operation (its DeviceTaintRules) and the objects it changes
// are read from the API server right before acting. [Controller.Step]
// called on its own lists what it needs.
//
// # Bounded disruption
//
// As the Kubernetes descheduler does, the controller never evicts a
// system-critical pod (priority [SystemCriticalPriority] or above, or
// the system-node-critical and system-cluster-critical classes), nor a
// pod of a higher priority than the pod it makes room for. It evicts at
// most [WithEvictionBudget] pods an hour, cluster-wide and per node; a
// pod whose operation was abandoned waits [WithBackoff] before the
// next; no operation is planned on a node where a pod holding the
// driver's devices is terminating; [WithNamespaces] limits the
// namespaces it evicts from. The budget and the backoff are read back
// from the controller's own Events ([ReasonEvicted], with the node as
// the related object, and [ReasonAbandoned]) when it starts, so that a
// restart forgets neither. [WithLeaderElection] lets only one replica
// act (a coordination.k8s.io Lease).
//
// Every decision
// is an Event on the pods involved: the waiting pod is told which pods
// are evicted to free which placement of which GPU, the evicted pods for
// whom, each replacement which device was reserved for it. With
// [WithDryRun] the controller prints what it would do and touches
// nothing.
//
// What it needs from the API (the NVIDIA chart's ClusterRole grants
// exactly this, and its ValidatingAdmissionPolicy limits the writes to
// what the controller owns): get, list and watch pods; list and watch
// nodes, ResourceSlices, DeviceClasses, ResourceClaimTemplates and
// PodDisruptionBudgets; get, list and watch ResourceClaims; create
// pods/eviction; update resourceclaims/status and resourceclaims/binding
// (the API server asks for the second when status.allocation changes);
// create, list and
// deletecollection DeviceTaintRules (and watch them); create and list
// events; with
// [WithOwner], get its ClusterRole; with [WithLeaderElection], get,
// create and update its Lease.
//
// `drakit mig defrag-controller` runs it from the command line, and the
// reference NVIDIA driver's image runs it as `nvidia-dra-driver
// defrag-controller` in the chart's Deployment (value defrag.enabled,
// off by default).
package defrag
