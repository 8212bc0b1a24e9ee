// Package mig holds NVIDIA Multi-Instance GPU knowledge with no NVML
// dependency: the profile catalog, layouts, the counter model for
// partitionable devices, and a fragmentation-aware partition planner.
package mig
