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
// The simulator (package nvmlsim) implements the same Interface for a
// whole 8-GPU server under NVML's rules, and package nvmlflag selects
// either backend from a command line (-nvml-sim, -nvml-sim-state,
// -nvml-library). NewError gives another backend errors that match the
// same sentinels.
//
// The MIG lifecycle built on this Interface (create, destroy, recover,
// the intent journal) is part of the driver: examples/nvidia/driver's
// Lifecycle and Journal.
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
