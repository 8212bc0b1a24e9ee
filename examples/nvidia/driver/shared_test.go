package driver

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/statefile"
)

// standInEnv makes the test binary the simulator's MPS stand-in
// (TestMPSStandInHelperProcess), as drivercmd makes the driver binary.
const standInEnv = "DRAKIT_TEST_MPS_STANDIN"

// TestMPSStandInHelperProcess is not a test: it is the stand-in
// nvidia-cuda-mps-control the drivers of these tests run.
func TestMPSStandInHelperProcess(t *testing.T) {
	if os.Getenv(standInEnv) == "" {
		t.Skip("run by the drivers of the shared GPU tests")
	}
	os.Exit(nvmlsim.MPSControlMain(flag.Args(), os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// standIn is the MPSControl of the stand-in on the simulator's state.
func standIn(state string) MPSControl {
	return MPSControl{Command: []string{os.Args[0], "-test.run=^TestMPSStandInHelperProcess$",
		"-test.count=1", "--"},
		Env: []string{standInEnv + "=1", nvmlsim.EnvSimState + "=" + state}}
}

// sharedFixture is the simulated DGX H200 with GPU 1 shared.
func sharedFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	dir := shortDir(t)
	state := filepath.Join(dir, "gpus.json")
	sim, err := nvmlsim.Open(state, nvmlsim.WithServer("dgx-h200"), nvmlsim.WithSetup(testSetup))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{sim: sim, state: state, dir: dir}
	f.d = f.open(t, append([]Option{WithSharedGPUs("1"), WithMPSControl(standIn(state))},
		opts...)...)
	return f
}

// share is an allocation of a share of GPU 1 taking memory and compute.
func share(id, memory string, compute int64) kit.AllocatedDevice {
	a := alloc("gpu-1" + SharedSuffix)
	a.Pool = mig.GPUPoolName("node-1", 1)
	s := types.UID(id)
	a.ShareID = &s
	a.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		mig.CapMemory: resource.MustParse(memory), CapCompute: *resource.NewQuantity(compute,
			resource.DecimalSI)}
	return a
}

// prepareShare prepares claim uid with devs as the runtime does and
// returns what the runtime would keep of it.
func prepareAll(t *testing.T, d *Driver, uid string, devs ...kit.AllocatedDevice) (kit.HeldClaim,
	[]kit.PreparedDevice, error) {
	t.Helper()
	ctx := context.Background()
	c := claim(uid)
	h := kit.HeldClaim{ClaimRef: c.ClaimRef, Prepared: true}
	if err := d.PrepareClaim(ctx, c, devs); err != nil {
		return h, nil, err
	}
	var out []kit.PreparedDevice
	for _, dev := range devs {
		p, err := d.PrepareDevice(ctx, c, dev)
		if err != nil {
			return h, nil, err
		}
		out = append(out, p)
		h.Devices = append(h.Devices, kit.HeldDevice{AllocatedDevice: dev, Data: p.Data})
	}
	return h, out, nil
}

func unprepareAll(t *testing.T, d *Driver, h kit.HeldClaim) {
	t.Helper()
	ctx := context.Background()
	var devs []kit.AllocatedDevice
	for _, dev := range h.Devices {
		if err := d.UnprepareDevice(ctx, h.ClaimRef, dev.AllocatedDevice, dev.Data); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, dev.AllocatedDevice)
	}
	if err := d.UnprepareClaim(ctx, h.ClaimRef, devs); err != nil {
		t.Fatal(err)
	}
}

// containerEnv is the environment a share's CDI edits give a container,
// with the pipe folder as the host sees it (the mount's source).
func containerEnv(t *testing.T, e *cdi.Edits) map[string]string {
	t.Helper()
	w, err := cdi.NewWriter(t.TempDir(), "gpu.nvidia.drakit.dev", "claim")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := w.Spec(cdi.Claim{UID: "u", Devices: []cdi.Device{{Name: "d", Edits: e}}})
	if err != nil {
		t.Fatal(err)
	}
	ce := spec.Devices[0].ContainerEdits
	env := map[string]string{}
	for _, kv := range ce.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, m := range ce.Mounts {
		if m.ContainerPath == env[EnvMPSPipeDir] {
			env[EnvMPSPipeDir] = m.HostPath
		}
	}
	return env
}

