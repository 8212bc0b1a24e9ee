package nvml

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/drakit/drakit/mig"
)

// Interface is the hardware layer of the reference NVIDIA DRA driver: what
// the driver needs from NVML and nothing more. GPUs are named by their
// NVML index; GPU instances by (GPU, GPU instance ID); compute instances
// by (GPU, GPU instance ID, compute instance ID). Implementations are
// OpenReal (libnvidia-ml through go-nvml) and nvmlsim.Open (a simulated 8-GPU
// server that enforces the real rules). All methods are safe for
// concurrent use. Failed calls return an *Error carrying the NVML code.
type Interface interface {
	// System reports the driver and CUDA versions.
	System() (System, error)
	// GPUs lists the GPUs in index order: every GPU NVML counts, one
	// that cannot be read too, with what could be read and GPU.Err, so
	// that one broken GPU does not hide the others. It fails only when
	// the GPUs cannot be listed at all.
	GPUs() ([]GPU, error)
	// MigMode reports the GPU's current and pending MIG mode;
	// ErrNotSupported for a GPU without MIG.
	MigMode(gpu int) (MigMode, error)
	// GPUInstanceProfiles lists the GPU instance profiles the GPU supports
	// with their possible placements, by ascending profile ID.
	GPUInstanceProfiles(gpu int) ([]GPUInstanceProfile, error)
	// ComputeInstanceProfiles lists the compute instance profiles a GPU
	// instance supports, by ascending ID.
	ComputeInstanceProfiles(gpu, gpuInstance int) ([]ComputeInstanceProfile, error)
	// GPUInstances lists the GPU instances that exist on the GPU with their
	// compute instances, by ascending placement start; none (and no error)
	// when MIG mode is off.
	GPUInstances(gpu int) ([]GPUInstance, error)
	// CreateGPUInstance creates a GPU instance of the profile at the
	// placement. It fails with ErrInsufficientResources when the placement
	// overlaps another instance or a limit is reached, ErrNotSupported
	// when MIG mode is off, ErrInvalidArgument for an unknown profile or
	// a placement the profile does not allow; a failed call changes
	// nothing.
	CreateGPUInstance(gpu, profileID int, at mig.Placement) (GPUInstance, error)
	// CreateComputeInstance creates a compute instance of the profile in
	// the GPU instance. The returned instance carries its MIG UUID.
	CreateComputeInstance(gpu, gpuInstance, profileID int) (ComputeInstance, error)
	// DestroyComputeInstance destroys a compute instance; ErrNotFound when
	// it does not exist.
	DestroyComputeInstance(gpu, gpuInstance, computeInstance int) error
	// DestroyGPUInstance destroys a GPU instance; ErrInUse while it still
	// has a compute instance, ErrNotFound when it does not exist.
	DestroyGPUInstance(gpu, gpuInstance int) error
	// WatchHealth streams health events (XID errors) of all GPUs until ctx
	// is done; the channel is closed then. A GPU that cannot be
	// registered for events does not fail the stream: it is reported
	// with an Unmonitored event first.
	WatchHealth(ctx context.Context) (<-chan HealthEvent, error)
	// Close releases the backend. Instances stay, as on hardware.
	Close() error
}

// ModeSetter is implemented by a backend that can change a GPU's MIG
// mode, as the reference driver does on a dynamic GPU to hand it out
// whole (MIG mode off) and slice it again (on). The product's rules hold:
// the mode changes only while the GPU has no GPU instance (ErrInUse),
// and on some products (A100) a change stays pending until the GPU is
// reset.
type ModeSetter interface {
	// SetMigMode requests MIG mode enabled on the GPU and returns the
	// mode after the call: Pending is enabled, and Current too where
	// the change applied at once (Hopper and later on an idle GPU);
	// otherwise it waits for ResetGPU. It fails with ErrInUse while a
	// GPU instance exists, and changes nothing then.
	SetMigMode(gpu int, enabled bool) (MigMode, error)
	// ResetGPU resets the GPU, which makes a pending MIG mode current;
	// ErrInUse while a GPU instance exists (or, on hardware, a process
	// uses the GPU).
	ResetGPU(gpu int) error
}

