// Package nvmlsim simulates, behind nvml.Interface, a whole 8-GPU server
// ("dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200";
// Servers) from the mig catalog's profiles and placements, for tests,
// demos and development on machines without a GPU (nvmlflag's -nvml-sim
// selects it). It is not go-nvml's mock, which validates nothing and
// carries wrong Hopper and Blackwell placement tables. It enforces, with
// nvml's error classes (nvml.ErrNotSupported and the other sentinels):
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
//
// MPS: SetComputeMode sets a GPU's compute mode (nvml.ComputeModeSetter),
// and MPSControlMain (command nvidia-cuda-mps-control, or any program
// that calls it) is a stand-in for NVIDIA's MPS control daemon of one
// GPU, a process of its own that registers on its GPU in the state.
// Sim.OpenCUDA is a simulated CUDA program with a container's
// environment: an MPS client gets at most its pinned device memory limit
// (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) and all clients at most the GPU's
// memory (ErrCUDAOutOfMemory); a program that is not a client is refused
// on a GPU in ExclusiveProcess mode while a daemon serves it
// (ErrCUDADevicesUnavailable); a client of a daemon that died fails
// (ErrMPSConnection).
//
// Tests check rules 2-6 against the mig package's validator and
// enumeration: every valid layout can be created, every invalid one is
// refused at its first offending instance, and random creates and
// destroys keep the simulator's state equal to what the validator
// accepts.
package nvmlsim
