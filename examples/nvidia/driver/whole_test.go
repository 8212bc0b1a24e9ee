package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/partition/lifecycle"
)

// scheduler allocates claims from the driver's published slices with the
// scheduler's own allocator, remembering what it allocated, as
// kube-scheduler does for one node.
type scheduler struct {
	t         *testing.T
	d         *Driver
	allocated sets.Set[structured.DeviceID]
	n         int
}

type classes []*resourceapi.DeviceClass

func (l classes) List() ([]*resourceapi.DeviceClass, error) { return l, nil }
func (l classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// allocate asks for one device of class on GPU gpu; "" when the
// allocator finds none. The device is then allocated until free.
func (s *scheduler) allocate(class string, gpu int) string {
	s.t.Helper()
	ctx := context.Background()
	inv, err := s.d.Inventory(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	features := structured.Features{
		AdminAccess:            true,
		PartitionableDevices:   true,
		PrioritizedList:        true,
		DeviceTaints:           true,
		DeviceBindingAndStatus: true,
		ConsumableCapacity:     true,
	}
	state := structured.AllocatedState{
		AllocatedDevices:         s.allocated.Clone(),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	al, err := structured.NewAllocator(
		ctx,
		features,
		state,
		classes(DeviceClasses([]string{"1g.18gb", "3g.71gb"})),
		inv.ResourceSlices("node-1"),
		cel.NewCache(64, cel.Features{EnableConsumableCapacity: true}),
	)
	if err != nil {
		s.t.Fatal(err)
	}
	s.n++
	req := resourceapi.ExactDeviceRequest{
		DeviceClassName: class,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
		Selectors: []resourceapi.DeviceSelector{
			{
				CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf("device.attributes[%q].index == %d", DriverName, gpu),
				},
			},
		},
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprint("c", s.n),
			Namespace: "default",
			UID:       types.UID(fmt.Sprint("uid-", s.n)),
		},
		Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}},
			},
		},
	}
	res, err := al.Allocate(
		ctx,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		[]*resourceapi.ResourceClaim{c},
	)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(res) == 0 {
		return ""
	}
	r := res[0].Devices.Results[0]
	s.allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
	return r.Device
}

func (s *scheduler) free(dev string) {
	for id := range s.allocated {
		if id.Device.String() == dev {
			s.allocated.Delete(id)
		}
	}
}

