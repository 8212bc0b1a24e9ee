package driver

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// The crash helper runs in a child process: the test binary re-executed
// with crashEnv set to the JSON of a crashJob.
const crashEnv = "DRAKIT_NVML_CRASH_JOB"

type crashJob struct {
	SimState, StateDir, GPU, Device string
}

// TestCrashHelperProcess is the child: a driver that prepares a claim
// with a dynamic MIG device; the injected stall stops it between the GPU
// instance and the compute instance, where the parent kills it.
func TestCrashHelperProcess(t *testing.T) {
	job := childJob[crashJob](t, crashEnv, "TestKillBetweenCreateCallsLeavesNoHalfMadeInstance")
	s, err := nvmlsim.Open(job.SimState)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(s, "node-1", WithStateDir(job.StateDir), WithDynamicGPUs(job.GPU))
	if err != nil {
		t.Fatal(err)
	}
	err = d.PrepareClaim(context.Background(), claim("c"), []kit.AllocatedDevice{alloc(job.Device)})
	t.Fatalf("PrepareClaim returned (%v); the stall should have held it until the kill", err)
}

// TestKillBetweenCreateCallsLeavesNoHalfMadeInstance kills (SIGKILL) a
// real driver process between its two create calls. While it lives, a
// second driver process on its state folder is refused (it would take the
// live create for a crash's leftovers and destroy it). After the kill the
// restart undoes the half-made GPU instance, leaves the administrator's
// devices on a GPU that is not dynamic (one complete, one half-made)
// untouched, and the device can be created again.
func TestKillBetweenCreateCallsLeavesNoHalfMadeInstance(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	state, stateDir := filepath.Join(dir, "nvml-state.json"), filepath.Join(dir, "state")
	s, err := nvmlsim.Open(state, nvmlsim.WithServer("dgx-h100"))
	if err != nil {
		t.Fatal(err)
	}
	// The administrator's static MIG devices on GPU 1.
	admin, err := s.CreateGPUInstance(1, 9, mig.Placement{Start: 0, Size: 4}) // 3g.40gb@0
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateComputeInstance(1, admin.ID, 2); err != nil {
		t.Fatal(err)
	}
	// half-made 1g@6
	if _, err := s.CreateGPUInstance(1, 19, mig.Placement{Start: 6, Size: 1}); err != nil {
		t.Fatal(err)
	}
	adminBefore, _ := s.GPUInstances(1)
	gpus, _ := s.GPUs()
	dev := "gpu-0-2g-20gb-4"

	if err := s.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultCreateComputeInstance, GPU: 0, Stall: true},
	); err != nil {
		t.Fatal(err)
	}
	cmd := childCommand(t, "TestCrashHelperProcess", crashEnv,
		crashJob{SimState: state, StateDir: stateDir, GPU: gpus[0].UUID, Device: dev})
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	killed := false
	defer func() {
		if !killed {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}()

	// Wait (bounded) until the child stalls between the two calls.
	deadline := time.Now().Add(60 * time.Second)
	for {
		stalls, err := s.Stalls()
		if err != nil {
			t.Fatal(err)
		}
		if len(stalls) == 1 && stalls[0].PID == pid &&
			stalls[0].Op == nvmlsim.FaultCreateComputeInstance {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d never reached the stall; its output:\n%s", pid, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	gis, _ := s.GPUInstances(0)
	if len(gis) != 1 || gis[0].ProfileID != 14 || len(gis[0].ComputeInstances) != 0 {
		t.Fatalf("at the stall GPU 0 has %+v, want a half-made 2g@4", gis)
	}

	// A second driver process on the state folder while the first is
	// inside the create: refused, naming the first.
	s2, err := nvmlsim.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(s2, "node-1", WithStateDir(stateDir), WithDynamicGPUs(gpus[0].UUID))
	if !errors.Is(err, lifecycle.ErrStateInUse) ||
		!strings.Contains(err.Error(), "process "+strconv.Itoa(pid)) {
		t.Fatalf(
			"a second driver on the state folder: %v, want ErrStateInUse naming process %d",
			err,
			pid,
		)
	}
	if gis, _ := s.GPUInstances(0); len(gis) != 1 {
		t.Fatalf("the child's GPU instance was destroyed under it: %+v", gis)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	killed = true
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL; output:\n%s", err, out.String())
	}

	// The kernel released the dead child's lock: the restart runs, and
	// the runtime undoes the claim left half-way, then reconciles.
	d, err := New(s2, "node-1", WithStateDir(stateDir), WithDynamicGPUs(gpus[0].UUID))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.UnprepareClaim(
		ctx, claim("c").ClaimRef, []kit.AllocatedDevice{alloc(dev)},
	); err != nil {
		t.Fatal(err)
	}
	if err := d.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if gis, _ := s2.GPUInstances(0); len(gis) != 0 {
		t.Fatalf("after the restart GPU 0 has %+v, want the half-made device undone", gis)
	}
	after, _ := s2.GPUInstances(1)
	if len(after) != 2 || after[0].ID != adminBefore[0].ID ||
		after[0].ComputeInstances[0].UUID != adminBefore[0].ComputeInstances[0].UUID ||
		after[1].ID != adminBefore[1].ID {
		t.Fatalf(
			"after the restart GPU 1 has %+v, want the admin's %+v untouched",
			after,
			adminBefore,
		)
	}
	// The prepare runs again.
	if err := d.PrepareClaim(ctx, claim("c"), []kit.AllocatedDevice{alloc(dev)}); err != nil {
		t.Fatal(err)
	}
	if gis, _ := s2.GPUInstances(0); len(gis) != 1 || len(gis[0].ComputeInstances) != 1 {
		t.Fatalf("create after the restart: %+v", gis)
	}
}

// lockedBuffer collects a child's output; os/exec writes from its own
// goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
