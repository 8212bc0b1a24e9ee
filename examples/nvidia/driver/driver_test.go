package driver

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// testSetup is the simulated DGX H200 of the README: GPUs 0-1 full, 2-3
// static MIG, 4-7 dynamic MIG.
var testSetup = nvmlsim.Setup{
	MIGGPUs: []int{2, 3, 4, 5, 6, 7},
	Instances: []nvmlsim.Instance{
		{GPU: 2, Profile: "4g.71gb", Start: 0}, {GPU: 2, Profile: "3g.71gb", Start: 4},
		{
			GPU:     3,
			Profile: "3g.71gb",
			Start:   0,
		}, {GPU: 3, Profile: "2g.35gb", Start: 4}, {GPU: 3, Profile: "1g.18gb", Start: 6},
	},
}

type fixture struct {
	sim   *nvmlsim.Sim
	state string
	dir   string
	d     *Driver
	// dynamic are the UUIDs of the dynamic MIG GPUs, 4-7
	// (WithDynamicGPUs, which every driver of the fixture gets).
	dynamic []string
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "gpus.json")
	sim, err := nvmlsim.Open(
		state,
		nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(testSetup),
		nvmlsim.WithPollInterval(5*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{sim: sim, state: state, dir: dir}
	f.d = f.open(t, opts...)
	return f
}

// dynamicGPUs names GPUs 4-7 of f's simulator (by UUID, which stays when
// the NVML indexes change) the dynamic MIG GPUs.
func (f *fixture) dynamicGPUs(t *testing.T) Option {
	t.Helper()
	if f.dynamic == nil {
		gpus, err := f.sim.GPUs()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gpus[4:8] {
			f.dynamic = append(f.dynamic, g.UUID)
		}
	}
	return WithDynamicGPUs(f.dynamic...)
}

func (f *fixture) open(t *testing.T, opts ...Option) *Driver {
	t.Helper()
	d, err := New(
		f.sim,
		"node-1",
		append([]Option{WithStateDir(filepath.Join(f.dir, "state")), f.dynamicGPUs(t)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func names(inv *device.Inventory) []string {
	var out []string
	for _, p := range inv.Pools {
		for _, d := range p.Devices {
			out = append(out, d.Name())
		}
	}
	return out
}

func TestInventoryModes(t *testing.T) {
	f := newFixture(t)
	inv, err := f.d.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Validate(); err != nil {
		t.Fatalf("inventory does not validate: %v", err)
	}
	got := names(inv)
	want := []string{
		"gpu-0",
		"gpu-1",
		"gpu-2-4g-71gb-0",
		"gpu-2-3g-71gb-4",
		"gpu-3-3g-71gb-0",
		"gpu-3-2g-35gb-4",
		"gpu-3-1g-18gb-6",
	}
	if len(got) < len(want) || strings.Join(got[:len(want)], ",") != strings.Join(want, ",") {
		t.Fatalf("first devices %v, want %v", got, want)
	}
	// Dynamic: GPUs 4-7 whole, and every profile x placement of them.
	dyn := got[len(want):]
	// the GPU whole; mig.DefaultProfiles: 1g.18gb x7, 2g.35gb x3, 3g.71gb x2, 4g.71gb, 7g.141gb
	perGPU := 1
	for _, n := range mig.DefaultProfiles(f.sim.Product()) {
		pr, _ := f.sim.Product().Profile(n)
		perGPU += len(pr.Starts)
	}
	if perGPU != 15 || len(dyn) != 4*perGPU {
		t.Errorf("%d dynamic devices, want %d", len(dyn), 4*perGPU)
	}
	// Fit-only: a MIG device on GPU 5 removes what overlaps it, not
	// more; the profiles not advertised are absent.
	for _, n := range dyn {
		if strings.Contains(n, "-me-") || strings.Contains(n, "1g-35gb") {
			t.Errorf("device %s of a profile not advertised by default", n)
		}
		if gpu := strings.Join(strings.SplitN(n, "-", 3)[:2], "-"); gpu != "gpu-4" &&
			gpu != "gpu-5" &&
			gpu != "gpu-6" &&
			gpu != "gpu-7" {
			t.Errorf("dynamic device %s on a GPU that is not dynamic", n)
		}
	}
	info, _ := f.d.deviceInfo("gpu-2-3g-71gb-4")
	if info.mode != ModeStatic || !strings.HasPrefix(info.uuid, "MIG-") {
		t.Errorf("static device info %+v", info)
	}
}

func claim(uid string) kit.Claim {
	return kit.Claim{
		ClaimRef: kit.ClaimRef{UID: types.UID(uid), Namespace: "default", Name: "c-" + uid},
	}
}

func alloc(dev string, cfg ...string) kit.AllocatedDevice {
	a := kit.AllocatedDevice{Request: "gpu", Pool: "node-1", Device: dev}
	for _, c := range cfg {
		a.Config = append(a.Config, kit.OpaqueConfig{Parameters: json.RawMessage(c)})
	}
	return a
}

// A dynamic MIG claim creates its device at PrepareClaim, hands the
// container its UUID, and destroys it at UnprepareClaim.
func TestDynamicMIGLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	c := claim("u1")
	devs := []kit.AllocatedDevice{alloc("gpu-5-1g-18gb-3")}
	if err := f.d.PrepareClaim(ctx, c, devs); err != nil {
		t.Fatal(err)
	}
	gis, _ := f.sim.GPUInstances(5)
	if len(gis) != 1 || gis[0].Placement.Start != 3 || len(gis[0].ComputeInstances) != 1 {
		t.Fatalf("GPU 5 instances after prepare: %+v", gis)
	}
	uuid := gis[0].ComputeInstances[0].UUID
	pd, err := f.d.PrepareDevice(ctx, c, devs[0])
	if err != nil {
		t.Fatal(err)
	}
	edits, _ := f.d.ClaimEdits(ctx, c, devs)
	if s := specString(t, pd.Edits) + specString(t, edits); !strings.Contains(
		s,
		EnvDevicePrefix+"GPU_5_1G_18GB_3="+uuid,
	) ||
		!strings.Contains(s, EnvVisibleDevices+"="+VisibleDevicesVoid) ||
		strings.Contains(s, "/dev/nvidia") {
		t.Errorf("edits %s: want the MIG UUID and no device nodes", s)
	}
	var file ClaimFile
	b, err := os.ReadFile(f.d.claimFile("u1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &file); err != nil || len(file.Devices) != 1 ||
		file.Devices[0].UUID != uuid ||
		file.Devices[0].Profile != "1g.18gb" {
		t.Errorf("devices file %s", b)
	}
	// The device sits on GPU 5, whose pool (a pool per dynamic GPU) now
	// starts with the 1g placement the planner takes next beside it.
	inv, _ := f.d.Inventory(ctx)
	found := false
	for _, p := range inv.Pools {
		if p.Name != mig.GPUPoolName("node-1", 5) {
			continue
		}
		found = true
		if first := p.Devices[0].Name(); !strings.HasPrefix(first, "gpu-5-1g-18gb-") ||
			first == "gpu-5-1g-18gb-3" {
			t.Errorf(
				"GPU 5's pool starts with %s, want a free 1g.18gb placement (the planner's order)",
				first,
			)
		}
	}
	if !found {
		t.Errorf("no pool %s in %v", mig.GPUPoolName("node-1", 5), names(inv))
	}
	all := strings.Join(names(inv), " ")
	if !strings.Contains(all, "gpu-5-1g-18gb-3") || strings.Contains(all, "gpu-5-7g-141gb-0") ||
		strings.Contains(all, "gpu-5-4g-71gb-0") ||
		!strings.Contains(all, "gpu-5-3g-71gb-4") {
		t.Errorf(
			"GPU 5 with 1g@3 publishes %s: want the in-use device and what fits beside it only",
			all,
		)
	}
	if err := f.d.UnprepareDevice(ctx, c.ClaimRef, devs[0], pd.Data); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := f.d.UnprepareClaim(ctx, c.ClaimRef, devs); err != nil {
			t.Fatal(err)
		}
	}
	if gis, _ := f.sim.GPUInstances(5); len(gis) != 0 {
		t.Errorf("GPU 5 instances after unprepare: %+v", gis)
	}
	if _, err := os.Stat(f.d.claimFile("u1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("devices file left: %v", err)
	}
}

// An administrator's MIG device is never destroyed, even when a claim
// that had it is unprepared.
func TestStaticMIGUntouched(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	c := claim("s1")
	devs := []kit.AllocatedDevice{alloc("gpu-3-1g-18gb-6")}
	if err := f.d.PrepareClaim(ctx, c, devs); err != nil {
		t.Fatal(err)
	}
	if err := f.d.UnprepareClaim(ctx, c.ClaimRef, devs); err != nil {
		t.Fatal(err)
	}
	if gis, _ := f.sim.GPUInstances(3); len(gis) != 3 {
		t.Errorf("GPU 3 has %d instances, want the administrator's 3", len(gis))
	}
}

// TestTimeSlicing sets a GPU's time-slice from NVIDIA's GpuConfig field
// names (sharing.timeSlicingConfig.interval) and from the former
// timeSlicing, and resets it at unprepare.
func TestTimeSlicing(t *testing.T) {
	for name, field := range map[string]string{
		"NVIDIA's name": "timeSlicingConfig", "former name": "timeSlicing",
	} {
		t.Run(name, func(t *testing.T) { testTimeSlicing(t, field) })
	}
}

func testTimeSlicing(t *testing.T, field string) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := `{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
		`{"strategy":"TimeSlicing","` + field + `":{"interval":"Long"}}}`
	c := claim("t1")
	dev := alloc("gpu-1", cfg)
	if err := f.d.PrepareClaim(ctx, c, []kit.AllocatedDevice{dev}); err != nil {
		t.Fatal(err)
	}
	pd, err := f.d.PrepareDevice(ctx, c, dev)
	if err != nil {
		t.Fatal(err)
	}
	if ts, _ := f.sim.TimeSlice(1); ts != nvml.TimeSliceLong {
		t.Errorf("GPU 1 time-slice %q, want Long", ts)
	}
	if s := specString(t, pd.Edits); !strings.Contains(s, EnvTimeSlicePrefix+"GPU_1=Long") {
		t.Errorf("edits %s lack the time-slice", s)
	}
	if err := f.d.UnprepareDevice(ctx, c.ClaimRef, dev, pd.Data); err != nil {
		t.Fatal(err)
	}
	if ts, _ := f.sim.TimeSlice(1); ts != nvml.TimeSliceDefault {
		t.Errorf("GPU 1 time-slice after unprepare %q, want Default", ts)
	}
}

func TestConfigIsStrict(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ dev, cfg, want string }{
		"unknown field": {
			"gpu-0",
			`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
				`{"strategy":"TimeSlicing","timeSlicing":{"intervall":"Long"}}}`,
			`"intervall"`,
		},
		"bad interval": {
			"gpu-0",
			`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
				`{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`,
			`"Forever"`,
		},
		"both names": {
			"gpu-0",
			`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
				`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"},"timeSlicingConfig":` +
				`{"interval":"Long"}}}`,
			"both set",
		},
		"bad kind": {
			"gpu-0",
			`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"MigConfig"}`,
			`"MigConfig"`,
		},
		"MIG timeslice": {
			"gpu-5-1g-18gb-0",
			`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
				`{"strategy":"TimeSlicing"}}`,
			"only full GPUs",
		},
		"bad strategy": {
			"gpu-0",
			`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
				`{"strategy":"MPS"}}`,
			`"MPS"`,
		},
	} {
		err := f.d.PrepareClaim(ctx, claim("x"), []kit.AllocatedDevice{alloc(tc.dev, tc.cfg)})
		if !errors.Is(err, kit.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalidConfig naming %s", name, err, tc.want)
		}
	}
	if gis, _ := f.sim.GPUInstances(5); len(gis) != 0 {
		t.Errorf("a refused claim made MIG devices: %+v", gis)
	}
}

func TestHealth(t *testing.T) {
	f := newFixture(t, WithRepublishDelay(0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan device.Event, 10)
	go func() { _ = f.d.Watch(ctx, events) }()
	first := <-events
	healthy := 0
	for _, r := range first.Health {
		if r.Health == device.Healthy {
			healthy++
		}
	}
	if first.Type != device.EventHealth || healthy != len(f.d.deviceNames()) || healthy < 2 {
		t.Fatalf("first event %+v: want every device Healthy", first)
	}
	if err := f.sim.RaiseXID(4, 13, -1, -1); err != nil { // application error: ignored
		t.Fatal(err)
	}
	// Ignored: GPU 4's devices are republished with the informational
	// taint, and every device is still healthy.
	inv := <-events
	if inv.Type != device.EventInventoryChanged {
		t.Fatalf("ignored XID 13: event %+v, want the inventory republished", inv.Type)
	}
	for _, sl := range inv.Inventory.ResourceSlices("node-1") {
		for _, d := range sl.Spec.Devices {
			tainted := len(d.Taints) == 1 && d.Taints[0].Key == TaintIgnoredXID &&
				d.Taints[0].Value == "XID13"
			if tainted != strings.HasPrefix(d.Name, "gpu-4") {
				t.Errorf("ignored XID 13 on GPU 4: device %s taints %+v", d.Name, d.Taints)
			}
		}
	}
	if ev := <-events; ev.Type != device.EventHealth || len(unhealthy(ev)) != 0 {
		t.Errorf("after ignored XID 13: %+v, want every device healthy", ev)
	}
	if err := f.sim.RaiseXID(3, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	ev := <-events
	if len(ev.Health) != 3 {
		t.Fatalf("XID 79 on GPU 3 reported %+v, want its 3 MIG devices", ev.Health)
	}
	for _, r := range ev.Health {
		if r.Health != device.Unhealthy || r.Reason != ReasonGPULost ||
			r.TaintEffect != device.NoExecute ||
			!strings.HasPrefix(r.Device.Device, "gpu-3-") {
			t.Errorf("report %+v", r)
		}
	}
	if err := f.sim.RecoverGPU(3); err != nil {
		t.Fatal(err)
	}
	ev = <-events
	for _, r := range ev.Health {
		if r.Health != device.Healthy {
			t.Errorf("after recovery %+v", r)
		}
	}
	if len(ev.Health) != 3 {
		t.Errorf("recovery reported %d devices, want 3", len(ev.Health))
	}

	// An XID confined to a GPU instance: only that MIG device.
	info, _ := f.d.deviceInfo("gpu-2-3g-71gb-4")
	if err := f.sim.RaiseXID(2, 94, info.gi, info.ci); err != nil {
		t.Fatal(err)
	}
	ev = <-events
	for _, r := range ev.Health {
		if (r.Health == device.Unhealthy) != (r.Device.Device == "gpu-2-3g-71gb-4") {
			t.Errorf("XID 94 in gpu-2-3g-71gb-4's instance: %+v", r)
		}
	}

	// Devices that appear on an unhealthy dynamic GPU are unhealthy.
	if err := f.sim.RaiseXID(5, 48, -1, -1); err != nil {
		t.Fatal(err)
	}
	<-events
	if err := f.d.PrepareClaim(
		ctx, claim("h1"), []kit.AllocatedDevice{alloc("gpu-5-7g-141gb-0")},
	); err != nil {
		t.Fatal(err)
	}
	if err := f.d.UnprepareClaim(
		ctx, claim("h1").ClaimRef, []kit.AllocatedDevice{alloc("gpu-5-7g-141gb-0")},
	); err != nil {
		t.Fatal(err)
	}
	// The republishes (after the create, after the destroy) each report
	// GPU 5's devices of the moment: all unhealthy; the last has all 14.
	n := 0
	timeout := time.After(10 * time.Second)
	for n != 14 {
		select {
		case ev = <-events:
		case <-timeout:
			t.Fatalf("no report on GPU 5's 14 devices; last had %d", n)
		}
		if ev.Type != device.EventHealth {
			continue
		}
		n = 0
		for _, r := range ev.Health {
			if strings.HasPrefix(r.Device.Device, "gpu-5-") {
				n++
				if r.Health != device.Unhealthy || r.Reason != "XID48" {
					t.Errorf("after the republish %+v, want XID48", r)
				}
			}
		}
	}
}

func TestDeviceClasses(t *testing.T) {
	cs := DeviceClasses([]string{"1g.18gb", "MIG 1g.18gb+me", "1g.18gb"})
	var got []string
	for _, c := range cs {
		er := ""
		if c.Spec.ExtendedResourceName != nil {
			er = *c.Spec.ExtendedResourceName
		}
		got = append(got, c.Name+"="+er)
	}
	want := "gpu.nvidia.drakit.dev=nvidia.com/gpu mig.nvidia.drakit.dev= " +
		"shared.gpu.nvidia.drakit.dev=nvidia.com/gpu.shared " +
		"mig-1g-18gb.nvidia.drakit.dev=nvidia.com/mig-1g.18gb " +
		"mig-1g-18gb-me.nvidia.drakit.dev=nvidia.com/mig-1g.18gb.me"
	if strings.Join(got, " ") != want {
		t.Errorf("classes %v\nwant %s", got, want)
	}
}

// specString renders edits through the CDI writer (as the runtime does)
// into JSON.
func specString(t *testing.T, e *cdi.Edits) string {
	t.Helper()
	w, err := cdi.NewWriter(t.TempDir(), "nvidia.drakit.dev", "gpu")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := w.Spec(
		cdi.Claim{
			UID:       "u",
			Namespace: "n",
			Name:      "c",
			Devices:   []cdi.Device{{Name: "d", Edits: e}},
		},
	)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(spec)
	return string(b)
}

// writeMIGCaps writes, under procRoot, the capability files of MIG device
// dev of GPU gpu as the NVIDIA kernel driver has them, with the GPU
// instance's and the compute instance's device file minors, and
// procRoot/devices with the nvidia-caps major (capsMajorForTests). No
// capability device node is made anywhere.
func writeMIGCaps(
	t *testing.T,
	f *fixture,
	procRoot string,
	gpu int,
	dev string,
	giMinor, ciMinor int,
) {
	t.Helper()
	info, _ := f.d.deviceInfo(dev)
	writeMIGCapsAt(t, procRoot, gpu, info.gi, info.ci, giMinor, ciMinor)
}

// writeMIGCapsAt is writeMIGCaps for GPU instance gi and compute
// instance ci of GPU gpu.
func writeMIGCapsAt(t *testing.T, procRoot string, gpu, gi, ci, giMinor, ciMinor int) {
	t.Helper()
	if err := os.MkdirAll(procRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	devices := "Character devices:\n  1 mem\n195 nvidia-frontend\n" + strconv.Itoa(
		capsMajorForTests,
	) + " nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n  7 loop\n"
	if err := os.WriteFile(filepath.Join(procRoot, "devices"), []byte(devices), 0o644); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(
		procRoot,
		"driver/nvidia/capabilities",
		"gpu"+strconv.Itoa(gpu),
		"mig",
		"gi"+strconv.Itoa(gi),
	)
	cis := "ci" + strconv.Itoa(ci)
	if err := os.MkdirAll(filepath.Join(base, cis), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		file  string
		minor int
	}{{"access", giMinor}, {cis + "/access", ciMinor}} {
		// As the kernel module writes them: the mode in decimal.
		if err := os.WriteFile(
			filepath.Join(base, w.file),
			[]byte(
				"DeviceFileMinor: "+strconv.Itoa(w.minor)+
					"\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
			),
			0o644,
		); err != nil {
			t.Fatal(err)
		}
	}
}

// claimSpecs prepares devs for claim c and returns the CDI specs of each
// device's edits and of the claim's common edits, joined.
func claimSpecs(t *testing.T, f *fixture, c kit.Claim, devs []kit.AllocatedDevice) string {
	t.Helper()
	ctx := context.Background()
	var all string
	for _, dev := range devs {
		pd, err := f.d.PrepareDevice(ctx, c, dev)
		if err != nil {
			t.Fatal(err)
		}
		all += specString(t, pd.Edits)
	}
	edits, err := f.d.ClaimEdits(ctx, c, devs)
	if err != nil {
		t.Fatal(err)
	}
	return all + specString(t, edits)
}

// Dynamic MIG devices carry 8 attributes by default, migMode, profile,
// parentUUID and pcieRoot among them and no GPU facts; with
// WithFullMIGAttributes they carry the GPU facts too. Full GPUs and static
// MIG devices carry the facts either way.
func TestMIGAttributes(t *testing.T) {
	for _, full := range []bool{false, true} {
		var opts []Option
		if full {
			opts = append(opts, WithFullMIGAttributes())
		}
		f := newFixture(t, opts...)
		inv, err := f.d.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, sl := range inv.ResourceSlices("node-1") {
			for _, d := range sl.Spec.Devices {
				i, _ := f.d.deviceInfo(d.Name)
				_, hasArch := d.Attributes[AttrArchitecture]
				if i.mode != ModeDynamic || i.typ == TypeGPU {
					if !hasArch {
						t.Errorf("full=%v: %s (%s) lacks the GPU facts", full, d.Name, i.mode)
					}
					continue
				}
				for _, a := range []string{
					AttrMIGMode,
					mig.AttrProfile,
					AttrParentUUID,
					mig.AttrIndex,
					"resource.kubernetes.io/pcieRoot",
				} {
					if _, ok := d.Attributes[resourceapi.QualifiedName(a)]; !ok {
						t.Errorf("full=%v: %s lacks %s", full, d.Name, a)
					}
				}
				if m := d.Attributes[AttrMIGMode]; m.StringValue == nil ||
					*m.StringValue != ModeDynamic {
					t.Errorf("full=%v: %s migMode %v", full, d.Name, m)
				}
				if n := len(d.Attributes); (!full && (n > 8 || hasArch)) ||
					(full && (n < 16 || !hasArch)) {
					t.Errorf(
						"full=%v: %s has %d attributes (architecture %v)",
						full,
						d.Name,
						n,
						hasArch,
					)
				}
			}
		}
	}
}

// On real hardware a container gets the device nodes: the GPU's, the MIG
// capability nodes of a MIG device (minors and mode from /proc), and the
// control nodes.
func TestRealHardwareEdits(t *testing.T) {
	ctx := context.Background()
	proc := fakeHostProc(t)
	f := newFixture(t, WithSimulatedContainers(false))
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	writeMIGCaps(t, f, proc, 2, "gpu-2-3g-71gb-4", 21, 22)
	all := claimSpecs(
		t,
		f,
		claim("r1"),
		[]kit.AllocatedDevice{alloc("gpu-2-3g-71gb-4"), alloc("gpu-1")},
	)
	// The capability nodes carry their type, numbers and mode: the
	// runtime makes them in the container although the node has none.
	for _, want := range []string{
		`"path":"/dev/nvidia2"`,
		`"path":"/dev/nvidia-caps/nvidia-cap21","type":"c","major":236,"minor":21,"fileMode":292`,
		`"path":"/dev/nvidia-caps/nvidia-cap22","type":"c","major":236,"minor":22,"fileMode":292`,
		`"path":"/dev/nvidia1"`,
		`"path":"/dev/nvidiactl"`,
		`"path":"/dev/nvidia-uvm"`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("edits lack %s: %s", want, all)
		}
	}
	if _, err := readCapability(filepath.Join(proc, "nope")); err == nil {
		t.Error("readCapability of a missing file succeeded")
	}
	for _, bad := range []string{
		"DeviceFileMinor: 3\n",
		"DeviceFileMode: 292\n",
		"DeviceFileMinor: x\nDeviceFileMode: 292\n",
		"DeviceFileMinor: 3\nDeviceFileMode: 4096\n",
	} {
		p := filepath.Join(proc, "bad")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readCapability(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("capability file %q: %v, want an error naming the file", bad, err)
		}
	}
	if err := os.WriteFile(filepath.Join(proc, "devices"), []byte("Character devices:\n195 "+
		"nvidia-frontend\n\nBlock devices:\n236 nvidia-caps\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := MIGCapabilityNodes(proc, 2, 1, 0); err == nil ||
		!strings.Contains(err.Error(), "no nvidia-caps line") {
		t.Errorf("a /proc/devices without a nvidia-caps character device: %v, want an error "+
			"that says so", err)
	}
}

// fakeHostProc makes the drivers New makes until the test ends read the
// kernel's files (/proc/devices, /proc/driver/nvidia) from a folder of
// their own, which it returns.
func fakeHostProc(t *testing.T) string {
	t.Helper()
	proc, was := t.TempDir(), hostProc
	hostProc = proc
	t.Cleanup(func() { hostProc = was })
	return proc
}

// capsMajorForTests is the nvidia-caps major writeMIGCaps puts in
// /proc/devices.
const capsMajorForTests = 236

// A claim with two MIG devices on one GPU gets both; a claim whose second
// device cannot be made (it overlaps the first) fails, and the undo the
// runtime then runs (UnprepareClaim) leaves nothing behind.
func TestTwoMIGDevicesInOneClaim(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	c := claim("two")
	devs := []kit.AllocatedDevice{alloc("gpu-6-3g-71gb-0"), alloc("gpu-6-3g-71gb-4")}
	devs[1].Request = "gpu2"
	if err := f.d.PrepareClaim(ctx, c, devs); err != nil {
		t.Fatal(err)
	}
	s := claimSpecs(t, f, c, devs)
	gis, _ := f.sim.GPUInstances(6)
	if len(gis) != 2 {
		t.Fatalf("GPU 6 instances %+v, want two", gis)
	}
	for i, dev := range devs {
		if want := EnvDevicePrefix + envSuffix(dev.Device) + "=" +
			gis[i].ComputeInstances[0].UUID; !strings.Contains(
			s,
			want,
		) {
			t.Errorf("the claim's edits %s lack %s", s, want)
		}
	}
	if err := f.d.UnprepareClaim(ctx, c.ClaimRef, devs); err != nil {
		t.Fatal(err)
	}

	bad := []kit.AllocatedDevice{alloc("gpu-7-3g-71gb-0"), alloc("gpu-7-4g-71gb-0")}
	err := f.d.PrepareClaim(ctx, claim("bad"), bad)
	if !errors.Is(err, nvml.ErrInsufficientResources) {
		t.Errorf("overlapping devices: %v, want ErrInsufficientResources", err)
	}
	if err := f.d.UnprepareClaim(ctx, claim("bad").ClaimRef, bad); err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{6, 7} {
		if gis, _ := f.sim.GPUInstances(g); len(gis) != 0 {
			t.Errorf("GPU %d keeps %+v", g, gis)
		}
	}
	if keys, _ := f.d.lc.Intents(); len(keys) != 0 {
		t.Errorf("journal keeps %v", keys)
	}
}

// While NVML's event stream is alive, Watch re-affirms every device's
// health on its heartbeat, as a fresh observation (no stale time), and
// keeps an unhealthy GPU unhealthy: the runtime would otherwise let the
// reports decay to Unknown after its health timeout.
func TestHealthHeartbeat(t *testing.T) {
	f := newFixture(t, WithHealthHeartbeat(20*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan device.Event, 10)
	go func() { _ = f.d.Watch(ctx, events) }()
	first := <-events
	if err := f.sim.RaiseXID(3, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	next := func(what string) device.Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10 s", what)
			return device.Event{}
		}
	}
	for ev := next("XID report"); len(ev.Health) != 3; ev = next("XID report") {
	}
	beat := next("heartbeat")
	if beat.Type != device.EventHealth || len(beat.Health) != len(first.Health) {
		t.Fatalf(
			"after the XID report: %s with %d reports, want a heartbeat with all %d devices",
			beat.Type,
			len(beat.Health),
			len(first.Health),
		)
	}
	for _, r := range beat.Health {
		if !r.Time.IsZero() {
			t.Errorf(
				"heartbeat report %+v carries an old time; a re-affirmation is observed now",
				r,
			)
		}
		if want := device.Healthy; strings.HasPrefix(r.Device.Device, "gpu-3-") {
			if r.Health != device.Unhealthy {
				t.Errorf(
					"heartbeat says %s is %s, want Unhealthy (XID 79 on GPU 3)",
					r.Device.Device,
					r.Health,
				)
			}
		} else if r.Health != want {
			t.Errorf("heartbeat says %s is %s, want Healthy", r.Device.Device, r.Health)
		}
	}
}

func TestHealthHeartbeatOption(t *testing.T) {
	if _, err := New(nil, "node-1", WithHealthHeartbeat(0)); err == nil ||
		!strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("WithHealthHeartbeat(0): %v, want an error naming the heartbeat", err)
	}
}

// noTimeSlice hides the simulator's SetTimeSlice, as the real backend
// has none.
type noTimeSlice struct{ nvml.Interface }

// On real GPUs a time-slicing request is refused, saying that only the
// simulator sets time-slices.
func TestTimeSlicingRealRefused(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	d, err := New(
		noTimeSlice{f.sim},
		"node-1",
		WithStateDir(filepath.Join(f.dir, "state2")),
		WithSimulatedContainers(false),
		f.dynamicGPUs(t),
	)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := `{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig","sharing":` +
		`{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
	c := claim("t2")
	dev := alloc("gpu-1", cfg)
	if err := d.PrepareClaim(ctx, c, []kit.AllocatedDevice{dev}); err != nil {
		t.Fatal(err)
	}
	_, err = d.PrepareDevice(ctx, c, dev)
	if !errors.Is(err, kit.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "only the simulated NVML") {
		t.Errorf(
			"time-slicing on a backend without time-slices: %v; want ErrInvalidConfig saying it "+
				"is simulator-only",
			err,
		)
	}
}