func migMode(t *testing.T, nv nvml.Interface, gpu int) nvml.MigMode {
	t.Helper()
	m, err := nv.MigMode(gpu)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The last item, on the scheduler's allocator: an idle dynamic
// GPU is offered whole beside its MIG devices on one counter set, so the
// scheduler never gives both; prepare turns MIG mode off, unprepare on
// again; a 1g, then the GPU whole, then a 3g land on the same GPU.
func TestWholeDynamicGPU(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(0))
	s := &scheduler{t: t, d: f.d, allocated: sets.New[structured.DeviceID]()}

	// A 1g on GPU 4: the GPU whole is then not offered.
	mig1 := s.allocate(ProfileClass("1g.18gb"), 4)
	if mig1 == "" {
		t.Fatal("no 1g device on GPU 4")
	}
	held := f.prepared(t, "one-g", alloc(mig1))
	if got := s.allocate(ClassGPU, 4); got != "" {
		t.Fatalf("GPU 4 whole allocated beside %s: %s", mig1, got)
	}
	// The driver refuses it too (the kubelet may prepare a new claim
	// before it unprepares the old one).
	err := f.d.PrepareClaim(ctx, claim("early"), []kit.AllocatedDevice{alloc("gpu-4")})
	if err == nil || !strings.Contains(err.Error(), "held by claim one-g") {
		t.Fatalf("whole GPU 4 prepared while claim one-g holds a MIG device: %v", err)
	}
	if err := f.d.UnprepareClaim(ctx, claim("early").ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if m := migMode(t, f.sim, 4); !m.Current {
		t.Fatalf("MIG mode of GPU 4 after a refused whole prepare: %+v", m)
	}
	if err := f.d.UnprepareClaim(ctx, held.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	s.free(mig1)

	// The GPU whole: MIG mode off at prepare; its container sees the GPU.
	if got := s.allocate(ClassGPU, 4); got != "gpu-4" {
		t.Fatalf("whole GPU on idle dynamic GPU 4: allocated %q, want gpu-4", got)
	}
	whole := f.prepared(t, "whole", alloc("gpu-4"))
	if m := migMode(t, f.sim, 4); m.Current || m.Pending {
		t.Fatalf("MIG mode of GPU 4 with the GPU prepared whole: %+v, want off", m)
	}
	gpus, _ := f.sim.GPUs()
	if spec := claimSpecs(
		t, f, claim("whole"), []kit.AllocatedDevice{alloc("gpu-4")},
	); !strings.Contains(
		spec,
		EnvDevicePrefix+"GPU_4="+gpus[4].UUID,
	) {
		t.Errorf("whole GPU 4's container edits %s lack its UUID %s", spec, gpus[4].UUID)
	}
	// The scheduler gives no MIG device of the GPU meanwhile (one counter
	// set), and the driver would refuse one.
	if got := s.allocate(ProfileClass("1g.18gb"), 4); got != "" {
		t.Fatalf("1g device %s allocated on GPU 4 while it is allocated whole", got)
	}
	err = f.d.PrepareClaim(ctx, claim("early-mig"), []kit.AllocatedDevice{alloc("gpu-4-1g-18gb-0")})
	if err == nil || !strings.Contains(err.Error(), "in use whole by claim whole") {
		t.Fatalf("MIG device prepared on GPU 4 while it is used whole: %v", err)
	}
	if err := f.d.UnprepareClaim(ctx, claim("early-mig").ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if m := migMode(t, f.sim, 4); m.Current {
		t.Fatalf("MIG mode of GPU 4 after a refused MIG prepare on it: %+v, want still off", m)
	}
	// A restart with the claim held keeps MIG mode off.
	f.restart(t, f.sim, whole)
	if m := migMode(t, f.sim, 4); m.Current {
		t.Fatalf("MIG mode of GPU 4 after a restart with the whole claim held: %+v, want off", m)
	}
	// Unprepare: MIG mode on again, ready for slicing.
	if err := f.d.UnprepareClaim(
		ctx, whole.ClaimRef, []kit.AllocatedDevice{alloc("gpu-4")},
	); err != nil {
		t.Fatal(err)
	}
	s.free("gpu-4")
	if m := migMode(t, f.sim, 4); !m.Current || !m.Pending {
		t.Fatalf("MIG mode of GPU 4 after the whole claim's unprepare: %+v, want on", m)
	}

	// A 3g on the same GPU.
	mig3 := s.allocate(ProfileClass("3g.71gb"), 4)
	if mig3 == "" {
		t.Fatal("no 3g device on GPU 4 after its whole use")
	}
	f.prepared(t, "three-g", alloc(mig3))
	if got := instances(t, f.sim, 4); len(got) != 1 || !strings.HasPrefix(got[0], "3g.71gb") {
		t.Errorf("GPU 4 after the 3g prepare: %v", got)
	}
}

// Whole-GPU use where MIG mode cannot be left: an A100's mode change
// waits for a GPU reset, which needs the GPU idle of every other process
// (and a vGPU guest cannot change it at all), so such a claim would fail
// its prepare forever. The GPU whole is not offered there, a prepare of it
// says why, and its MIG devices serve as on any dynamic GPU. The
// binding's reset path (a change NVML left pending) is finished at start.
func TestWholeDynamicGPUNeedsReset(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer("dgx-a100-80gb"),
		nvmlsim.WithPollInterval(5*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{sim: sim, state: filepath.Join(dir, "gpus.json"), dir: dir}
	f.d = f.open(t, WithRepublishDelay(0))
	if _, ok := f.d.lookup("gpu-2"); ok {
		t.Error("A100 GPU 2 is offered whole")
	}
	inv, err := f.d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all := " " + strings.Join(names(inv), " ") + " "; strings.Contains(all, " gpu-4 ") ||
		!strings.Contains(all, " gpu-4-1g-10gb-0 ") {
		t.Errorf("A100 dynamic GPU 4 publishes %s: want its MIG devices and not the GPU whole", all)
	}
	err = f.d.PrepareClaim(ctx, claim("whole"), []kit.AllocatedDevice{alloc("gpu-4")})
	if err == nil || !strings.Contains(err.Error(), "not offered whole") ||
		!strings.Contains(err.Error(), "GPU reset") {
		t.Fatalf("prepare of A100 GPU 4 whole: %v, want a refusal that says why", err)
	}
	if m := migMode(t, sim, 4); !m.Current || !m.Pending {
		t.Fatalf("A100 GPU 4 after the refused whole prepare: %+v, want MIG on", m)
	}

	// The binding's reset path: MIG mode off needs a reset, which fails
	// once; the mode stays pending until a restart turns it on again.
	k := f.dynamic[0]
	if err := f.d.tool.SetWhole(ctx, k, true); err != nil {
		t.Fatal(err)
	}
	if m := migMode(t, sim, 4); m.Current || m.Pending {
		t.Fatalf("A100 GPU 4 switched whole: %+v, want MIG off (reset done)", m)
	}
	if err := sim.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultResetGPU, GPU: 4, Code: nvml.ErrorInUse},
	); err != nil {
		t.Fatal(err)
	}
	err = f.d.tool.SetWhole(ctx, k, false)
	if !errors.Is(err, nvml.ErrInUse) ||
		!strings.Contains(err.Error(), "pending until a GPU reset") {
		t.Fatalf("switch back with a failing reset: %v", err)
	}
	if m := migMode(t, sim, 4); m.Current || !m.Pending {
		t.Fatalf("A100 GPU 4 after the failed reset: %+v, want off now, on pending", m)
	}
	f.restart(t, sim) // no claim holds it whole
	if m := migMode(t, sim, 4); !m.Current || !m.Pending {
		t.Fatalf("A100 GPU 4 after the restart: %+v, want MIG on again", m)
	}
	f.prepared(t, "after", alloc("gpu-4-1g-10gb-0"))
	if got := instances(t, sim, 4); len(got) != 1 {
		t.Errorf("A100 GPU 4 after a 1g prepare: %v", got)
	}
}

// The simulator's MIG mode rules, as the driver meets them through the
// NVML binding's SetWhole: no change with a GPU instance (ErrInUse, the
// instances named), and a whole-GPU prepare destroys the GPU's MIG
// devices that no claim holds first.
func TestWholeDestroysUnheldFirst(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(0))
	gpu5 := f.dynamic[1]
	if _, err := f.d.tool.Create(
		ctx, lifecycle.Key{Card: gpu5, Profile: "1g.18gb", Start: 0},
	); err != nil {
		t.Fatal(err)
	}
	if err := f.d.tool.SetWhole(ctx, gpu5, true); !errors.Is(err, nvml.ErrInUse) ||
		!strings.Contains(err.Error(), "must be destroyed first") {
		t.Fatalf("MIG mode off with an instance: %v", err)
	}
	f.prepared(t, "whole", alloc("gpu-5"))
	if got := instances(t, f.sim, 5); len(got) != 0 {
		t.Errorf("GPU 5 used whole still has %v", got)
	}
	if m := migMode(t, f.sim, 5); m.Current {
		t.Errorf("GPU 5 used whole: %+v", m)
	}
	// A static GPU is never changed: its full device is not offered, and
	// a prepare of it changes nothing.
	if err := f.d.PrepareClaim(
		ctx, claim("static"), []kit.AllocatedDevice{alloc("gpu-3")},
	); err == nil {
		t.Errorf("MIG mode off on static GPU 3: prepared")
	}
	if m := migMode(t, f.sim, 3); !m.Current {
		t.Errorf("static GPU 3 after a prepare of it whole: %+v", m)
	}
	if _, ok := f.d.lookup("gpu-3"); ok {
		t.Error("static GPU 3 is offered whole")
	}
}

// A MIG prepare on a dynamic GPU left with MIG mode off (the whole-GPU
// claim's release could not turn it on again) turns it on and makes the
// device: Create says the mode is off, the driver turns it on, and
// creates again.
func TestMIGPrepareTurnsMIGModeOnAgain(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(0))
	whole := f.prepared(t, "whole", alloc("gpu-5"))
	if err := f.sim.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultSetMigMode, GPU: 5, Code: nvml.ErrorUnknown},
	); err != nil {
		t.Fatal(err)
	}
	if err := f.d.UnprepareClaim(ctx, whole.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if m := migMode(t, f.sim, 5); m.Current {
		t.Fatalf("GPU 5 after a release whose mode change failed: %+v, want MIG still off", m)
	}
	f.prepared(t, "mig", alloc("gpu-5-1g-18gb-6"))
	if m := migMode(t, f.sim, 5); !m.Current {
		t.Errorf("GPU 5 after a MIG prepare: %+v, want MIG on", m)
	}
	if got := instances(t, f.sim, 5); len(got) != 1 || got[0] != "1g.18gb@6" {
		t.Errorf("GPU 5 after a 1g prepare at 6: %v", got)
	}
}

// Under churn the MIG changes of one republish interval share one
// republish: the first change after a quiet interval is reported after
// the delay, the next ones wait for the interval (an hour here: never
// within the test) and are then reported once.
func TestRepublishInterval(t *testing.T) {
	f := newFixture(t, WithRepublishDelay(0), WithRepublishInterval(time.Hour))
	f.d.changed()
	select {
	case <-f.d.kick:
	case <-time.After(time.Minute):
		t.Fatal("the first change was never republished")
	}
	for range 5 {
		f.d.changed()
	}
	select {
	case <-f.d.kick:
		t.Fatal("a change within the republish interval was republished at once")
	case <-time.After(200 * time.Millisecond):
	}
}
