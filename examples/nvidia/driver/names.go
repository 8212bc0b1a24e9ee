package driver

import (
	"strings"

	"github.com/drakit/drakit/mig"
)

// DriverName is the DRA driver's name. drakit is not NVIDIA: its attributes
// live in this domain, the standard ones in resource.kubernetes.io.
const DriverName = "gpu.nvidia.drakit.dev"

// Device attributes (in DriverName's domain) besides the counter model's
// (mig.AttrType "gpu"/"mig", mig.AttrIndex, mig.AttrProfile,
// mig.AttrProfileID, mig.AttrPlacementStart, mig.AttrPlacementSize) and
// the standard topology attributes (topology.PCIBusIDAttribute,
// topology.PCIeRootAttribute, topology.NUMANodeAttribute).
const (
	// AttrUUID is the device's UUID: "GPU-..." for a full GPU, "MIG-..."
	// for a static MIG device. A dynamic MIG device has none in its slice
	// (its UUID is born at prepare); the container gets it.
	AttrUUID = mig.AttrUUID
	// AttrParentUUID is a MIG device's GPU's UUID.
	AttrParentUUID = "parentUUID"
	// AttrProductName is the name NVML reports, e.g. "NVIDIA H200".
	AttrProductName = mig.AttrProduct
	// AttrBrand is NVML's brand, e.g. "NVIDIA" or "Tesla".
	AttrBrand = "brand"
	// AttrArchitecture is e.g. "Hopper".
	AttrArchitecture = "architecture"
	// AttrCUDAComputeCapability is a version, e.g. 9.0.0.
	AttrCUDAComputeCapability = "cudaComputeCapability"
	// AttrDriverVersion is the kernel driver's version, e.g. 580.95.5.
	AttrDriverVersion = "driverVersion"
	// AttrCUDADriverVersion is the highest CUDA version the driver
	// supports, e.g. 13.0.0.
	AttrCUDADriverVersion = "cudaDriverVersion"
	// AttrMIGMode tells how the device's GPU is used: "full" (MIG mode
	// off), "static" (an administrator's MIG devices) or "dynamic" (MIG
	// devices made at prepare).
	AttrMIGMode = "migMode"
)

// Device types (mig.AttrType).
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// GPU modes (AttrMIGMode): how the driver publishes a GPU.
const (
	// ModeFull: MIG mode off; the GPU is one device.
	ModeFull = "full"
	// ModeStatic: MIG mode on and MIG devices exist that the driver did
	// not make; they are published as plain devices and never changed.
	ModeStatic = "static"
	// ModeDynamic: MIG mode on and no administrator's MIG devices; every
	// advertised profile x placement is a partitionable device on the
	// GPU's counter set, created at prepare and destroyed at unprepare.
	ModeDynamic = "dynamic"
)

// Environment variables and files a container of a claim gets. Each
// variable either names one device or has the same value in every claim,
// so a container with several claims (each prepared on its own, each with
// its own CDI spec) sees every device of all of them: a claim-wide
// variable that lists the claim's devices would keep only the last
// claim's.
const (
	// EnvVisibleDevices is the NVIDIA container toolkit's device
	// selector. Every claim sets it to VisibleDevicesVoid: the devices,
	// and on real hardware the driver's libraries, come from the claim's
	// CDI specs.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// VisibleDevicesVoid is EnvVisibleDevices' value. It keeps an
	// nvidia-container-runtime in legacy mode (or its hook) from
	// injecting GPUs itself, also when the image sets
	// NVIDIA_VISIBLE_DEVICES=all, as CUDA images do: such a container
	// would otherwise get every GPU of the node.
	VisibleDevicesVoid = "void"
	// EnvDevicePrefix + the device name in upper case with '-' as '_'
	// (e.g. NVIDIA_DRAKIT_DEVICE_GPU_4_1G_18GB_0) is the device's UUID.
	EnvDevicePrefix = "NVIDIA_DRAKIT_DEVICE_"
	// EnvTimeSlicePrefix + the same suffix is a time-sliced GPU's
	// interval (Default, Short, Medium, Long).
	EnvTimeSlicePrefix = "NVIDIA_DRAKIT_TIMESLICE_"
	// EnvClaimFileDir is ClaimFileDir, set by every claim.
	EnvClaimFileDir = "NVIDIA_DRAKIT_CLAIM_FILE_DIR"
	// ClaimFileDir is the container folder holding the devices file of
	// each of the container's claims, "<namespace>_<claim name>.json"
	// (see ClaimFile).
	ClaimFileDir = "/var/run/nvidia-drakit/claims"
)

// envSuffix is a device name as an environment variable suffix.
func envSuffix(device string) string {
	return strings.ToUpper(strings.ReplaceAll(device, "-", "_"))
}
