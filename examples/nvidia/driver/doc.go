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
// (kit.Reconciler): what no held claim names is destroyed. See examples/nvidia/README.md for
// attributes, container edits, configuration (GPUConfig), DeviceClasses, health and the
// simulated DGX H200 the tests, chart and demo run.
//
// # MIG lifecycle and ownership
//
// Lifecycle creates a MIG device (GPU instance, then a compute instance
// over all of its slices) at a Key (GPU, profile ID, placement start),
// rolls the GPU instance back when the compute instance fails, destroys
// idempotently, and finds devices by Key, which an undo after a crash can
// compute without having recorded any UUID or NVML ID.
//
// The driver never destroys a MIG device it did not make: Lifecycle asks
// an Owner, which must claim a Key before Create (an intent record written
// durably before the create) and until Destroy has succeeded. Everything
// else is static MIG, an administrator's, listed by Lifecycle.List as
// static and never touched. This driver owns every MIG device on the GPUs an administrator made
// dynamic (its Owner is that recorded decision) and keeps a Journal of which claims
// hold which device, keyed by the GPU's UUID (Key.UUID, Key.Same): its
// ClaimPreparer holds the key after the runtime's checkpoint recorded the
// claim and before Create, and forgets it after the Destroy that follows
// the last holder's Release. At start, Lifecycle.Recover destroys the driver's half-made devices
// and leaves the rest. WithLockFile makes Create, Destroy and Recover of all processes on
// a node take turns, so that a new driver process's Recover (a rolling
// update) never destroys an old process's create in progress; a killed
// process's lock is released by the kernel. The files: mig_lifecycle.go
// and mig_journal.go; prepare.go calls them, ownership.go decides which
// GPUs are dynamic.
package driver
