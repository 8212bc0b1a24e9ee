package nvml

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
