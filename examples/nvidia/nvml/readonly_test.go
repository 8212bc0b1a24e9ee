package nvml_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// TestReadOnly: every call that would change a GPU is refused with
// ErrReadOnly and changes nothing; reads pass through; the simulator's
// extra powers are not reachable through it.
func TestReadOnly(t *testing.T) {
	s := memSim(
		t,
		"dgx-h200",
		nvmlsim.WithSetup(
			nvmlsim.Setup{
				MIGGPUs:   []int{0},
				Instances: []nvmlsim.Instance{{GPU: 0, Profile: "3g.71gb", Start: 4}},
			},
		),
	)
	before, err := s.GPUInstances(0)
	if err != nil || len(before) != 1 {
		t.Fatalf("instances %v, %v", before, err)
	}
	ro := nvml.ReadOnly(s)
	_, err1 := ro.CreateGPUInstance(0, 9, mig.Placement{Start: 0, Size: 4})
	_, err2 := ro.CreateComputeInstance(0, before[0].ID, 2)
	err3 := ro.DestroyComputeInstance(0, before[0].ID, before[0].ComputeInstances[0].ID)
	err4 := ro.DestroyGPUInstance(0, before[0].ID)
	for i, err := range []error{err1, err2, err3, err4} {
		if !errors.Is(err, nvml.ErrReadOnly) {
			t.Errorf("call %d: error %v, want ErrReadOnly", i+1, err)
		}
	}
	after, err := ro.GPUInstances(0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("instances changed (-before +after):\n%s", diff)
	}
	if _, ok := ro.(interface {
		SetTimeSlice(int, nvml.TimeSlice) error
	}); ok {
		t.Error("the simulator's time-slices are reachable through ReadOnly")
	}
}
