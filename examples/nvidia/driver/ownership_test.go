package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// prepared prepares a claim the way the runtime does and returns what
// the runtime holds of it after a restart.
func (f *fixture) prepared(t *testing.T, uid string, devs ...kit.AllocatedDevice) kit.HeldClaim {
	t.Helper()
	ctx := context.Background()
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	c := claim(uid)
	if err := f.d.PrepareClaim(ctx, c, devs); err != nil {
		t.Fatal(err)
	}
	h := kit.HeldClaim{ClaimRef: c.ClaimRef, Prepared: true}
	for _, dev := range devs {
		pd, err := f.d.PrepareDevice(ctx, c, dev)
		if err != nil {
			t.Fatal(err)
		}
		h.Devices = append(h.Devices, kit.HeldDevice{AllocatedDevice: dev, Data: pd.Data})
	}
	return h
}

// restart opens a new driver on the fixture's state and reconciles it
// with the claims the runtime holds, as the runtime does at start.
func (f *fixture) restart(t *testing.T, nv nvml.Interface, held ...kit.HeldClaim) {
	t.Helper()
	d, err := New(
		nv,
		"node-1",
		WithStateDir(filepath.Join(f.dir, "state")),
		WithRepublishDelay(0),
		f.dynamicGPUs(t),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Reconcile(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Inventory(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.d = d
}

func instances(t *testing.T, nv nvml.Interface, gpu int) []string {
	t.Helper()
	gis, err := nv.GPUInstances(gpu)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, gi := range gis {
		out = append(
			out,
			mig.Instance{Profile: profileOf(gi.ProfileID), Start: gi.Placement.Start}.String(),
		)
	}
	return out
}

func profileOf(id int) string {
	for _, p := range []struct {
		id   int
		name string
	}{{19, "1g.18gb"}, {14, "2g.35gb"}, {9, "3g.71gb"}, {5, "4g.71gb"}, {0, "7g.141gb"}} {
		if p.id == id {
			return p.name
		}
	}
	return "?"
}

// Item 1: the journal deleted with claims prepared. The GPU stays
// dynamic (the decision is recorded, not re-inferred), the held claim's
// device is adopted, and its unprepare destroys it.
func TestLostJournalKeepsOwnership(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	dev := alloc("gpu-4-1g-18gb-0")
	held := f.prepared(t, "c1", dev)
	if err := os.Remove(filepath.Join(f.dir, "state", "intents.json")); err != nil {
		t.Fatal(err)
	}
	f.restart(t, f.sim, held)
	if info, ok := f.d.deviceInfo("gpu-4-1g-18gb-0"); !ok || info.mode != ModeDynamic {
		t.Errorf(
			"gpu-4-1g-18gb-0 after losing the journal: %+v (published %v), want dynamic",
			info,
			ok,
		)
	}
	if info, ok := f.d.deviceInfo("gpu-4-1g-18gb-1"); !ok || info.mode != ModeDynamic {
		t.Errorf(
			"gpu-4-1g-18gb-1 after losing the journal: %+v (published %v), want a dynamic device "+
				"beside the held one",
			info,
			ok,
		)
	}
	if got := instances(t, f.sim, 4); len(got) != 1 {
		t.Fatalf("GPU 4 after the restart: %v, want the held device kept", got)
	}
	if err := f.d.UnprepareClaim(ctx, held.ClaimRef, []kit.AllocatedDevice{dev}); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 4); len(got) != 0 {
		t.Errorf("GPU 4 after unprepare: %v, want the device destroyed", got)
	}
}

// Item 2: the runtime's checkpoint wiped with the MIG device still
// there. No held claim names it: it is destroyed at start, so no later
// claim gets its UUID.
func TestLostCheckpointDestroysUnheldDevices(t *testing.T) {
	f := newFixture(t)
	f.prepared(t, "c1", alloc("gpu-4-1g-18gb-0"))
	kept := f.prepared(t, "c2", alloc("gpu-5-2g-35gb-0"))
	f.restart(t, f.sim, kept) // c1's record is gone
	if got := instances(t, f.sim, 4); len(got) != 0 {
		t.Errorf("GPU 4 after the restart: %v, want the unheld device destroyed", got)
	}
	if got := instances(t, f.sim, 5); len(got) != 1 {
		t.Errorf("GPU 5 after the restart: %v, want the held device kept", got)
	}
	// Static MIG devices are never touched.
	if got := instances(t, f.sim, 3); len(got) != 3 {
		t.Errorf("static GPU 3 after the restart: %v, want its 3 devices", got)
	}
	// A claim released as lost (record corrupt, claim gone): the runtime
	// calls UnprepareClaim without devices; the journal knows them.
	if err := f.d.UnprepareClaim(context.Background(), kept.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 5); len(got) != 0 {
		t.Errorf("GPU 5 after releasing its claim without devices: %v, want destroyed", got)
	}
}

// shiftedNVML is the simulator with GPU gone hidden, as NVML shows a node
// where a GPU was bound to vfio-pci: the GPUs after it move down one
// index.
type shiftedNVML struct {
	*nvmlsim.Sim
	gone int
}

func (s shiftedNVML) real(i int) int {
	if i >= s.gone {
		return i + 1
	}
	return i
}

func (s shiftedNVML) GPUs() ([]nvml.GPU, error) {
	gs, err := s.Sim.GPUs()
	var out []nvml.GPU
	for _, g := range gs {
		if g.Index == s.gone {
			continue
		}
		if g.Index > s.gone {
			g.Index--
		}
		out = append(out, g)
	}
	return out, err
}
func (s shiftedNVML) MigMode(gpu int) (nvml.MigMode, error) { return s.Sim.MigMode(s.real(gpu)) }
func (s shiftedNVML) GPUInstanceProfiles(gpu int) ([]nvml.GPUInstanceProfile, error) {
	return s.Sim.GPUInstanceProfiles(s.real(gpu))
}
func (s shiftedNVML) ComputeInstanceProfiles(gpu, gi int) ([]nvml.ComputeInstanceProfile, error) {
	return s.Sim.ComputeInstanceProfiles(s.real(gpu), gi)
}
func (s shiftedNVML) GPUInstances(gpu int) ([]nvml.GPUInstance, error) {
	gis, err := s.Sim.GPUInstances(s.real(gpu))
	for i := range gis {
		gis[i].GPU = gpu
	}
	return gis, err
}
func (s shiftedNVML) CreateGPUInstance(gpu, p int, at mig.Placement) (nvml.GPUInstance, error) {
	gi, err := s.Sim.CreateGPUInstance(s.real(gpu), p, at)
	gi.GPU = gpu
	return gi, err
}
func (s shiftedNVML) CreateComputeInstance(gpu, gi, p int) (nvml.ComputeInstance, error) {
	return s.Sim.CreateComputeInstance(s.real(gpu), gi, p)
}
func (s shiftedNVML) DestroyComputeInstance(gpu, gi, ci int) error {
	return s.Sim.DestroyComputeInstance(s.real(gpu), gi, ci)
}
func (s shiftedNVML) DestroyGPUInstance(gpu, gi int) error {
	return s.Sim.DestroyGPUInstance(s.real(gpu), gi)
}

// Item 4: the GPUs' NVML indexes change between prepare and unprepare
// (GPU 0 went to vfio-pci). The unprepare destroys the claim's device on
// its own physical GPU, not the instance at the same place on the GPU
// that now has the old index.
func TestIndexChangeDestroysOnTheRightGPU(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a := f.prepared(t, "a", alloc("gpu-5-3g-71gb-0"))
	b := f.prepared(t, "b", alloc("gpu-6-3g-71gb-0"))
	f.restart(t, shiftedNVML{Sim: f.sim, gone: 0}, a, b) // physical GPU 6 is index 5 now
	if err := f.d.UnprepareClaim(
		ctx, a.ClaimRef, []kit.AllocatedDevice{a.Devices[0].AllocatedDevice},
	); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 5); len(got) != 0 {
		t.Errorf("physical GPU 5 after unpreparing claim a: %v, want its device destroyed", got)
	}
	if got := instances(t, f.sim, 6); len(got) != 1 {
		t.Errorf("physical GPU 6 after unpreparing claim a: %v, want claim b's device kept", got)
	}
}

// A device is destroyed only when its last holder goes.
func TestDestroyedWhenLastHolderGoes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	dev := alloc("gpu-4-2g-35gb-0")
	a := f.prepared(t, "a", dev)
	f.prepared(t, "b", dev)
	if err := f.d.UnprepareClaim(ctx, a.ClaimRef, []kit.AllocatedDevice{dev}); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 4); len(got) != 1 {
		t.Fatalf("GPU 4 after the first holder went: %v, want the device kept", got)
	}
	if err := f.d.UnprepareClaim(ctx, claim("b").ClaimRef, []kit.AllocatedDevice{dev}); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 4); len(got) != 0 {
		t.Errorf("GPU 4 after the last holder went: %v, want the device destroyed", got)
	}
}

