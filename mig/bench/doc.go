// Package bench measures the MIG planner of package mig: batch quality
// against the exhaustive optimum, online quality with the real scheduler
// allocator (k8s.io/dynamic-resource-allocation/structured) against
// NVIDIA's static first-fit order and a random order, and plan latency.
// "drakit mig bench" prints its table. Every online row is run over
// several seeds (10 by default), each its own arrival sequence shared by
// all policies, and prints means, the gain over first fit as the mean of
// the per-seed differences with its standard error, and how many seeds
// the policy beat first fit on. The default run has one product per slice
// geometry (H100-80GB; A100 has the same geometry) and A30 (4 slices).
// Every run uses fixed seeds, so one configuration always prints the same
// quality figures; latencies depend on the machine.
//
// The online table ends with a reference row, free-migration, that no
// scheduler can follow: every running instance is packed again at each
// arrival. It never fragments, so it shows how much of first fit's loss is
// fragmentation (what an order of devices can win back) and how much is
// the node being full (what none can).
//
// Fleet is the other benchmark ("drakit mig bench -fleet", issue 20):
// what a dynamic-MIG slice model costs kube-scheduler. It drives the real
// structured allocator as the scheduler's DRA plugin does (one
// NewAllocator per pod over every node's slices, Allocate per node, one
// CEL cache) on 10, 100 and 1,000 nodes of 8 GPUs, empty, half or nearly
// full, for today's model, the whole-GPU baseline, each lever alone
// (FleetModel) and the chosen combination, and prints per pod CPU time
// (mean and standard deviation over repeated pods), per-node p50/p99, the
// slices' heap per node, how many nodes the claim fits on and whether the
// planner's pick is kept; then the cost per node of claims for several
// devices on one GPU, each shape under a limit like the scheduler's
// filter timeout. FleetSmall runs in a test; BenchmarkFleetNode is the
// per-node figure as a Go benchmark.
//
// LayoutBench ("drakit mig bench -part layout", issue 38) compares the
// layout publication (LayoutPublisher, internal/engine) with today's shape in a
// model where pods wait: the scheduler sees only the published version,
// the driver republishes after a lag and a fence, pods arrive in bursts
// and retry with kube-scheduler's backoff within a patience
// (SimulateLayout, SimulateBurst; see layout.go).
package bench
