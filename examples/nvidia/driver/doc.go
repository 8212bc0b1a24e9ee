// Package driver is the vendor logic of drakit's reference NVIDIA DRA
// driver, gpu.nvidia.drakit.dev, assembled from drakit's packages with no
// conversion code of its own: nvml for the hardware (real NVML or the
// simulated server), mig for the counter model of dynamic MIG
// (CounterModel.Pools), its default profiles and the planner's order
// (Preference), topology for the standard PCI attributes, device for the
// inventory, and the drakit runtime (package github.com/drakit/drakit/driver,
// imported here as kit) for everything a kubelet plugin does.
//
// A Driver publishes each GPU by the mode an administrator put it in:
// MIG mode off gives one full-GPU device; a GPU in MIG mode that is not
// dynamic publishes its MIG devices (static MIG, never changed); a dynamic
// GPU (WithDynamicGPUs, or by default one in MIG mode without MIG devices
// at its first sight; the decision is recorded) offers every advertised
// profile x placement as a partitionable device on the GPU's counter set,
// created when a claim is prepared (kit.ClaimPreparer, after the runtime
// and then the driver's MIG journal recorded that the claim holds it) and
// destroyed when its last holder is unprepared, with the slices
// republished in mig.Preference's order after every change; while none of
// its MIG devices is in use it is also offered whole on the same counter
// set, served with MIG mode off (turned off at prepare, on again at
// unprepare, by the product's rules). At start the
// driver reconciles the dynamic GPUs with the claims the runtime holds
// (kit.Reconciler): what no held claim names is destroyed. See examples/nvidia/README.md for attributes, container
// edits, configuration (GPUConfig), DeviceClasses, health and the
// simulated DGX H200 the tests, chart and demo run.
package driver
