package nvmlsim

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/topology"
)

func TestParseGPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"all": nil, "": nil, "none": {}, "2-7": {2, 3, 4, 5, 6, 7}, "0,4-5,4": {0, 4, 5},
	} {
		got, err := ParseGPUList(in)
		if err != nil || !cmp.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("ParseGPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "3-1", "-1", "1,,2"} {
		if _, err := ParseGPUList(bad); err == nil {
			t.Errorf("ParseGPUList(%q) succeeded", bad)
		}
	}
}

func TestParseSimInstances(t *testing.T) {
	got, err := ParseInstances("2:4g.71gb@0, 3:MIG 1g.18gb+me@6")
	want := []Instance{{2, "4g.71gb", 0}, {3, "1g.18gb+me", 6}}
	if err != nil || !cmp.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"2:4g.71gb", "x:4g.71gb@0", "2@0", "2:bogus@0"} {
		if _, err := ParseInstances(bad); err == nil {
			t.Errorf("ParseInstances(%q) succeeded", bad)
		}
	}
}

// The setup is made through the simulator's rules, only for a new state.
func TestSimSetup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	su := Setup{MIGGPUs: []int{2, 3}, Instances: []Instance{{2, "4g.71gb", 0}, {2, "3g.71gb", 4}}}
	s, err := Open(path, WithServer("dgx-h200"), WithSetup(su))
	if err != nil {
		t.Fatal(err)
	}
	for gpu, want := range []bool{false, false, true, true, false} {
		if m, _ := s.MigMode(gpu); m.Current != want {
			t.Errorf("GPU %d MIG mode %v, want %v", gpu, m.Current, want)
		}
	}
	gis, _ := s.GPUInstances(2)
	if len(gis) != 2 || len(gis[0].ComputeInstances) != 1 || len(gis[1].ComputeInstances) != 1 {
		t.Fatalf("GPU 2 instances %+v, want two complete ones", gis)
	}
	// Reopening with another setup keeps the state.
	s2, err := Open(path, WithServer("dgx-h200"), WithSetup(Setup{MIGGPUs: []int{}}))
	if err != nil {
		t.Fatal(err)
	}
	if gis2, _ := s2.GPUInstances(2); !cmp.Equal(gis, gis2) {
		t.Errorf("reopen changed GPU 2: %v, want %v", gis2, gis)
	}
	// The real rules apply: 3g.71gb@2 is no placement; two overlap; MIG off.
	for _, bad := range []Setup{
		{Instances: []Instance{{0, "3g.71gb", 2}}},
		{Instances: []Instance{{0, "4g.71gb", 0}, {0, "3g.71gb", 0}}},
		{MIGGPUs: []int{1}, Instances: []Instance{{0, "1g.18gb", 0}}},
		{MIGGPUs: []int{8}},
	} {
		if _, err := Open("", WithServer("dgx-h200"), WithSetup(bad)); err == nil {
			t.Errorf("setup %+v accepted", bad)
		}
	}
}

func TestSimTimeSlice(t *testing.T) {
	s := memSim(t, "dgx-h200")
	if got, _ := s.TimeSlice(1); got != nvml.TimeSliceDefault {
		t.Fatalf("initial time-slice %q", got)
	}
	if err := s.SetTimeSlice(1, nvml.TimeSliceLong); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.TimeSlice(1); got != nvml.TimeSliceLong {
		t.Errorf("time-slice %q, want Long", got)
	}
	if got, _ := s.TimeSlice(0); got != nvml.TimeSliceDefault {
		t.Errorf("GPU 0 time-slice %q, want Default", got)
	}
	if err := s.SetTimeSlice(1, "Forever"); !errors.Is(err, nvml.ErrInvalidArgument) {
		t.Errorf("unknown time-slice: %v", err)
	}
}

func TestSimRecoverGPU(t *testing.T) {
	s := memSim(t, "dgx-h200", WithPollInterval(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.WatchHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RaiseXID(3, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	// Fallen off the bus: the GPU answers nothing until its reset, so a
	// driver that missed the event still finds it lost.
	if _, err := s.MigMode(3); !errors.Is(err, nvml.ErrGPULost) ||
		nvml.CodeOf(err) != nvml.ErrorGPUIsLost {
		t.Errorf("MIG mode of GPU 3 after XID 79: %v, want GPU is lost", err)
	}
	if _, err := s.GPUInstances(2); err != nil {
		t.Errorf("GPU 2 beside a lost GPU 3: %v", err)
	}
	if err := s.RecoverGPU(3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigMode(3); err != nil {
		t.Errorf("MIG mode of GPU 3 after its recovery: %v", err)
	}
	if e := <-ch; e.XID != 79 || e.Recovered {
		t.Errorf("first event %v", e)
	}
	if e := <-ch; !e.Recovered || e.GPU != 3 {
		t.Errorf("second event %v, want GPU 3 recovered", e)
	}
}

// A GPU that cannot be registered for XID events does not fail the
// stream: it is reported Unmonitored first, then events flow.
func TestSimUnmonitoredGPU(t *testing.T) {
	s := memSim(t, "dgx-h200", WithPollInterval(time.Millisecond))
	if err := s.InjectFault(Fault{Op: FaultRegisterEvents, GPU: 5}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.WatchHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := <-ch; !e.Unmonitored || e.GPU != 5 {
		t.Errorf("first event %v, want GPU 5 unmonitored", e)
	}
	if err := s.RaiseXID(1, 48, -1, -1); err != nil {
		t.Fatal(err)
	}
	if e := <-ch; e.XID != 48 || e.GPU != 1 {
		t.Errorf("second event %v, want XID 48 on GPU 1", e)
	}
}

func TestWriteSysfs(t *testing.T) {
	srv, _ := simServer("dgx-h200")
	dir := t.TempDir()
	if err := srv.WriteSysfs(dir); err != nil {
		t.Fatal(err)
	}
	d, err := topology.ReadPCIDevice(srv.PCIBusIDs[5], topology.WithSysfsRoot(dir))
	if err != nil {
		t.Fatal(err)
	}
	if d.BusID != "0000:c3:00.0" || d.PCIeRoot != "pci0000:bd" || d.NUMANode != 1 {
		t.Errorf("GPU 5 topology %+v", d)
	}
}