// LivenessWatcher is implemented by a backend whose health stream can
// also say that its event loop is running: WatchHealthLiveness streams
// what WatchHealth does plus a HealthEvent with Alive set each time the
// loop went round without an event to report (the simulator at every
// poll, real NVML at every wait that timed out). A consumer that hears
// nothing for several such rounds knows the loop is stuck, and stops
// vouching for the GPUs' health.
type LivenessWatcher interface {
	WatchHealthLiveness(ctx context.Context) (<-chan HealthEvent, error)
}

// System is the host's NVIDIA software.
type System struct {
	// DriverVersion is the kernel driver version, e.g. "580.95.05".
	DriverVersion string `json:"driverVersion"`
	// CUDAVersion is the highest CUDA version the driver supports, e.g.
	// "13.0".
	CUDAVersion string `json:"cudaVersion"`
}

// GPU is one physical GPU.
type GPU struct {
	// Index is NVML's device index.
	Index int `json:"index"`
	// UUID is the GPU's UUID, "GPU-" followed by a UUID.
	UUID string `json:"uuid"`
	// ProductName is the name NVML reports, e.g. "NVIDIA H100 80GB HBM3";
	// mig.Lookup maps it to a catalog product.
	ProductName string `json:"productName"`
	// Brand is the brand NVML reports, e.g. "Tesla" or "NVIDIA".
	Brand string `json:"brand"`
	// Architecture is the architecture, e.g. "Ampere", "Hopper",
	// "Blackwell".
	Architecture string `json:"architecture"`
	// CUDAComputeCapability is "major.minor", e.g. "9.0".
	CUDAComputeCapability string `json:"cudaComputeCapability"`
	// MemoryMiB is the total memory.
	MemoryMiB int64 `json:"memoryMiB"`
	// PCIBusID is the PCI address in domain:bus:device.function form,
	// lower case, e.g. "0000:1b:00.0".
	PCIBusID string `json:"pciBusID"`
	// Minor is the device minor number (/dev/nvidia<Minor>).
	Minor int `json:"minor"`
	// Err is why the GPU could not be read (it fell off the bus, NVML
	// cannot get its handle or one of the facts above); nil for a GPU
	// read whole. Such a GPU has its Index and the facts read before
	// the failure; a driver leaves it out or publishes it unhealthy, and
	// serves the others.
	Err error `json:"-"`
}

// MigMode is a GPU's MIG mode. Pending differs from Current after a mode
// change that waits for a GPU reset.
type MigMode struct {
	// Current is true when MIG is enabled now.
	Current bool `json:"current"`
	// Pending is the mode after the next GPU reset.
	Pending bool `json:"pending"`
}

// GPUInstanceProfile is one GPU instance profile of a GPU
// (nvmlGpuInstanceProfileInfo_t plus its possible placements).
type GPUInstanceProfile struct {
	// ID is the profile ID (19 for 1g, 0 for 7g on the 8-slice GPUs).
	ID int `json:"id"`
	// Name is the profile name without NVML's "MIG " prefix, e.g.
	// "1g.10gb+me".
	Name string `json:"name"`
	// SliceCount is the number of compute slices.
	SliceCount int `json:"sliceCount"`
	// InstanceCount is the most instances of the profile the GPU holds.
	InstanceCount int `json:"instanceCount"`
	// MemoryMiB is the instance memory.
	MemoryMiB int64 `json:"memoryMiB"`
	// Placements are the possible placements (start:size in memory
	// slices), ascending by start.
	Placements []mig.Placement `json:"placements"`
	// Engines are the instance's multiprocessors, copy engines, decoders,
	// encoders, JPEG and OFA engines (multiprocessorCount ... ofaCount).
	Engines mig.Engines `json:"engines"`
}

// ComputeInstanceProfile is one compute instance profile of a GPU instance
// (nvmlComputeInstanceProfileInfo_t).
type ComputeInstanceProfile struct {
	// ID is the compute instance profile ID (0 for one slice, 4 for seven).
	ID int `json:"id"`
	// Name is the name without the "MIG " prefix, e.g. "1c.3g.40gb"; may be
	// empty where the driver does not report names.
	Name string `json:"name,omitempty"`
	// SliceCount is the number of compute slices.
	SliceCount int `json:"sliceCount"`
	// InstanceCount is the most instances of the profile in the GPU
	// instance.
	InstanceCount int `json:"instanceCount"`
}

