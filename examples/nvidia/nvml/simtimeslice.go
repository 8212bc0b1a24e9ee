package nvml

import "fmt"

// TimeSlice is a GPU's compute time-slice, how long a process runs before
// the GPU switches to another one sharing it ("nvidia-smi compute-policy
// --set-timeslice"). The zero value is TimeSliceDefault.
type TimeSlice string

// The time-slices NVIDIA's driver offers.
const (
	TimeSliceDefault TimeSlice = "Default"
	TimeSliceShort   TimeSlice = "Short"
	TimeSliceMedium  TimeSlice = "Medium"
	TimeSliceLong    TimeSlice = "Long"
)

// Valid reports whether t is one of the time-slices the driver offers (the
// zero value counts as Default).
func (t TimeSlice) Valid() bool {
	switch t {
	case "", TimeSliceDefault, TimeSliceShort, TimeSliceMedium, TimeSliceLong:
		return true
	}
	return false
}

// SetTimeSlice sets the GPU's compute time-slice, shared by every process
// using the state. An unknown value is ErrInvalidArgument.
func (s *Sim) SetTimeSlice(gpu int, t TimeSlice) error {
	op := fmt.Sprintf("set time-slice %q on GPU %d", t, gpu)
	if !t.Valid() {
		return newError(ErrorInvalidArgument, op, "want Default, Short, Medium or Long")
	}
	if t == TimeSliceDefault {
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
func (s *Sim) TimeSlice(gpu int) (TimeSlice, error) {
	out := TimeSliceDefault
	err := s.view(func(st *simState) error {
		g, err := st.gpu("get time-slice", gpu)
		if err == nil && g.TimeSlice != "" {
			out = g.TimeSlice
		}
		return err
	})
	return out, err
}
