package nvmlsim

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// standInEnv makes the test binary the stand-in daemon
// (TestMPSStandInProcess).
const standInEnv = "NVMLSIM_TEST_MPS_STANDIN"

// TestMPSStandInProcess is not a test: it is the stand-in daemon, run by
// startStandIn in a process of its own.
func TestMPSStandInProcess(t *testing.T) {
	if os.Getenv(standInEnv) == "" {
		t.Skip("run by startStandIn")
	}
	os.Exit(MPSControlMain([]string{"-f"}, os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// startStandIn runs a stand-in daemon for gpu of the state, serving pipe;
// the test kills it by its PID when it ends.
func startStandIn(t *testing.T, state, gpu, pipe string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMPSStandInProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), standInEnv+"=1", EnvSimState+"="+state,
		EnvVisibleDevices+"="+gpu, EnvMPSPipeDir+"="+pipe, EnvMPSLogDir+"="+filepath.Join(pipe,
			"log"))
	out, err := os.Create(filepath.Join(t.TempDir(), "standin.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := dialMPS(context.Background(), pipe); err == nil {
			c.Close()
			return cmd
		}
		select {
		case <-done:
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("stand-in daemon exited: %s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("stand-in daemon not serving within 20s")
		}
	}
}

// TestMPSStandIn: the stand-in enforces what the real daemon does. A
// client's allocations stay within its pinned memory limit, all clients'
// within the GPU's memory; in ExclusiveProcess mode a program that is not
// a client is refused while the daemon serves the GPU; a second daemon
// on the pipe folder is refused; quit (through the control client) ends
// the daemon and its registration; a killed daemon fails its clients.
func TestMPSStandIn(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	sim, err := Open(state, WithServer("dgx-h100"), WithMIGEnabled(false))
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	gpus, err := sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	g := gpus[0]
	if err := sim.SetComputeMode(0, nvml.ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(t.TempDir(), "pipe")
	daemon := startStandIn(t, state, g.UUID, pipe)
	ctx := context.Background()

	a, err := sim.OpenCUDA(ctx, g.UUID, map[string]string{EnvMPSPipeDir: pipe,
		EnvMPSPinnedMemLimit: "0=12G", EnvMPSThreads: "25"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Alloc(10 * 1024); err != nil {
		t.Errorf("10 GiB within a 12 GiB limit: %v", err)
	}
	if err := a.Alloc(4 * 1024); !errors.Is(err, ErrCUDAOutOfMemory) {
		t.Errorf("14 GiB with a 12 GiB limit: %v, want %v", err, ErrCUDAOutOfMemory)
	}
	b, err := sim.OpenCUDA(ctx, g.UUID, map[string]string{EnvMPSPipeDir: pipe})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Alloc(g.MemoryMiB - 10*1024 + 1); !errors.Is(err, ErrCUDAOutOfMemory) {
		t.Errorf("more than the GPU has left: %v, want %v", err, ErrCUDAOutOfMemory)
	}
	clients, err := MPSClients(ctx, pipe)
	if err != nil || len(clients) != 2 {
		t.Errorf("clients %+v, %v; want two", clients, err)
	}
	b.Close()
	if _, err := sim.OpenCUDA(ctx, g.UUID, nil); !errors.Is(err, ErrCUDADevicesUnavailable) {
		t.Errorf("a program without MPS on an ExclusiveProcess GPU: %v, want %v", err,
			ErrCUDADevicesUnavailable)
	}
	if _, err := sim.OpenCUDA(ctx, gpus[1].UUID, nil); err != nil {
		t.Errorf("a program without MPS on a GPU in Default mode: %v", err)
	}
	// One daemon per pipe folder.
	second := exec.Command(os.Args[0], "-test.run=^TestMPSStandInProcess$", "-test.count=1")
	second.Env = append(os.Environ(), standInEnv+"=1", EnvSimState+"="+state,
		EnvVisibleDevices+"="+g.UUID, EnvMPSPipeDir+"="+pipe, EnvMPSLogDir+"="+t.TempDir())
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out),
		"another MPS control daemon") {
		t.Errorf("a second daemon on the pipe folder: %v %s", err, out)
	}

	// quit through the control client.
	var out strings.Builder
	env := func(k string) string {
		if k == EnvMPSPipeDir {
			return pipe
		}
		return ""
	}
	if rc := MPSControlMain(nil, env, strings.NewReader("get_server_list\nquit\n"), &out,
		&out); rc != 0 {
		t.Fatalf("control client: %d %s", rc, out.String())
	}
	if strings.TrimSpace(out.String()) != strconv.Itoa(daemon.Process.Pid) {
		t.Errorf("get_server_list said %q, want %d", out.String(), daemon.Process.Pid)
	}
	waitGone(t, daemon)
	if _, err := sim.OpenCUDA(ctx, g.UUID, nil); err != nil {
		t.Errorf("a program without MPS once the daemon quit: %v", err)
	}
	if err := a.Alloc(1); !errors.Is(err, ErrMPSConnection) {
		t.Errorf("a client of a daemon that quit: %v, want %v", err, ErrMPSConnection)
	}

	// A killed daemon: its clients fail; a new one serves the folder.
	daemon = startStandIn(t, state, g.UUID, pipe)
	c, err := sim.OpenCUDA(ctx, g.UUID, map[string]string{EnvMPSPipeDir: pipe})
	if err != nil {
		t.Fatal(err)
	}
	_ = daemon.Process.Signal(syscall.SIGKILL)
	waitGone(t, daemon)
	if err := c.Alloc(1); !errors.Is(err, ErrMPSConnection) {
		t.Errorf("a client of a killed daemon: %v, want %v", err, ErrMPSConnection)
	}
	startStandIn(t, state, g.UUID, pipe)
	if _, err := sim.OpenCUDA(ctx, g.UUID, map[string]string{EnvMPSPipeDir: pipe}); err != nil {
		t.Errorf("a client of the restarted daemon: %v", err)
	}
}

func waitGone(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon is still there after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
