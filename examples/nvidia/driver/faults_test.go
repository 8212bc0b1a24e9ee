package driver

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// The ownership and fault findings of issue 35, each replayed on the
// driver as a node runs it: a state folder, a simulated DGX, restarts.
// These tests use only what the driver offered before the fix, so that
// each can be run on the code before it (where each failed).

// node is a simulated DGX (GPUs 0-1 full, 2-7 in MIG mode without MIG
// devices) and a state folder.
type node struct {
	t     *testing.T
	sim   *nvmlsim.Sim
	state string
	uuids []string
}

func newNode(t *testing.T, server string) *node {
	t.Helper()
	dir := t.TempDir()
	sim, err := nvmlsim.Open(
		filepath.Join(dir, "gpus.json"),
		nvmlsim.WithServer(server),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{2, 3, 4, 5, 6, 7}}),
		nvmlsim.WithPollInterval(5*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, sim: sim, state: filepath.Join(dir, "state")}
	for _, g := range gpus {
		n.uuids = append(n.uuids, g.UUID)
	}
	return n
}

// start starts a driver on the node as the runtime does: New, then
// Reconcile with the claims the runtime holds.
func (n *node) start(opts []Option, held ...kit.HeldClaim) *Driver {
	n.t.Helper()
	d, err := New(
		n.sim,
		"node-1",
		append([]Option{WithStateDir(n.state), WithRepublishDelay(0)}, opts...)...)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := d.Reconcile(context.Background(), held); err != nil {
		n.t.Fatal(err)
	}
	if _, err := d.Inventory(context.Background()); err != nil {
		n.t.Fatal(err)
	}
	return d
}

// prepare prepares claim uid on d as the runtime does and returns what
// the runtime holds of it.
func (n *node) prepare(d *Driver, uid string, devs ...kit.AllocatedDevice) kit.HeldClaim {
	n.t.Helper()
	ctx := context.Background()
	c := claim(uid)
	if err := d.PrepareClaim(ctx, c, devs); err != nil {
		n.t.Fatalf("prepare %s: %v", uid, err)
	}
	h := kit.HeldClaim{ClaimRef: c.ClaimRef, Prepared: true}
	for _, dev := range devs {
		pd, err := d.PrepareDevice(ctx, c, dev)
		if err != nil {
			n.t.Fatal(err)
		}
		h.Devices = append(h.Devices, kit.HeldDevice{AllocatedDevice: dev, Data: pd.Data})
	}
	return h
}

// adminDevice makes an administrator's MIG device (GPU instance and
// compute instance), as the GPU Operator's MIG manager does.
func (n *node) adminDevice(gpu int, profile string, start int) {
	n.t.Helper()
	pr, err := n.sim.Product().Profile(profile)
	if err != nil {
		n.t.Fatal(err)
	}
	gi, err := n.sim.CreateGPUInstance(
		gpu,
		pr.ID,
		mig.Placement{Start: start, Size: pr.MemorySlices},
	)
	if err != nil {
		n.t.Fatal(err)
	}
	cps, err := n.sim.ComputeInstanceProfiles(gpu, gi.ID)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, c := range cps {
		if c.SliceCount == pr.ComputeSlices {
			if _, err := n.sim.CreateComputeInstance(gpu, gi.ID, c.ID); err != nil {
				n.t.Fatal(err)
			}
			return
		}
	}
	n.t.Fatalf("no compute instance profile for %s", profile)
}