// Item 3: a claim with admin access gets its container edits only: no
// MIG device is made or destroyed, no time-slice set or reset.
func TestAdminAccessChangesNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	user := alloc("gpu-4-1g-18gb-0")
	f.prepared(t, "user", user)
	admin := alloc("gpu-4-1g-18gb-0")
	admin.AdminAccess = true
	h := f.prepared(t, "admin", admin)
	if !strings.Contains(string(h.Devices[0].Data), "MIG-") {
		t.Errorf("admin claim's data %s: want the existing device's UUID", h.Devices[0].Data)
	}
	if err := f.d.UnprepareDevice(ctx, h.ClaimRef, admin, h.Devices[0].Data); err != nil {
		t.Fatal(err)
	}
	if err := f.d.UnprepareClaim(ctx, h.ClaimRef, []kit.AllocatedDevice{admin}); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 4); len(got) != 1 {
		t.Errorf("GPU 4 after the admin claim's unprepare: %v, want the user's device kept", got)
	}
	// A dynamic device no one made is not created for admin access.
	absent := alloc("gpu-6-1g-18gb-0")
	absent.AdminAccess = true
	if err := f.d.PrepareClaim(ctx, claim("admin2"), []kit.AllocatedDevice{absent}); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, f.sim, 6); len(got) != 0 {
		t.Errorf("GPU 6 after an admin claim's prepare: %v, want nothing created", got)
	}

	// Time-slice: the user's Long stays through an admin claim with
	// another time-slice and its unprepare.
	ts := `{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
		`{"strategy":"TimeSlicing","timeSlicing":{"interval":"%s"}}}`
	f.prepared(t, "tsuser", alloc("gpu-0", strings.Replace(ts, "%s", "Long", 1)))
	adm := alloc("gpu-0", strings.Replace(ts, "%s", "Short", 1))
	adm.AdminAccess = true
	ha := f.prepared(t, "tsadmin", adm)
	if got, _ := f.sim.TimeSlice(0); got != nvml.TimeSliceLong {
		t.Errorf("GPU 0 time-slice after the admin claim's prepare: %s, want the user's Long", got)
	}
	if err := f.d.UnprepareDevice(ctx, ha.ClaimRef, adm, ha.Devices[0].Data); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.sim.TimeSlice(0); got != nvml.TimeSliceLong {
		t.Errorf(
			"GPU 0 time-slice after the admin claim's unprepare: %s, want the user's Long",
			got,
		)
	}
	var pd preparedData
	_ = json.Unmarshal(ha.Devices[0].Data, &pd)
	if pd.TimeSlice != "" {
		t.Errorf("admin claim's prepared data %+v records a time-slice", pd)
	}
}

// Item 10: a dynamic MIG device that fit-only publishing withdrew (a 7g
// on its GPU hid everything else) and that the republish has not
// restored yet is still prepared once its place is free: the driver
// judges it from its name and NVML, not from its last inventory.
func TestPrepareWithdrawnDevice(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(time.Hour))
	big := alloc("gpu-4-7g-141gb-0")
	f.prepared(t, "big", big)
	if _, err := f.d.Inventory(ctx); err != nil { // the republish after the create
		t.Fatal(err)
	}
	if _, ok := f.d.deviceInfo("gpu-4-1g-18gb-0"); ok {
		t.Fatal("gpu-4-1g-18gb-0 still published beside a 7g; the test needs it withdrawn")
	}
	if err := f.d.UnprepareClaim(
		ctx, claim("big").ClaimRef, []kit.AllocatedDevice{big},
	); err != nil {
		t.Fatal(err)
	}
	// The scheduler allocated from the slices it saw before the 7g.
	for i, dev := range []string{"gpu-4-1g-18gb-0", "gpu-4-1g-18gb-1"} {
		c := claim(fmt.Sprint("small-", i))
		if err := f.d.PrepareClaim(ctx, c, []kit.AllocatedDevice{alloc(dev)}); err != nil {
			t.Errorf("prepare %s withdrawn by the last inventory: %v", dev, err)
		}
		if _, err := f.d.PrepareDevice(ctx, c, alloc(dev)); err != nil {
			t.Errorf("prepare device %s: %v", dev, err)
		}
	}
	if got := instances(t, f.sim, 4); len(got) != 2 {
		t.Errorf("GPU 4: %v, want the two 1g devices", got)
	}
	// Names that are no device of this driver are still refused.
	for _, dev := range []string{
		"gpu-4-1g-18gb-9", "gpu-2-1g-18gb-0", "gpu-4-1g-35gb-0", "gpu-42-1g-18gb-0",
	} {
		if err := f.d.PrepareClaim(
			ctx, claim("bad"), []kit.AllocatedDevice{alloc(dev)},
		); err == nil {
			t.Errorf("prepare of %s, no device of this driver: succeeded", dev)
		}
	}
}

// A MIG device whose destroy fails at unprepare is destroyed by the
// kubelet's next unprepare of the claim, which then succeeds: it never
// leaks (once, the retry found nothing to do and the device stayed until
// the driver restarted).
func TestFailedDestroyIsRetried(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(0))
	c := f.prepared(t, "a", alloc("gpu-5-1g-18gb-3"))
	if got := instances(t, f.sim, 5); len(got) != 1 {
		t.Fatalf("GPU 5 after the prepare: %v", got)
	}
	if err := f.sim.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultDestroyGPUInstance, GPU: 5, Code: nvml.ErrorUnknown},
	); err != nil {
		t.Fatal(err)
	}
	if err := f.d.UnprepareClaim(ctx, c.ClaimRef, nil); err == nil {
		t.Fatal("unprepare with a failing destroy succeeded")
	}
	if err := f.d.UnprepareClaim(ctx, c.ClaimRef, nil); err != nil {
		t.Fatalf("unprepare again: %v", err)
	}
	if got := instances(t, f.sim, 5); len(got) != 0 {
		t.Errorf("GPU 5 after the claim was unprepared: %v, want nothing (leaked)", got)
	}
	if in, err := f.d.lc.Intents(); err != nil || len(in) != 0 {
		t.Errorf("journal after the unprepare: %v, %v", in, err)
	}
}
