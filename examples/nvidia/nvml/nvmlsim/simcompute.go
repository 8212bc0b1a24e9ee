package nvmlsim

import (
	"fmt"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// SetComputeMode sets the GPU's compute mode, shared by every process
// using the state. An unknown mode is ErrInvalidArgument.
func (s *Sim) SetComputeMode(gpu int, m nvml.ComputeMode) error {
	op := fmt.Sprintf("set compute mode %q on GPU %d", m, gpu)
	if !m.Valid() {
		return nvml.NewError(nvml.ErrorInvalidArgument, op,
			"want Default, ExclusiveProcess or Prohibited")
	}
	if m == nvml.ComputeModeDefault {
		m = ""
	}
	return s.change(func(st *simState) (bool, error) {
		g, err := st.gpu(op, gpu)
		if err != nil || g.ComputeMode == m {
			return false, err
		}
		g.ComputeMode = m
		return true, nil
	})
}

// ComputeMode returns the GPU's compute mode.
func (s *Sim) ComputeMode(gpu int) (nvml.ComputeMode, error) {
	out := nvml.ComputeModeDefault
	err := s.view(func(st *simState) error {
		g, err := st.gpu("get compute mode", gpu)
		if err == nil && g.ComputeMode != "" {
			out = g.ComputeMode
		}
		return err
	})
	return out, err
}