// GPUInstance is a GPU instance that exists.
type GPUInstance struct {
	// GPU is the parent GPU's index.
	GPU int `json:"gpu"`
	// ID is the GPU instance ID, unique on its GPU while it exists (IDs
	// are reused after a destroy).
	ID int `json:"id"`
	// ProfileID is the GPU instance profile ID.
	ProfileID int `json:"profileID"`
	// Placement is where the instance sits.
	Placement mig.Placement `json:"placement"`
	// ComputeInstances are the instance's compute instances, by ID. None is
	// the state a crash between the two create calls leaves.
	ComputeInstances []ComputeInstance `json:"computeInstances,omitempty"`
}

// ComputeInstance is a compute instance that exists; with its GPU instance
// it forms a MIG device.
type ComputeInstance struct {
	// ID is the compute instance ID within its GPU instance.
	ID int `json:"id"`
	// ProfileID is the compute instance profile ID.
	ProfileID int `json:"profileID"`
	// Placement is the compute slices the instance covers in its GPU
	// instance.
	Placement mig.Placement `json:"placement"`
	// UUID is the MIG device's UUID, "MIG-" followed by a UUID, by which
	// CUDA, nvidia-smi and CDI specs name the device.
	UUID string `json:"uuid"`
}

// HealthEvent is an error NVML reported on a GPU.
type HealthEvent struct {
	// GPU is the GPU's index (-1 when the backend could not tell); UUID
	// its UUID.
	GPU  int    `json:"gpu"`
	UUID string `json:"uuid"`
	// XID is the XID error code, e.g. 79 (GPU fallen off the bus), 48
	// (double-bit ECC error), 94/95 (contained/uncontained ECC error).
	XID uint64 `json:"xid"`
	// GPUInstance and ComputeInstance name the MIG device the error is
	// confined to; -1 when it concerns the whole GPU.
	GPUInstance     int `json:"gpuInstance"`
	ComputeInstance int `json:"computeInstance"`
	// Time is when the backend saw the event.
	Time time.Time `json:"time"`
	// Recovered is true for the opposite of an error: the GPU works again
	// (XID is then 0). Only the simulator sends it (Sim.RecoverGPU); real
	// NVML has no such event, a GPU is trusted again after a reset and a
	// driver restart.
	Recovered bool `json:"recovered,omitempty"`
	// Alive marks a liveness tick of WatchHealthLiveness (LivenessWatcher):
	// no event, the loop is running. Its other fields are zero, GPU -1.
	Alive bool `json:"alive,omitempty"`
	// Unmonitored is sent once at the start of a stream for each GPU
	// that could not be registered for XID events (XID is then 0): the
	// stream cannot tell that GPU's health.
	Unmonitored bool `json:"unmonitored,omitempty"`
}

// String prints e.g. "GPU 3: XID 79" or "GPU 3 GI 5 CI 0: XID 94".
func (e HealthEvent) String() string {
	if e.Unmonitored {
		return fmt.Sprintf("GPU %d: not monitored", e.GPU)
	}
	if e.Recovered {
		return fmt.Sprintf("GPU %d: recovered", e.GPU)
	}
	if e.GPUInstance < 0 {
		return fmt.Sprintf("GPU %d: XID %d", e.GPU, e.XID)
	}
	return fmt.Sprintf("GPU %d GI %d CI %d: XID %d", e.GPU, e.GPUInstance, e.ComputeInstance, e.XID)
}

// PCIBusID turns NVML's bus ID ("00000000:1B:00.0") into the form sysfs
// and Kubernetes use ("0000:1b:00.0").
func PCIBusID(nvmlBusID string) string {
	s := strings.ToLower(nvmlBusID)
	if dom, rest, ok := strings.Cut(s, ":"); ok && len(dom) == 8 {
		s = dom[4:] + ":" + rest
	}
	return s
}
