// Package bench measures the MIG planner of package mig: batch quality
// against the exhaustive optimum, online quality with the real scheduler
// allocator (k8s.io/dynamic-resource-allocation/structured) against
// NVIDIA's static first-fit order and a random order, and plan latency.
// "drakit mig bench" prints its table. Every run uses fixed seeds, so one
// configuration always prints the same quality figures; latencies depend
// on the machine.
package bench