// daemons are the processes that carry the MPS marker of d's folder.
func daemons(t *testing.T, d *Driver) []int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	var out []int
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(env), mpsMarker+"="+d.mps.dir+"/") {
			continue
		}
		stat, _ := os.ReadFile(strings.TrimSuffix(p, "environ") + "stat")
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			continue // exited, not yet reaped
		}
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		out = append(out, pid)
	}
	return out
}

func record(t *testing.T, d *Driver, uuid string) *mpsRecord {
	t.Helper()
	r, err := d.mps.read(uuid)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// shareScheduler allocates shares and whole GPUs from the driver's
// slices with the scheduler's own allocator, keeping what it allocated
// (devices and consumed capacity), as kube-scheduler does for a node.
type shareScheduler struct {
	t     *testing.T
	d     *Driver
	state structured.AllocatedState
	n     int
}

func newShareScheduler(t *testing.T, d *Driver) *shareScheduler {
	return &shareScheduler{t: t, d: d, state: structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection()}}
}

// allocate asks for one device of class with the memory request (""
// for the default); nil when nothing fits.
func (s *shareScheduler) allocate(class, memory string) *resourceapi.DeviceRequestAllocationResult {
	s.t.Helper()
	ctx := context.Background()
	inv, err := s.d.Inventory(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	slices := inv.ResourceSlices("node-1")
	if err := device.Validate(slices...); err != nil {
		s.t.Fatal(err)
	}
	features := structured.Features{AdminAccess: true, PartitionableDevices: true,
		PrioritizedList: true,
		DeviceTaints:    true, ConsumableCapacity: true}
	al, err := structured.NewAllocator(ctx, features, s.state, classes(DeviceClasses(nil)), slices,
		cel.NewCache(64, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		s.t.Fatal(err)
	}
	s.n++
	req := resourceapi.ExactDeviceRequest{DeviceClassName: class,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if memory != "" {
		mem := map[resourceapi.QualifiedName]resource.Quantity{
			mig.CapMemory: resource.MustParse(memory)}
		req.Capacity = &resourceapi.CapacityRequirements{Requests: mem}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("c", s.n),
		Namespace: "default", UID: types.UID(fmt.Sprint("uid-", s.n))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}}}}}
	res, err := al.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		[]*resourceapi.ResourceClaim{c})
	if err != nil {
		s.t.Fatal(err)
	}
	if len(res) == 0 {
		return nil
	}
	r := res[0].Devices.Results[0]
	id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
	if r.ShareID == nil {
		s.state.AllocatedDevices.Insert(id)
	} else {
		s.state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		s.state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id,
			r.ConsumedCapacity))
	}
	return &r
}