// An administrator's MIG layout is never destroyed: with the default
// flags no GPU is dynamic, so a GPU in MIG mode without MIG devices at
// the driver's first start is not taken for the driver's, and the layout
// the MIG manager makes on it after that start survives the driver's
// restarts. (It was recorded dynamic at first sight and destroyed at the
// next restart.)
func TestAdministratorsLayoutSurvivesRestarts(t *testing.T) {
	n := newNode(t, "dgx-h200")
	n.start(nil)
	n.adminDevice(4, "3g.71gb", 0)
	n.adminDevice(4, "1g.18gb", 6)
	for range 2 {
		d := n.start(nil)
		if got := instances(t, n.sim, 4); len(got) != 2 {
			t.Fatalf("GPU 4 after a restart: %v, want the administrator's 2 MIG devices", got)
		}
		inv, err := d.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if all := strings.Join(names(inv), " "); !strings.Contains(all, "gpu-4-3g-71gb-0") ||
			strings.Contains(all, "gpu-4-7g") {
			t.Errorf(
				"GPU 4 publishes %s: want its MIG devices as the administrator made them (static)",
				all,
			)
		}
	}
}

// The state folder lost: the GPUs the administrator named stay dynamic,
// so the driver's own MIG devices that no held claim names are destroyed
// (they leaked, taken for the administrator's), those a held claim uses
// are kept, and a GPU not named is never touched.
func TestLostStateFolderKeepsOwnership(t *testing.T) {
	n := newNode(t, "dgx-h200")
	named := []Option{WithDynamicGPUs(n.uuids[4], n.uuids[5])}
	n.adminDevice(3, "3g.71gb", 0)
	d := n.start(named)
	n.prepare(d, "mine", alloc("gpu-4-1g-18gb-0"))
	kept := n.prepare(d, "kept", alloc("gpu-5-2g-35gb-0"))
	if err := os.RemoveAll(n.state); err != nil {
		t.Fatal(err)
	}
	d = n.start(named, kept) // claim "mine" went with the node's checkpoint
	if got := instances(t, n.sim, 4); len(got) != 0 {
		t.Errorf(
			"GPU 4 after losing the state folder: %v, want the driver's unheld device destroyed",
			got,
		)
	}
	if got := instances(t, n.sim, 5); len(got) != 1 {
		t.Errorf("GPU 5 after losing the state folder: %v, want the held device kept", got)
	}
	if got := instances(t, n.sim, 3); len(got) != 1 {
		t.Errorf(
			"GPU 3 (not named) after losing the state folder: %v, want the administrator's device",
			got,
		)
	}
	if err := d.UnprepareClaim(context.Background(), kept.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if got := instances(t, n.sim, 5); len(got) != 0 {
		t.Errorf("GPU 5 after the held claim's release: %v, want its device destroyed", got)
	}
}

// The state folder lost with the default flags: the driver made no MIG
// device of its own (no GPU is named dynamic, none is taken for dynamic
// at first sight), so none is left behind looking like the
// administrator's: its MIG device leaked, published as static for
// anyone, after the folder was lost.
func TestLostStateFolderLeaksNothingByDefault(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "dgx-h200")
	d := n.start(nil)
	dev := alloc("gpu-4-1g-18gb-0")
	if err := d.PrepareClaim(ctx, claim("mine"), []kit.AllocatedDevice{dev}); err == nil {
		_, _ = d.PrepareDevice(ctx, claim("mine"), dev)
	}
	if err := os.RemoveAll(n.state); err != nil {
		t.Fatal(err)
	}
	d = n.start(nil)
	if got := instances(t, n.sim, 4); len(got) != 0 {
		t.Errorf(
			"GPU 4 after losing the state folder: %v, want no MIG device of the driver's left",
			got,
		)
	}
	inv, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all := " " + strings.Join(names(inv), " ") + " "; strings.Contains(
		all,
		" gpu-4-1g-18gb-0 ",
	) {
		t.Errorf(
			"after losing the state folder the driver publishes %s: its own MIG device as the "+
				"administrator's",
			all,
		)
	}
}

