package driver

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// The crash helper runs in a child process: the test binary re-executed
// with crashEnv set to the JSON of a crashJob.
const crashEnv = "DRAKIT_NVML_CRASH_JOB"

type crashJob struct {
	State, Journal, Lock string
	Key                  Key
}

// TestCrashHelperProcess is the child: it records its intent and creates
// the MIG device; the injected stall stops it between the GPU instance and
// the compute instance, where the parent kills it.
func TestCrashHelperProcess(t *testing.T) {
	raw := os.Getenv(crashEnv)
	if raw == "" {
		t.Skip("runs only as the child of TestKillBetweenCreateCallsLeavesNoHalfMadeInstance")
	}
	var job crashJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		t.Fatal(err)
	}
	s, err := nvmlsim.Open(job.State)
	if err != nil {
		t.Fatal(err)
	}
	j, err := OpenJournal(job.Journal)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Record(job.Key); err != nil {
		t.Fatal(err)
	}
	l, err := NewLifecycle(s, j, WithLockFile(job.Lock))
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Create(job.Key)
	t.Fatalf("Create returned (%v); the stall should have held it until the kill", err)
}

// TestKillBetweenCreateCallsLeavesNoHalfMadeInstance kills (SIGKILL) a
// real process between its two create calls, then restarts: Recover
// undoes the half-made GPU instance the journal owns, leaves the
// administrator's devices (one complete, one half-made) untouched, and the
// device can be created again.
func TestKillBetweenCreateCallsLeavesNoHalfMadeInstance(t *testing.T) {
	dir := t.TempDir()
	state, jpath, lock := filepath.Join(dir, "nvml-state.json"), filepath.Join(dir, "journal.json"), filepath.Join(dir, "mig.lock")
	s, err := nvmlsim.Open(state, nvmlsim.WithServer("dgx-h100"))
	if err != nil {
		t.Fatal(err)
	}
	// The administrator's static MIG devices on GPU 0.
	admin, err := s.CreateGPUInstance(0, 9, mig.Placement{Start: 0, Size: 4}) // 3g.40gb@0
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateComputeInstance(0, admin.ID, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateGPUInstance(0, 19, mig.Placement{Start: 6, Size: 1}); err != nil { // half-made 1g@6
		t.Fatal(err)
	}
	adminBefore, _ := s.GPUInstances(0)

	k := Key{GPU: 0, ProfileID: 14, Start: 4} // 2g.20gb@4
	if err := s.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultCreateComputeInstance, GPU: 0, Stall: true}); err != nil {
		t.Fatal(err)
	}
	job, _ := json.Marshal(crashJob{State: state, Journal: jpath, Lock: lock, Key: k})
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+string(job))
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
		if len(stalls) == 1 && stalls[0].PID == pid && stalls[0].Op == nvmlsim.FaultCreateComputeInstance {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d never reached the stall; its output:\n%s", pid, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	gis, _ := s.GPUInstances(0)
	if len(gis) != 3 || gis[1].ProfileID != 14 || len(gis[1].ComputeInstances) != 0 {
		t.Fatalf("at the stall GPU 0 has %+v, want the admin's two and a half-made 2g@4", gis)
	}

	// A new driver process starts while the old one is still inside
	// Create: its Recover waits for the lock instead of taking the live
	// create for a crash's leftovers.
	s2, err := nvmlsim.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	j, err := OpenJournal(jpath)
	if err != nil {
		t.Fatal(err)
	}
	if owned, _ := j.Owns(k); !owned {
		t.Fatal("the child's intent record is not in the journal")
	}
	l := lifecycle(t, s2, j, WithLockFile(lock))
	type result struct {
		r   Recovery
		err error
	}
	recovered := make(chan result, 1)
	go func() {
		r, err := l.Recover()
		recovered <- result{r, err}
	}()
	time.Sleep(300 * time.Millisecond) // time enough for an unlocked Recover to destroy it
	select {
	case res := <-recovered:
		t.Fatalf("Recover ran while the child was inside Create: %+v, %v", res.r, res.err)
	default:
	}
	if gis, _ := s.GPUInstances(0); len(gis) != 3 {
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

	// The kernel released the dead child's lock: Recover runs now.
	var res result
	select {
	case res = <-recovered:
	case <-time.After(60 * time.Second):
		t.Fatal("Recover still blocked after the child died")
	}
	r, err := res.r, res.err
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Undone) != 1 || r.Undone[0] != k || len(r.Static) != 2 || len(r.Owned) != 0 {
		t.Fatalf("recover: %+v", r)
	}
	after, _ := s2.GPUInstances(0)
	if len(after) != 2 || after[0].ID != adminBefore[0].ID || after[0].ComputeInstances[0].UUID != adminBefore[0].ComputeInstances[0].UUID || after[1].ID != adminBefore[1].ID {
		t.Fatalf("after recover GPU 0 has %+v, want the admin's %+v untouched", after, adminBefore)
	}
	d, err := l.Create(k) // the prepare runs again
	if err != nil || !d.Complete() {
		t.Fatalf("create after recover: %+v, %v", d, err)
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
