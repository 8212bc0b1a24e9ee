package driver

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// toolOn returns a driver on s, with the GPUs named dynamic, and the
// UUIDs of s's GPUs by index.
func toolOn(t testing.TB, s *nvmlsim.Sim, dynamic ...string) (*Driver, []string) {
	t.Helper()
	d, err := New(s, "node-1", WithStateDir(t.TempDir()), WithDynamicGPUs(dynamic...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	gpus, err := s.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	return d, uuids
}

var migUUID = regexp.MustCompile(
	`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`,
)

func TestLifecycleCreateIsIdempotentAndDestroyToo(t *testing.T) {
	ctx := context.Background()
	s := memSim(t, "dgx-h100")
	d, uuid := toolOn(t, s, "2")
	l := d.tool
	k := lifecycle.Key{Card: uuid[2], Profile: "3g.40gb", Start: 4}
	p, err := l.Create(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	gi, _ := l.madeDevice(k)
	if p.Profile != "3g.40gb" || !p.Complete || !migUUID.MatchString(p.ID) {
		t.Fatalf("created %+v", p)
	}
	if ci := gi.ComputeInstances[0]; ci.Placement.Size != 3 {
		t.Fatalf("compute instance covers %d slices, want all 3", ci.Placement.Size)
	}
	again, err := l.Create(ctx, k)
	if err != nil || again.ID != p.ID {
		t.Fatalf("create again: %+v, %v; want the same device %s", again, err, p.ID)
	}
	if gis, _ := s.GPUInstances(2); len(gis) != 1 {
		t.Fatalf("create twice made %d GPU instances", len(gis))
	}
	found, ok, err := l.Find(k)
	if err != nil || !ok || found.ID != gi.ID {
		t.Fatalf("find: %+v %v %v", found, ok, err)
	}
	for i := range 2 {
		if err := l.Destroy(ctx, k); err != nil {
			t.Fatalf("destroy %d: %v", i, err)
		}
	}
	if _, ok, _ := l.Find(k); ok {
		t.Fatal("device still there after destroy")
	}
}

func TestLifecycleRollsBackTheGPUInstanceWhenTheComputeInstanceFails(t *testing.T) {
	ctx := context.Background()
	s := memSim(t, "dgx-a100-80gb")
	d, uuid := toolOn(t, s, "0")
	k := lifecycle.Key{Card: uuid[0], Profile: "1g.10gb", Start: 3}
	if err := s.InjectFault(
		nvmlsim.Fault{
			Op: nvmlsim.FaultCreateComputeInstance, GPU: -1, Code: nvml.ErrorInsufficientResources,
		},
	); err != nil {
		t.Fatal(err)
	}
	_, err := d.tool.Create(ctx, k)
	if !errors.Is(err, nvml.ErrInsufficientResources) ||
		!strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("create with a failing compute instance: %v", err)
	}
	if gis, _ := s.GPUInstances(0); len(gis) != 0 {
		t.Fatalf("GPU instance not rolled back: %+v", gis)
	}
	if _, err := d.tool.Create(ctx, k); err != nil {
		t.Fatalf("the fault fires once: %v", err)
	}
}

// A rollback that fails too leaves the GPU instance, which the start's
// reconcile undoes.
func TestLifecycleFailedRollbackIsUndoneByRecover(t *testing.T) {
	ctx := context.Background()
	s := memSim(t, "dgx-a100-80gb")
	d, uuid := toolOn(t, s, "1")
	k := lifecycle.Key{Card: uuid[1], Profile: "2g.20gb", Start: 2}
	_ = s.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultCreateComputeInstance, GPU: 1})
	_ = s.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultDestroyGPUInstance, GPU: 1, Code: nvml.ErrorGPUIsLost},
	)
	_, err := d.tool.Create(ctx, k)
	if err == nil || !strings.Contains(err.Error(), "the next release or start undoes it") ||
		nvml.CodeOf(err) != nvml.ErrorUnknown {
		t.Fatalf("create with failing compute instance and rollback: %v", err)
	}
	if gis, _ := s.GPUInstances(1); len(gis) != 1 || len(gis[0].ComputeInstances) != 0 {
		t.Fatalf("the failed rollback left %+v, want the half-made GPU instance", gis)
	}
	if err := d.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if gis, _ := s.GPUInstances(1); len(gis) != 0 {
		t.Fatalf("left: %+v", gis)
	}
}