// dynamicMIGGPUs changed while claims hold MIG devices: a GPU dropped
// from the list is drained. The held device stays (and is not offered to
// anyone else) until its claim is unprepared, then it is destroyed;
// nothing new is made there; the administrator's devices made on it in
// the meantime are published as static and never touched; once drained,
// the GPU is the administrator's.
func TestDynamicGPUDroppedWhileClaimsHoldIt(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "dgx-h200")
	d := n.start([]Option{WithDynamicGPUs(n.uuids[4], n.uuids[5])})
	held := n.prepare(d, "held", alloc("gpu-4-1g-18gb-0"))
	d = n.start([]Option{WithDynamicGPUs(n.uuids[5])}, held)
	if got := instances(t, n.sim, 4); len(got) != 1 {
		t.Fatalf("GPU 4 dropped while a claim holds a device: %v, want it kept", got)
	}
	n.adminDevice(4, "3g.71gb", 4)
	inv, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := " " + strings.Join(names(inv), " ") + " "
	if !strings.Contains(all, " gpu-4-3g-71gb-4 ") || strings.Contains(all, " gpu-4-1g-18gb-0 ") ||
		strings.Contains(all, " gpu-4-1g-18gb-1 ") {
		t.Errorf("GPU 4 being drained publishes %s: want the administrator's device only", all)
	}
	_ = d.PrepareClaim(ctx, claim("new"), []kit.AllocatedDevice{alloc("gpu-4-1g-18gb-2")})
	if got := instances(t, n.sim, 4); len(got) != 2 {
		t.Errorf("GPU 4 after a prepare on it while drained: %v, want nothing new", got)
	}
	if err := d.UnprepareClaim(ctx, held.ClaimRef, nil); err != nil {
		t.Fatalf("unprepare of the claim on the drained GPU: %v", err)
	}
	if got := instances(t, n.sim, 4); len(got) != 1 || !strings.HasPrefix(got[0], "3g.71gb") {
		t.Errorf(
			"GPU 4 after the held claim's release: %v, want the administrator's device only",
			got,
		)
	}
	n.start([]Option{WithDynamicGPUs(n.uuids[5])})
	if got := instances(t, n.sim, 4); len(got) != 1 {
		t.Errorf("GPU 4 after the next restart: %v, want the administrator's device", got)
	}
}

// One lost GPU (XID 79) fails the unprepare of its own MIG device only:
// every other unprepare on the node succeeds (each one retried the lost
// GPU's destroy and failed with its error), and once the GPU is reset the
// next release destroys what was left.
func TestLostGPUNeverBlocksOtherUnprepares(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "dgx-h200")
	d := n.start([]Option{WithDynamicGPUs(n.uuids[4], n.uuids[5], n.uuids[6])})
	a := n.prepare(d, "a", alloc("gpu-4-1g-18gb-0"))
	b := n.prepare(d, "b", alloc("gpu-5-1g-18gb-0"))
	c := n.prepare(d, "c", alloc("gpu-6-1g-18gb-0"))
	if err := n.sim.RaiseXID(4, XIDFallenOffTheBus, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := d.UnprepareClaim(ctx, a.ClaimRef, nil); err == nil {
		t.Error("unprepare on the lost GPU 4 succeeded")
	}
	for _, h := range []kit.HeldClaim{b, c} {
		if err := d.UnprepareClaim(ctx, h.ClaimRef, nil); err != nil {
			t.Errorf("unprepare of %s on another GPU while GPU 4 is lost: %v", h.UID, err)
		}
	}
	for _, g := range []int{5, 6} {
		if got := instances(t, n.sim, g); len(got) != 0 {
			t.Errorf("GPU %d after its claim's unprepare: %v", g, got)
		}
	}
	if err := n.sim.RecoverGPU(4); err != nil {
		t.Fatal(err)
	}
	if err := d.UnprepareClaim(ctx, a.ClaimRef, nil); err != nil {
		t.Errorf("unprepare on GPU 4 after its reset: %v", err)
	}
	if got := instances(t, n.sim, 4); len(got) != 0 {
		t.Errorf("GPU 4 after its reset and the unprepare: %v, want nothing left", got)
	}
}