// TestSharedGPUPublication: a shared GPU is published in a pool of its
// own, whole and shared on one counter, with the request policies; the
// scheduler's allocator packs 12 GiB shares of the default compute on it
// (ten: 100%), gives no share while the GPU is whole and not the GPU
// whole while a share holds it; the unshared GPUs are published as
// before.
func TestSharedGPUPublication(t *testing.T) {
	f := sharedFixture(t)
	inv, err := f.d.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	var pool *device.Pool
	for i := range inv.Pools {
		if inv.Pools[i].Name == mig.GPUPoolName("node-1", 1) {
			pool = &inv.Pools[i]
		}
	}
	if pool == nil || len(pool.Devices) != 2 || pool.Devices[0].Name() != "gpu-1" ||
		pool.Devices[1].Name() != "gpu-1-shared" || len(pool.CounterSets) != 1 {
		t.Fatalf("GPU 1's pool %+v, want its counter set, gpu-1 and gpu-1-shared", pool)
	}
	if got := names(inv)[0]; got != "gpu-0" {
		t.Errorf("first device %s, want the unshared gpu-0", got)
	}

	s := newShareScheduler(t, f.d)
	whole := s.allocate(ClassGPU, "")
	if whole == nil || whole.Device != "gpu-0" {
		t.Fatalf("a whole GPU: %+v, want gpu-0", whole)
	}
	if s.allocate(ClassGPU, "") == nil { // gpu-1 whole, the next full GPU
		t.Fatal("no second whole GPU")
	}
	if r := s.allocate(ClassShared, "12Gi"); r != nil {
		t.Fatalf("a share of GPU 1 while it is whole: %+v", r)
	}
	s = newShareScheduler(t, f.d)
	var ids []string
	for range 10 {
		r := s.allocate(ClassShared, "12Gi")
		if r == nil || r.Device != "gpu-1-shared" || r.ShareID == nil {
			t.Fatalf("share %d: %+v, want a share of gpu-1-shared", len(ids), r)
		}
		c, m := r.ConsumedCapacity[CapCompute], r.ConsumedCapacity[mig.CapMemory]
		if c.Value() != DefaultShareCompute || m.String() != "12Gi" {
			t.Errorf("share took %v, want memory 12Gi and the default compute", r.ConsumedCapacity)
		}
		ids = append(ids, string(*r.ShareID))
	}
	if r := s.allocate(ClassShared, "1Gi"); r != nil {
		t.Errorf("an eleventh share beside ten of 10%%: %+v", r)
	}
	if r := s.allocate(ClassGPU, ""); r == nil || r.Device != "gpu-0" {
		t.Errorf("whole GPUs beside the shares: %+v, want gpu-0 (gpu-1 is shared)", r)
	}
}

