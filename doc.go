// Package drakit is a Go SDK for writing Kubernetes DRA (Dynamic Resource
// Allocation) drivers, a conformance suite that any DRA driver can be run
// against, and a reference NVIDIA driver assembled from the SDK's packages.
//
// A vendor who imports drakit writes two things: how to find its devices
// and what to do to a device when a pod gets it. drakit does the rest:
//
//   - [github.com/drakit/drakit/device] describes devices (attributes,
//     capacities, counters, taints) and turns an inventory into
//     ResourceSlices that respect every API limit.
//   - [github.com/drakit/drakit/cdi] writes per-claim CDI specs atomically
//     and collects orphans.
//   - [github.com/drakit/drakit/topology] gives standard, portable topology
//     keys for devices (PCIe root, NUMA node) and nodes (zone, rack, NVLink
//     domain).
//   - [github.com/drakit/drakit/partition] and its sub-packages model any
//     vendor's partitionable cards, plan their layouts for a fleet, and
//     make partitions at prepare crash-safely
//     ([github.com/drakit/drakit/partition/lifecycle]).
//   - [github.com/drakit/drakit/mig] knows NVIDIA MIG profiles and
//     placements and plans partitions without fragmenting the fleet.
//   - [github.com/drakit/drakit/driver] assembles them behind the kubelet
//     plugin helper of k8s.io/dynamic-resource-allocation: crash-safe
//     checkpoints, idempotent prepare, health, metrics.
//   - [github.com/drakit/drakit/statefile] keeps a driver's own state on
//     disk safe from crashes and from a second process.
//   - [github.com/drakit/drakit/admission] refuses a claim with a bad
//     configuration at `kubectl apply`, with the message prepare would give.
//   - [github.com/drakit/drakit/conformance] checks any DRA driver, drakit
//     or not, by playing the kubelet and the scheduler against it.
//   - [github.com/drakit/drakit/testenv] runs a real cluster for a
//     driver's tests, and [github.com/drakit/drakit/explain] says why a
//     pod's claims cannot be allocated.
//
// The drakit command (cmd/drakit) runs the demo, the conformance suite, MIG
// planning and a local Kubernetes 1.37 cluster.
package drakit
