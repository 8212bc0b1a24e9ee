// Package explain tells why a pod's device claims cannot be allocated,
// node by node, in words an operator can act on.
//
// When DRA cannot place a pod, kube-scheduler reports only "0/N nodes are
// available: N cannot allocate all claims". Pod, Claim and Template take
// the pending object and a [Snapshot] of the cluster (from a live API
// server with [FromCluster], or from YAML files with [Load] for a what-if:
// "would this claim fit this fleet?") and return a [Report] with, for
// every candidate node, most promising first, either the devices the
// allocator would pick or the reasons it cannot:
//
//   - the node is excluded by the pod's node selector or affinity, or by a
//     node taint the pod does not tolerate;
//   - no device of the request's class is on the node, or a class or
//     request CEL selector is false for every device (with the
//     sub-expressions that are false and the attribute values of the
//     closest devices);
//   - more devices are requested than the node has;
//   - every matching device is allocated (to which claims and pods);
//   - a shared counter is exhausted (which counter set, how much is left,
//     which claims hold it: partitionable devices, MIG);
//   - a matchAttribute or distinctAttribute constraint cannot be met (the
//     groups of attribute values and their sizes);
//   - a device taint is not tolerated;
//   - requests or claims fit one by one but not together;
//   - for firstAvailable requests, each alternative with its own reason.
//
// Decisions come from the scheduler's own allocator,
// k8s.io/dynamic-resource-allocation/structured, and its CEL evaluation
// (k8s.io/dynamic-resource-allocation/cel); nothing here re-implements
// allocation. A failure is narrowed down by running the real allocator on
// reduced problems: each claim alone, each request alone without
// constraints, each request without the allocated devices, without device
// taints, without counter consumption. Which reduction turns failure into
// success names the reason; the details around it (which selector
// sub-expression is false, which claims hold the devices, how much of a
// counter is left, which attribute groups exist) are read from the
// snapshot to make the reason actionable.
//
// A pod's claims are those it names, those its templates make (built from
// the template for a what-if), and the claim through which DRA serves its
// extended-resource requests (KEP-5004). Claims that are already
// allocated stay as they are and keep the pod on their nodes.
//
// DeviceTaintRules are applied to the published devices as the
// scheduler's slice tracker does. Not modelled: failures that only
// consumable capacity shared between claims explains (reported as
// unexplained), and nodes that serve an extended resource through a device
// plugin rather than DRA.
//
// The drakit command exposes this as "drakit explain".
package explain