// The GPU whole is offered only where MIG mode can be left by the
// driver: not on an A100 (leaving MIG mode needs a GPU reset, and its
// claim failed prepare forever) and not on a vGPU guest. A prepare of
// it says why.
func TestWholeGPUOnlyWhereItWorks(t *testing.T) {
	for _, tc := range []struct {
		name, server string
		nv           func(*nvmlsim.Sim) nvml.Interface
		why          string
	}{
		{"A100", "dgx-a100-80gb", func(s *nvmlsim.Sim) nvml.Interface { return s }, "GPU reset"},
		{
			"vGPU guest",
			"dgx-h200",
			func(s *nvmlsim.Sim) nvml.Interface { return vgpuGuest{s} },
			"vGPU guest",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.server)
			d, err := New(
				tc.nv(n.sim),
				"node-1",
				WithStateDir(n.state),
				WithDynamicGPUs(n.uuids[4]),
			)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := d.Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			all := " " + strings.Join(names(inv), " ") + " "
			if strings.Contains(all, " gpu-4 ") || !strings.Contains(all, " gpu-4-1g-") {
				t.Errorf(
					"dynamic GPU 4 publishes %s: want its MIG devices and not the GPU whole",
					all,
				)
			}
			err = d.PrepareClaim(
				context.Background(),
				claim("whole"),
				[]kit.AllocatedDevice{alloc("gpu-4")},
			)
			if err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("prepare of GPU 4 whole: %v, want a refusal naming %q", err, tc.why)
			}
			if m, _ := n.sim.MigMode(4); !m.Current {
				t.Errorf("GPU 4 after the refused whole prepare: %+v, want MIG on", m)
			}
		})
	}
}

// vgpuGuest is the simulator as a vGPU guest sees its GPUs.
type vgpuGuest struct{ *nvmlsim.Sim }

func (vgpuGuest) VGPUGuest(int) (bool, error) { return true, nil }

// Where other NVML clients hold the GPU (DCGM, dcgm-exporter on a GPU
// Operator node) the mode change for a whole-GPU claim fails: the error
// (which the kubelet puts in the pod's events) says so and what to do.
func TestWholeGPUBlockedByOtherClientsSaysSo(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "dgx-h200")
	d := n.start([]Option{WithDynamicGPUs(n.uuids[4])})
	if err := n.sim.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultSetMigMode, GPU: 4, Code: nvml.ErrorInUse},
	); err != nil {
		t.Fatal(err)
	}
	err := d.PrepareClaim(ctx, claim("whole"), []kit.AllocatedDevice{alloc("gpu-4")})
	if err == nil || !strings.Contains(err.Error(), "other NVML clients hold the GPU") ||
		!strings.Contains(err.Error(), "dcgm-exporter") {
		t.Fatalf(
			"whole prepare with the mode change blocked: %v, want an error that names the other "+
				"NVML clients",
			err,
		)
	}
	if err := d.UnprepareClaim(ctx, claim("whole").ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if m, _ := n.sim.MigMode(4); !m.Current {
		t.Errorf("GPU 4 after the failed whole prepare: %+v, want MIG on", m)
	}
}

// holdEnv carries a holdJob to TestHoldStateHelperProcess.
const holdEnv = "DRAKIT_NVIDIA_HOLD_STATE"

// holdJob is a driver process that holds a state folder: alone, or with
// Owner as a pod of Owner's rolling update with Dynamic GPUs.
type holdJob struct {
	Sim, State, Owner string
	Dynamic           []string
}

// The child of holdState: a driver that holds the state folder until it
// is killed.
func TestHoldStateHelperProcess(t *testing.T) {
	job := childJob[holdJob](t, holdEnv, "holdState")
	s, err := nvmlsim.Open(job.Sim)
	if err != nil {
		t.Fatal(err)
	}
	opts := []Option{WithStateDir(job.State)}
	if job.Owner != "" {
		opts = append(opts, WithDynamicGPUs(job.Dynamic...), WithRollingUpdate(job.Owner))
	}
	if _, err := New(s, "node-1", opts...); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	select {}
}

// holdState starts a driver process of job and waits until it holds the
// state folder; the test kills it by its PID in the end.
func holdState(t *testing.T, job holdJob) *exec.Cmd {
	t.Helper()
	cmd := childCommand(t, "TestHoldStateHelperProcess", holdEnv, job)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("child: %q, %v", buf, err)
	}
	return cmd
}

