// Package nvml is the hardware layer of drakit's reference NVIDIA DRA
// driver: GPU discovery, MIG management and health events behind one
// narrow Interface, with two backends. go-nvml is imported here and
// nowhere in drakit's SDK packages (device, driver, cdi, topology, mig).
//
// # Interface
//
// Interface holds what a DRA driver needs and nothing more: the driver and
// CUDA versions; the GPUs (index, UUID, product name, brand, architecture,
// compute capability, memory, PCI bus ID, minor number); MIG mode, current
// and pending; GPU instance profiles with their possible placements and
// compute instance profiles; the GPU and compute instances that exist,
// with placements and MIG UUIDs; creating a GPU instance at a placement
// and its compute instance; destroying both; and a stream of XID health
// events. A failed call returns an *Error that keeps NVML's return code
// (CodeOf) and matches its sentinel: errors.Is(err,
// ErrInsufficientResources), ErrNotSupported, ErrInUse, ErrNotFound,
// ErrInvalidArgument, ErrNoPermission, ErrGPULost.
//
// # Backends
//
// OpenReal loads libnvidia-ml.so.1 through github.com/NVIDIA/go-nvml. It
// builds without an NVIDIA driver (the library is opened at run time, and
// a binary built without cgo gets a stub); on a machine without one it
// fails with a single error that wraps ErrLibraryNotFound and names the
// simulator flag.
//
// OpenSim simulates a whole 8-GPU server ("dgx-a100-40gb",
// "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200"; SimServers) from
// the mig catalog's profiles and placements. Flags selects either backend
// from a command line (-nvml-sim, -nvml-sim-state, -nvml-library). The
// simulator is not go-nvml's mock, which validates nothing and carries
// wrong Hopper and Blackwell placement tables. It enforces:
//
//  1. Creating a GPU instance needs MIG mode current on the GPU
//     (ErrNotSupported; a mode change on A100 becomes current only after
//     ResetGPU; changing the mode with instances present is ErrInUse).
//  2. The profile must exist and the placement be one of its possible
//     placements, start and size (ErrInvalidArgument).
//  3. A GPU instance shares no memory slice with another
//     (ErrInsufficientResources).
//  4. At most MaxCount instances of a profile (ErrInsufficientResources).
//  5. At most one "+me" (media extensions) instance per GPU
//     (ErrInsufficientResources).
//  6. The instances' compute slices fit the GPU's
//     (ErrInsufficientResources).
//  7. Compute instances fit their GPU instance: a profile the GPU
//     instance lacks is ErrNotSupported; the profile's count and the GPU
//     instance's compute slices bound them (ErrInsufficientResources).
//  8. A GPU instance may exist without a compute instance (the state a
//     crash between the two create calls leaves); destroying a GPU
//     instance that still has a compute instance is ErrInUse; destroying
//     what does not exist is ErrNotFound.
//  9. A refused call changes nothing.
//  10. GPU and MIG UUIDs have NVML's form ("GPU-<uuid>", "MIG-<uuid>"), are
//     unique and never change; GPU instance IDs are the lowest free, so
//     they are reused, as on hardware.
//  11. The state lives in a file that outlives processes, as a GPU
//     outlives its driver; every call is a read-modify-write under an
//     flock, written atomically (temporary file, rename), so processes
//     can share it and a killed process leaves a whole file. It is not
//     fsynced: a real GPU's MIG devices do not survive a power loss
//     either, and a create then costs about one checkpoint write.
//
// Faults can be injected for the next matching call of any process
// (Sim.InjectFault): a create or destroy fails with a chosen code, or
// stalls until the process is killed (a crash between the two create
// calls); Sim.RaiseXID delivers an XID to every WatchHealth on the state
// (XID 79 also makes the GPU lost: it answers ErrGPULost until
// Sim.RecoverGPU, as a GPU that fell off the bus answers
// NVML_ERROR_GPU_IS_LOST until its reset), and FaultRegisterEvents makes
// the next WatchHealth report a GPU Unmonitored. SetMigMode and ResetGPU
// (ModeSetter) change a GPU's MIG mode by the product's rules.
// Tests check rules 2-6 against the mig package's validator and
// enumeration: every valid layout can be created, every invalid one is
// refused at its first offending instance, and random creates and
// destroys keep the simulator's state equal to what the validator
// accepts.
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
// static and never touched. The reference driver (examples/nvidia/driver)
// owns every MIG device on the GPUs an administrator made dynamic (its
// Owner is that recorded decision) and keeps a Journal of which claims
// hold which device, keyed by the GPU's UUID (Key.UUID, Key.Same): its
// ClaimPreparer holds the key after the runtime's checkpoint recorded the
// claim and before Create, and forgets it after the Destroy that follows
// the last holder's Release. At start,
// Lifecycle.Recover destroys the driver's half-made devices and leaves the
// rest. WithLockFile makes Create, Destroy and Recover of all processes on
// a node take turns, so that a new driver process's Recover (a rolling
// update) never destroys an old process's create in progress; a killed
// process's lock is released by the kernel.
//
// # On a real GPU
//
// cmd/nvml-probe prints discovery, MIG mode, profiles, placements and
// instances through the real backend and compares every GPU's profiles
// with the mig catalog (CatalogDiff: mig.FromNVML against mig.Lookup);
// TestRealBackendReadOnly does the same checks as a test and is skipped
// where libnvidia-ml is missing. gpu-check.sh builds both here ("build"),
// with the image's driver binary, and runs them on a GPU machine without
// Go ("run"), the driver as nvidia-dra-driver -check: its own discovery
// on ReadOnly(the real backend), printing the inventory and a CDI spec
// per GPU. All of them only read: none changes MIG mode, creates or
// destroys an instance, or resets a GPU.
package nvml
