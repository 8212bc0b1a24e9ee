package nvml

import (
	"errors"
	"fmt"

	"github.com/drakit/drakit/mig"
)

// ErrReadOnly is returned (wrapped) by every call of a ReadOnly backend
// that would change a GPU.
var ErrReadOnly = errors.New("refused by a read-only NVML: the call would change the GPU")

// ReadOnly returns nv with every call that changes a GPU refused with
// ErrReadOnly: creating and destroying GPU and compute instances. Reads
// pass through. Only Interface's methods are kept: a caller's type
// assertions for more (the simulator's time-slices, LivenessWatcher) fail,
// so nothing else can change either. It is how a check that must leave a
// node as it found it (gpu-check.sh, nvidia-dra-driver -check) runs the
// driver's own discovery.
func ReadOnly(nv Interface) Interface { return readOnly{nv} }

type readOnly struct{ Interface }

func (r readOnly) CreateGPUInstance(gpu, profileID int, at mig.Placement) (GPUInstance, error) {
	return GPUInstance{}, fmt.Errorf(
		"create a GPU instance of profile %d at %d:%d on GPU %d: %w",
		profileID,
		at.Start,
		at.Size,
		gpu,
		ErrReadOnly,
	)
}

func (r readOnly) CreateComputeInstance(gpu, gpuInstance, profileID int) (ComputeInstance, error) {
	return ComputeInstance{}, fmt.Errorf(
		"create a compute instance of profile %d in GPU instance %d on GPU %d: %w",
		profileID,
		gpuInstance,
		gpu,
		ErrReadOnly,
	)
}

func (r readOnly) DestroyComputeInstance(gpu, gpuInstance, computeInstance int) error {
	return fmt.Errorf(
		"destroy compute instance %d of GPU instance %d on GPU %d: %w",
		computeInstance,
		gpuInstance,
		gpu,
		ErrReadOnly,
	)
}

func (r readOnly) DestroyGPUInstance(gpu, gpuInstance int) error {
	return fmt.Errorf("destroy GPU instance %d on GPU %d: %w", gpuInstance, gpu, ErrReadOnly)
}
