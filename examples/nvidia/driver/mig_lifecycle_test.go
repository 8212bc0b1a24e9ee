package driver

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

func journal(t testing.TB) *Journal {
	t.Helper()
	j, err := OpenJournal(filepath.Join(t.TempDir(), "intents", "journal.json"))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func lifecycle(t testing.TB, nv nvml.Interface, o Owner, opts ...LifecycleOption) *Lifecycle {
	t.Helper()
	l, err := NewLifecycle(nv, o, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var migUUID = regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestLifecycleCreateIsIdempotentAndDestroyToo(t *testing.T) {
	s := memSim(t, "dgx-h100")
	j := journal(t)
	l := lifecycle(t, s, j)
	k := Key{GPU: 2, ProfileID: 9, Start: 4} // 3g.40gb at 4
	if err := j.Record(k); err != nil {
		t.Fatal(err)
	}
	d, err := l.Create(k)
	if err != nil {
		t.Fatal(err)
	}
	if d.Profile != "3g.40gb" || !d.Complete() || !d.Owned || !migUUID.MatchString(d.UUID) {
		t.Fatalf("created %+v", d)
	}
	if ci := d.GPUInstance.ComputeInstances[0]; ci.Placement.Size != 3 {
		t.Fatalf("compute instance covers %d slices, want all 3", ci.Placement.Size)
	}
	again, err := l.Create(k)
	if err != nil || again.UUID != d.UUID {
		t.Fatalf("create again: %+v, %v; want the same device %s", again, err, d.UUID)
	}
	if gis, _ := s.GPUInstances(2); len(gis) != 1 {
		t.Fatalf("create twice made %d GPU instances", len(gis))
	}
	gi, found, err := l.Find(k)
	if err != nil || !found || gi.ID != d.GPUInstance.ID {
		t.Fatalf("find: %+v %v %v", gi, found, err)
	}
	for i := range 2 {
		if err := l.Destroy(k); err != nil {
			t.Fatalf("destroy %d: %v", i, err)
		}
	}
	if _, found, _ := l.Find(k); found {
		t.Fatal("device still there after destroy")
	}
}

func TestLifecycleRollsBackTheGPUInstanceWhenTheComputeInstanceFails(t *testing.T) {
	s := memSim(t, "dgx-a100-80gb")
	j := journal(t)
	l := lifecycle(t, s, j)
	k := Key{GPU: 0, ProfileID: 19, Start: 3}
	_ = j.Record(k)
	if err := s.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultCreateComputeInstance, GPU: -1, Code: nvml.ErrorInsufficientResources}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Create(k)
	if !errors.Is(err, nvml.ErrInsufficientResources) || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("create with a failing compute instance: %v", err)
	}
	if gis, _ := s.GPUInstances(0); len(gis) != 0 {
		t.Fatalf("GPU instance not rolled back: %+v", gis)
	}
	if _, err := l.Create(k); err != nil {
		t.Fatalf("the fault fires once: %v", err)
	}
}

func TestLifecycleFailedRollbackIsUndoneByRecover(t *testing.T) {
	s := memSim(t, "dgx-a100-80gb")
	j := journal(t)
	l := lifecycle(t, s, j)
	k := Key{GPU: 1, ProfileID: 14, Start: 2}
	_ = j.Record(k)
	_ = s.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultCreateComputeInstance, GPU: 1})
	_ = s.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultDestroyGPUInstance, GPU: 1, Code: nvml.ErrorGPUIsLost})
	_, err := l.Create(k)
	if err == nil || !strings.Contains(err.Error(), "Recover undoes it") || nvml.CodeOf(err) != nvml.ErrorUnknown {
		t.Fatalf("create with failing compute instance and rollback: %v", err)
	}
	r, err := l.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Undone) != 1 || r.Undone[0] != k {
		t.Fatalf("recover undid %v, want %v", r.Undone, k)
	}
	if gis, _ := s.GPUInstances(1); len(gis) != 0 {
		t.Fatalf("left: %+v", gis)
	}
}