// A second driver process on the same state folder (its own plugin,
// registrar and CDI folders) is refused at start: it would take every
// MIG device of the first for its own and destroy the ones in use.
func TestSecondDriverProcessIsRefused(t *testing.T) {
	n := newNode(t, "dgx-h200")
	holdState(t, holdJob{Sim: filepath.Join(filepath.Dir(n.state), "gpus.json"), State: n.state})
	_, err := New(n.sim, "node-1", WithStateDir(n.state))
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("a second driver process on the state folder: %v, want a refusal", err)
	}
}

// A GPU lost before the driver starts (XID 79: it fell off the bus) is
// published tainted, not withdrawn (its pool was deleted about 30 s
// later), and once it is reset the driver publishes it as it is (a GPU
// not named dynamic, as with the default flags: whole; a dynamic GPU:
// its MIG devices), healthy, without a restart (it stayed unpublished
// until one).
func TestGPULostAtStartIsPublishedAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gpu     int
		dynamic bool
		after   string // a device published once the GPU is reset
	}{
		{"default flags", 1, false, "gpu-1"},
		{"dynamic", 5, true, "gpu-5-1g-18gb-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "dgx-h200")
			if err := n.sim.RaiseXID(tc.gpu, XIDFallenOffTheBus, -1, -1); err != nil {
				t.Fatal(err)
			}
			opts := []Option{
				WithStateDir(n.state),
				WithHealthHeartbeat(20 * time.Millisecond),
				WithRepublishDelay(0),
				WithRepublishInterval(0),
			}
			if tc.dynamic {
				opts = append(opts, WithDynamicGPUs(n.uuids[4], n.uuids[tc.gpu]))
			}
			d, err := New(n.sim, "node-1", opts...)
			if err != nil {
				t.Fatalf("start with GPU %d lost: %v", tc.gpu, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			events := make(chan device.Event, 100)
			go func() { _ = d.Watch(ctx, events) }()
			first := nextEvent(t, events, "first report")
			whole := fmt.Sprintf("gpu-%d", tc.gpu)
			var lost []string
			for _, r := range first.Health {
				if strings.HasPrefix(r.Device.Device, whole) && r.Health == device.Unhealthy &&
					r.Reason == ReasonGPULost &&
					r.TaintEffect == device.NoExecute {
					lost = append(lost, r.Device.Device)
				}
			}
			if strings.Join(lost, " ") != whole {
				t.Fatalf(
					"first report on GPU %d lost at start: %v, want %s Unhealthy %s NoExecute",
					tc.gpu,
					lost,
					whole,
					ReasonGPULost,
				)
			}
			if err := d.PrepareClaim(
				ctx, claim("lost"), []kit.AllocatedDevice{alloc(whole)},
			); err == nil &&
				tc.dynamic {
				t.Error("prepare of the lost dynamic GPU whole succeeded")
			}
			if err := n.sim.RecoverGPU(tc.gpu); err != nil {
				t.Fatal(err)
			}
			for published := false; !published; {
				ev := nextEvent(t, events, "GPU published again")
				published = ev.Type == device.EventInventoryChanged && ev.Inventory != nil &&
					strings.Contains(
						" "+strings.Join(names(ev.Inventory), " ")+" ",
						" "+tc.after+" ",
					)
			}
			for healthy := false; !healthy; {
				ev := nextEvent(t, events, "GPU healthy")
				seen, bad := 0, 0
				for _, r := range ev.Health {
					if strings.HasPrefix(r.Device.Device, whole) {
						seen++
						if r.Health != device.Healthy {
							bad++
						}
					}
				}
				healthy = seen > 0 && bad == 0
			}
			if err := d.PrepareClaim(
				ctx, claim("after"), []kit.AllocatedDevice{alloc(tc.after)},
			); err != nil {
				t.Errorf("prepare on GPU %d after its recovery: %v", tc.gpu, err)
			}
		})
	}
}
