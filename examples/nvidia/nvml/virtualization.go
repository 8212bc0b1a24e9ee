//go:build cgo

package nvml

import gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

// VGPUGuest reports whether the GPU is a vGPU guest's
// (nvmlDeviceGetVirtualizationMode answers VGPU): a guest cannot change
// the GPU's MIG mode, so a driver never offers such a GPU whole with MIG
// mode off.
func (r *Real) VGPUGuest(gpu int) (bool, error) {
	d, err := r.device(gpu)
	if err != nil {
		return false, err
	}
	m, ret := d.GetVirtualizationMode()
	if err := nvErr(ret, "get virtualization mode of GPU %d", gpu); err != nil {
		return false, err
	}
	return m == gonvml.GPU_VIRTUALIZATION_MODE_VGPU, nil
}