// TestSharesThroughMPS prepares two shares of GPU 1: one daemon serves
// both (started for the first, reused), the GPU is in ExclusiveProcess
// mode, each container gets its own limit and percentage, and a
// simulated CUDA program with a container's environment is held to its
// limit; a program without MPS is refused. The GPU is not handed out
// whole while shares hold it, a claim of two shares is refused, and the
// last unprepare stops the daemon and gives the GPU back. Admin access
// to the shared GPU takes no share.
func TestSharesThroughMPS(t *testing.T) {
	f := sharedFixture(t)
	ctx := context.Background()
	gpus, _ := f.sim.GPUs()
	g := gpus[1]
	a, pa, err := prepareAll(t, f.d, "a", share("share-a", "12Gi", 10))
	if err != nil {
		t.Fatal(err)
	}
	pid := record(t, f.d, g.UUID).PID
	b, pb, err := prepareAll(t, f.d, "b", share("share-b", "20Gi", 30))
	if err != nil {
		t.Fatal(err)
	}
	if r := record(t, f.d, g.UUID); r.PID != pid || len(r.Shares) != 2 || len(daemons(t,
		f.d)) != 1 {
		t.Fatalf("after two shares: record %+v, daemons %v; want one daemon (pid %d) for both", r,
			daemons(t, f.d), pid)
	}
	if m, _ := f.sim.ComputeMode(1); m != nvml.ComputeModeExclusiveProcess {
		t.Errorf("GPU 1 in %s mode, want ExclusiveProcess", m)
	}
	envA, envB := containerEnv(t, pa[0].Edits), containerEnv(t, pb[0].Edits)
	if envA[EnvMPSMemoryLimit] != "0=12288M" || envA[EnvMPSThreads] != "10" ||
		envB[EnvMPSMemoryLimit] != "0=20480M" || envB[EnvMPSThreads] != "30" {
		t.Errorf("containers got %v and %v", envA, envB)
	}
	cuda, err := f.sim.OpenCUDA(ctx, g.UUID, envA)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.Close()
	if err := cuda.Alloc(12 * 1024); err != nil {
		t.Errorf("a's program within its 12 GiB: %v", err)
	}
	if err := cuda.Alloc(1); !errors.Is(err, nvmlsim.ErrCUDAOutOfMemory) {
		t.Errorf("a's program past its 12 GiB: %v, want %v", err, nvmlsim.ErrCUDAOutOfMemory)
	}
	if _, err := f.sim.OpenCUDA(ctx, g.UUID, nil); !errors.Is(err,
		nvmlsim.ErrCUDADevicesUnavailable) {
		t.Errorf("a program without MPS on the shared GPU: %v, want %v", err,
			nvmlsim.ErrCUDADevicesUnavailable)
	}

	// Admin access (monitoring) takes no share and makes no MPS client.
	adm := share("admin", "4Gi", 10)
	adm.AdminAccess = true
	ha, pad, err := prepareAll(t, f.d, "admin", adm)
	if err != nil {
		t.Fatalf("admin access to the shared GPU: %v", err)
	}
	env, rec := containerEnv(t, pad[0].Edits), record(t, f.d, g.UUID)
	if env[EnvMPSPipeDir] != "" || len(rec.Shares) != 2 {
		t.Errorf("admin access: env %v, record %+v; want no MPS client and no share", env, rec)
	}
	unprepareAll(t, f.d, ha)

	wholeDev := alloc("gpu-1")
	wholeDev.Pool = mig.GPUPoolName("node-1", 1)
	if _, _, err := prepareAll(t, f.d, "whole",
		wholeDev); err == nil || !strings.Contains(err.Error(), "shared") {
		t.Errorf("GPU 1 whole while shares hold it: %v, want a refusal", err)
	}
	if _, _, err := prepareAll(t, f.d, "two", share("s1", "1Gi", 1), share("s2", "1Gi",
		1)); err == nil || !strings.Contains(err.Error(), "one share") {
		t.Errorf("a claim of two shares: %v, want a refusal", err)
	}

	unprepareAll(t, f.d, a)
	if r := record(t, f.d, g.UUID); r.PID != pid || len(r.Shares) != 1 {
		t.Errorf("after a's unprepare: %+v, want b's share on the same daemon", r)
	}
	unprepareAll(t, f.d, b)
	if ds := daemons(t, f.d); len(ds) != 0 || f.d.mps.has(g.UUID) {
		t.Errorf("after the last share: daemons %v, record %v; want none", ds, f.d.mps.has(g.UUID))
	}
	if m, _ := f.sim.ComputeMode(1); m != nvml.ComputeModeDefault {
		t.Errorf("GPU 1 in %s mode after its shares, want Default", m)
	}
	w, _, err := prepareAll(t, f.d, "whole", wholeDev)
	if err != nil {
		t.Fatalf("GPU 1 whole once free: %v", err)
	}
	if _, _, err := prepareAll(t, f.d, "c", share("share-c", "4Gi",
		10)); err == nil || !strings.Contains(err.Error(), "held whole") {
		t.Errorf("a share while the GPU is whole: %v, want a refusal", err)
	}
	unprepareAll(t, f.d, w)
	if f.d.mps.has(g.UUID) {
		t.Error("a record is left after the whole claim")
	}
}