func TestLifecycleDestroyFailureIsReported(t *testing.T) {
	ctx := context.Background()
	s := memSim(t, "dgx-h100")
	d, uuid := toolOn(t, s, "0")
	k := lifecycle.Key{Card: uuid[0], Profile: "7g.80gb", Start: 0}
	if _, err := d.tool.Create(ctx, k); err != nil {
		t.Fatal(err)
	}
	_ = s.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultDestroyComputeInstance, GPU: 0, Code: nvml.ErrorInUse},
	)
	if err := d.tool.Destroy(ctx, k); !errors.Is(err, nvml.ErrInUse) {
		t.Fatalf("destroy with a failing compute instance destroy: %v", err)
	}
	if _, ok, _ := d.tool.Find(k); !ok {
		t.Fatal("failed destroy removed the device")
	}
	if err := d.tool.Destroy(ctx, k); err != nil {
		t.Fatal(err)
	}
}

func TestLifecycleFullGPUIsInsufficientResources(t *testing.T) {
	ctx := context.Background()
	s := memSim(t, "dgx-h100")
	d, uuid := toolOn(t, s, "0")
	if _, err := d.tool.Create(
		ctx, lifecycle.Key{Card: uuid[0], Profile: "4g.40gb", Start: 0},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := d.tool.Create(
		ctx, lifecycle.Key{Card: uuid[0], Profile: "3g.40gb", Start: 0},
	); !errors.Is(
		err,
		nvml.ErrInsufficientResources,
	) {
		t.Fatalf("3g over 4g: %v", err)
	}
}

// TestLifecycleNeverTouchesStaticDevices: an administrator's instances,
// complete or half-made, on a GPU not named dynamic are published as
// they are and never destroyed, and nothing is made there.
func TestLifecycleNeverTouchesStaticDevices(t *testing.T) {
	ctx := context.Background()
	s := memSim(t, "dgx-h100")
	admin, err := s.CreateGPUInstance(0, 9, mig.Placement{Start: 0, Size: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateComputeInstance(0, admin.ID, 2); err != nil {
		t.Fatal(err)
	}
	// admin, half-made
	if _, err := s.CreateGPUInstance(0, 19, mig.Placement{Start: 6, Size: 1}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.GPUInstances(0)
	d, uuid := toolOn(t, s, "1")
	if err := d.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.PrepareClaim(
		ctx, claim("c"), []kit.AllocatedDevice{alloc("gpu-0-3g-40gb-4")},
	); err == nil {
		t.Error("prepare of a dynamic device on a static GPU succeeded")
	}
	if err := d.UnprepareClaim(
		ctx, claim("s").ClaimRef, []kit.AllocatedDevice{alloc("gpu-0-3g-40gb-0")},
	); err != nil {
		t.Fatal(err)
	}
	if own, err := d.lc.Owns(lifecycle.Key{Card: uuid[0], Profile: "3g.40gb", Start: 0}); own ||
		err != nil {
		t.Errorf("the administrator's device is owned: %v, %v", own, err)
	}
	inv, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(names(inv), " "); !strings.Contains(all, "gpu-0-3g-40gb-0") ||
		strings.Contains(all, "gpu-0-1g-10gb-6") {
		t.Fatalf("published %s: want the complete static device and not the half-made one", all)
	}
	after, _ := s.GPUInstances(0)
	if len(after) != len(before) ||
		after[0].ComputeInstances[0].UUID != before[0].ComputeInstances[0].UUID {
		t.Fatalf("static devices changed: %+v -> %+v", before, after)
	}
}

// TestLifecycleCompletesAHalfMadeOwnDevice: a Create retried after a
// crash finds the GPU instance by key (no UUID is recorded) and completes
// it.
func TestLifecycleCompletesAHalfMadeOwnDevice(t *testing.T) {
	ctx := context.Background()
	s := memSim(t, "dgx-h100")
	d, uuid := toolOn(t, s, "5")
	k := lifecycle.Key{Card: uuid[5], Profile: "1g.20gb", Start: 6}
	gi, err := s.CreateGPUInstance(5, 15, mig.Placement{Start: 6, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tool.Create(ctx, k); err != nil {
		t.Fatal(err)
	}
	made, _ := d.tool.madeDevice(k)
	if made.ID != gi.ID || len(made.ComputeInstances) != 1 {
		t.Fatalf("completed %+v, want GPU instance %d with a compute instance", made, gi.ID)
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
