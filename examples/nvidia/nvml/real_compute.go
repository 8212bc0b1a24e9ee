//go:build cgo

package nvml

import (
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

var _ ComputeModeSetter = (*Real)(nil)

var computeModes = map[ComputeMode]gonvml.ComputeMode{
	ComputeModeDefault:          gonvml.COMPUTEMODE_DEFAULT,
	ComputeModeExclusiveProcess: gonvml.COMPUTEMODE_EXCLUSIVE_PROCESS,
	ComputeModeProhibited:       gonvml.COMPUTEMODE_PROHIBITED,
}

// ComputeMode reads the GPU's compute mode (nvmlDeviceGetComputeMode).
func (r *Real) ComputeMode(gpu int) (ComputeMode, error) {
	d, err := r.device(gpu)
	if err != nil {
		return "", err
	}
	m, ret := d.GetComputeMode()
	if err := nvErr(ret, "get compute mode of GPU %d", gpu); err != nil {
		return "", err
	}
	for k, v := range computeModes {
		if v == m {
			return k, nil
		}
	}
	return "", NewError(ErrorUnknown, "get compute mode", "unknown mode")
}

// SetComputeMode sets the GPU's compute mode (nvmlDeviceSetComputeMode,
// root).
func (r *Real) SetComputeMode(gpu int, m ComputeMode) error {
	if m == "" {
		m = ComputeModeDefault
	}
	nm, ok := computeModes[m]
	if !ok {
		return NewError(ErrorInvalidArgument, "set compute mode",
			string(m)+" is not a compute mode")
	}
	d, err := r.device(gpu)
	if err != nil {
		return err
	}
	return nvErr(d.SetComputeMode(nm), "set compute mode of GPU %d to %s", gpu, m)
}