// TestMPSDaemonKilled kills the daemon with SIGKILL: the driver starts
// it again (a new process on the same pipe folder), the shares stay, and
// a program connects again; the record names the new daemon.
func TestMPSDaemonKilled(t *testing.T) {
	f := sharedFixture(t, func(o *options) error { o.mpsPoll = 20 * time.Millisecond; return nil })
	ctx := context.Background()
	gpus, _ := f.sim.GPUs()
	h, p, err := prepareAll(t, f.d, "a", share("share-a", "8Gi", 20))
	if err != nil {
		t.Fatal(err)
	}
	old := record(t, f.d, gpus[1].UUID).PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var r *mpsRecord
	for {
		// The restart holds the manager's lock until the daemon serves.
		_ = f.d.mps.locked(func() error { return nil })
		r = record(t, f.d, gpus[1].UUID)
		if r.PID != old && r.PID != 0 && f.d.mps.alive(r) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon was not started again: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(r.Shares) != 1 || len(daemons(t, f.d)) != 1 {
		t.Errorf("after the restart: %+v, daemons %v; want a's share and one daemon", r, daemons(t,
			f.d))
	}
	c, err := f.sim.OpenCUDA(ctx, gpus[1].UUID, containerEnv(t, p[0].Edits))
	if err != nil {
		t.Fatalf("a program after the daemon's restart: %v", err)
	}
	c.Close()
	unprepareAll(t, f.d, h)
	if len(daemons(t, f.d)) != 0 {
		t.Error("a daemon is left")
	}
}

// killedDriverEnv runs TestSharedDriverHelperProcess: a driver that
// prepares the shares of its job, writes its held claims to a file and
// waits to be killed.
const killedDriverEnv = "DRAKIT_TEST_SHARED_DRIVER"

type killedDriverJob struct {
	SimState, StateDir, Held string
}

func TestSharedDriverHelperProcess(t *testing.T) {
	job := childJob[killedDriverJob](t, killedDriverEnv, "TestKill9DriverWithSharesHeld")
	sim, err := nvmlsim.Open(job.SimState)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(sim, "node-1", WithStateDir(job.StateDir), WithSharedGPUs("1"),
		WithMPSControl(standIn(job.SimState)))
	if err != nil {
		t.Fatal(err)
	}
	var held []kit.HeldClaim
	for _, s := range []string{"a", "b"} {
		h, _, err := prepareAll(t, d, s, share("share-"+s, "16Gi", 25))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	b, _ := json.Marshal(held)
	// Atomic: the parent reads the file as soon as it exists.
	if err := statefile.WriteFile(job.Held, b); err != nil {
		t.Fatal(err)
	}
	select {} // until killed
}

// TestKill9DriverWithSharesHeld kills (SIGKILL) a driver process that
// holds two shares of GPU 1: its daemon outlives it, and the next
// process finds it again by its record (the same process serves a
// program that connected before the kill). Its reconcile with the
// runtime's held claims keeps both shares; when the checkpoint holds one
// (the other was undone), the other is dropped and the daemon stays;
// with the last share the daemon goes. No share is lost, no daemon
// leaked.
func TestKill9DriverWithSharesHeld(t *testing.T) {
	dir := shortDir(t)
	state, stateDir, heldFile := filepath.Join(dir, "gpus.json"), filepath.Join(dir,
		"state"), filepath.Join(dir, "held.json")
	sim, err := nvmlsim.Open(state, nvmlsim.WithServer("dgx-h200"), nvmlsim.WithSetup(testSetup))
	if err != nil {
		t.Fatal(err)
	}
	cmd := childCommand(t, "TestSharedDriverHelperProcess", killedDriverEnv,
		killedDriverJob{SimState: state, StateDir: stateDir, Held: heldFile})
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(heldFile); err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("the driver exited: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver did not prepare its shares: %s", out.String())
		}
	}
	var held []kit.HeldClaim
	b, _ := os.ReadFile(heldFile)
	if err := json.Unmarshal(b, &held); err != nil {
		t.Fatal(err)
	}
	gpus, _ := sim.GPUs()
	uuid := gpus[1].UUID
	ctx := context.Background()
	var env map[string]string
	for _, d := range held[0].Devices {
		var pd preparedData
		_ = json.Unmarshal(d.Data, &pd)
		env = map[string]string{nvmlsim.EnvMPSPipeDir: filepath.Join(stateDir, "mps", uuid[4:12],
			"pipe")}
	}
	before, err := sim.OpenCUDA(ctx, uuid, env)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()

	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	d, err := New(sim, "node-1", WithStateDir(stateDir), WithSharedGPUs("1"),
		WithMPSControl(standIn(state)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := record(t, d, uuid)
	if !d.mps.alive(r) {
		t.Fatalf("the daemon died with the driver: %+v", r)
	}
	pid := r.PID
	if err := d.Reconcile(ctx, held); err != nil {
		t.Fatal(err)
	}
	if r := record(t, d, uuid); r.PID != pid || len(r.Shares) != 2 {
		t.Errorf("after the restart: %+v, want both shares on daemon %d", r, pid)
	}
	if err := before.Alloc(1024); err != nil {
		t.Errorf("a program that connected before the kill: %v", err)
	}
	// The checkpoint holds a only: b's share goes, the daemon stays.
	if err := d.Reconcile(ctx, held[:1]); err != nil {
		t.Fatal(err)
	}
	if r := record(t, d, uuid); r.PID != pid || len(r.Shares) != 1 {
		t.Errorf("with a held only: %+v, want a's share on daemon %d", r, pid)
	}
	unprepareAll(t, d, held[0])
	if ds := daemons(t, d); len(ds) != 0 || d.mps.has(uuid) {
		t.Errorf("after the last share: daemons %v; want none", ds)
	}
}

// TestMPSRecordLost: the state folder's MPS records are wiped while a
// daemon runs. The daemon is found by its marker and killed (nothing no
// record names runs); a share the runtime still holds gets a daemon of
// its own again.
func TestMPSRecordLost(t *testing.T) {
	f := sharedFixture(t)
	ctx := context.Background()
	gpus, _ := f.sim.GPUs()
	h, _, err := prepareAll(t, f.d, "a", share("share-a", "8Gi", 20))
	if err != nil {
		t.Fatal(err)
	}
	orphan := record(t, f.d, gpus[1].UUID).PID
	if err := os.RemoveAll(filepath.Join(f.d.mps.gpuDir(gpus[1].UUID), "record.json")); err != nil {
		t.Fatal(err)
	}
	if err := f.d.Reconcile(ctx, []kit.HeldClaim{h}); err != nil {
		t.Fatal(err)
	}
	r := record(t, f.d, gpus[1].UUID)
	ds := daemons(t, f.d)
	if r.PID == orphan || !f.d.mps.alive(r) || len(ds) != 1 || ds[0] != r.PID {
		t.Errorf("after the reconcile: record %+v, daemons %v (orphan %d); want one new daemon", r,
			ds, orphan)
	}
	unprepareAll(t, f.d, h)
	if len(daemons(t, f.d)) != 0 {
		t.Error("a daemon is left")
	}
}

// shortDir is a temporary folder with a short path: the MPS daemons'
// unix sockets live under it (108 bytes at most).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// TestConcurrentShares prepares and unprepares shares of one GPU from
// many claims at once (run with -race): one daemon serves them all, and
// the last unprepare, whichever it is, stops it.
func TestConcurrentShares(t *testing.T) {
	f := sharedFixture(t)
	gpus, _ := f.sim.GPUs()
	const n = 8
	held := make([]kit.HeldClaim, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			held[i], _, errs[i] = prepareAll(t, f.d, fmt.Sprint("c", i), share(fmt.Sprint("s", i),
				"4Gi", 10))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if r := record(t, f.d, gpus[1].UUID); len(r.Shares) != n || len(daemons(t, f.d)) != 1 {
		t.Fatalf("record %+v, daemons %v; want %d shares on one daemon", r, daemons(t, f.d), n)
	}
	for i := range n {
		wg.Go(func() { unprepareAll(t, f.d, held[i]) })
	}
	wg.Wait()
	if ds := daemons(t, f.d); len(ds) != 0 || f.d.mps.has(gpus[1].UUID) {
		t.Errorf("after every share: daemons %v; want none", ds)
	}
}
