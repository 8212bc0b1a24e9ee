package nvmlsim

import (
	"fmt"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// SetTimeSlice sets the GPU's compute time-slice, shared by every process
// using the state. An unknown value is ErrInvalidArgument.
func (s *Sim) SetTimeSlice(gpu int, t nvml.TimeSlice) error {
	op := fmt.Sprintf("set time-slice %q on GPU %d", t, gpu)
	if !t.Valid() {
		return nvml.NewError(nvml.ErrorInvalidArgument, op, "want Default, Short, Medium or Long")
	}
	if t == nvml.TimeSliceDefault {
		t = ""
	}
	return s.change(func(st *simState) (bool, error) {
		g, err := st.gpu(op, gpu)
		if err != nil {
			return false, err
		}
		if g.TimeSlice == t {
			return false, nil
		}
		g.TimeSlice = t
		return true, nil
	})
}

// TimeSlice returns the GPU's compute time-slice.
func (s *Sim) TimeSlice(gpu int) (nvml.TimeSlice, error) {
	out := nvml.TimeSliceDefault
	err := s.view(func(st *simState) error {
		g, err := st.gpu("get time-slice", gpu)
		if err == nil && g.TimeSlice != "" {
			out = g.TimeSlice
		}
		return err
	})
	return out, err
}