func TestLifecycleDestroyFailureIsReported(t *testing.T) {
	s := memSim(t, "dgx-h100")
	j := journal(t)
	l := lifecycle(t, s, j)
	k := Key{GPU: 0, ProfileID: 0, Start: 0}
	_ = j.Record(k)
	if _, err := l.Create(k); err != nil {
		t.Fatal(err)
	}
	_ = s.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultDestroyComputeInstance, GPU: 0, Code: nvml.ErrorInUse})
	if err := l.Destroy(k); !errors.Is(err, nvml.ErrInUse) {
		t.Fatalf("destroy with a failing compute instance destroy: %v", err)
	}
	if _, found, _ := l.Find(k); !found {
		t.Fatal("failed destroy removed the device")
	}
	if err := l.Destroy(k); err != nil {
		t.Fatal(err)
	}
}

func TestLifecycleFullGPUIsInsufficientResources(t *testing.T) {
	s := memSim(t, "dgx-h100")
	j := journal(t)
	l := lifecycle(t, s, j)
	for _, k := range []Key{{GPU: 0, ProfileID: 5}, {GPU: 0, ProfileID: 9}} { // 4g at 0, then 3g at 0
		_ = j.Record(k)
	}
	if _, err := l.Create(Key{GPU: 0, ProfileID: 5, Start: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(Key{GPU: 0, ProfileID: 9, Start: 0}); !errors.Is(err, nvml.ErrInsufficientResources) {
		t.Fatalf("3g over 4g: %v", err)
	}
}

// TestLifecycleNeverTouchesStaticDevices: an administrator's instances,
// complete or half-made, are listed as static and never destroyed.
func TestLifecycleNeverTouchesStaticDevices(t *testing.T) {
	s := memSim(t, "dgx-h100")
	j := journal(t)
	l := lifecycle(t, s, j)
	admin, err := s.CreateGPUInstance(0, 9, mig.Placement{Start: 0, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateComputeInstance(0, admin.ID, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateGPUInstance(0, 19, mig.Placement{Start: 6, Size: 1}); err != nil { // admin, half-made
		t.Fatal(err)
	}
	before, _ := s.GPUInstances(0)

	static := Key{GPU: 0, ProfileID: 9, Start: 0}
	if err := l.Destroy(static); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("destroy an admin's device: %v", err)
	}
	if _, err := l.Create(Key{GPU: 0, ProfileID: 9, Start: 4}); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("create without an intent: %v", err)
	}
	r, err := l.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Static) != 2 || len(r.Undone) != 0 || len(r.Owned) != 0 {
		t.Fatalf("recover: %+v", r)
	}
	devs, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || !devs[0].Static() || devs[0].Profile != "3g.40gb" || !devs[0].Complete() || devs[1].Complete() {
		t.Fatalf("list: %+v", devs)
	}
	after, _ := s.GPUInstances(0)
	if len(after) != len(before) || after[0].ComputeInstances[0].UUID != before[0].ComputeInstances[0].UUID {
		t.Fatalf("static devices changed: %+v -> %+v", before, after)
	}
}

// TestLifecycleCompletesAHalfMadeOwnDevice: a Create retried after a
// crash finds the GPU instance by key (no UUID is recorded) and completes
// it.
func TestLifecycleCompletesAHalfMadeOwnDevice(t *testing.T) {
	s := memSim(t, "dgx-h100")
	j := journal(t)
	l := lifecycle(t, s, j)
	k := Key{GPU: 5, ProfileID: 15, Start: 6}
	_ = j.Record(k)
	gi, err := s.CreateGPUInstance(5, 15, mig.Placement{Start: 6, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Create(k)
	if err != nil {
		t.Fatal(err)
	}
	if d.GPUInstance.ID != gi.ID || !d.Complete() {
		t.Fatalf("completed %+v, want GPU instance %d with a compute instance", d, gi.ID)
	}
}

// memSim is a simulated server whose state lives in memory.
func memSim(t testing.TB, server string, opts ...nvmlsim.Option) *nvmlsim.Sim {
	t.Helper()
	s, err := nvmlsim.Open("", append([]nvmlsim.Option{nvmlsim.WithServer(server)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
