package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/driver/internal/checkpoint"
	"github.com/drakit/drakit/driver/internal/fakehw"
	"github.com/drakit/drakit/internal/cluster"
)

// childEnv carries a childConfig to a copy of the test binary that runs
// one driver and nothing else, so that a test can kill it with SIGKILL.
const childEnv = "DRAKIT_DRIVER_TEST_CHILD"

type childConfig struct {
	Kubeconfig string
	// APIHost, when set, is the API server's URL instead of Kubeconfig's
	// (one that need not answer).
	APIHost string
	Dirs    dirs
	Devices int
	// Fault is the fault point at which the child kills itself with
	// SIGKILL ("" for none), on its FaultHit-th pass there.
	Fault    string
	FaultHit int
}

func (d dirs) readyFile() string { return filepath.Join(d.Root, "ready") }

// childMain runs in the child process.
func childMain() int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	if cfg.Fault != "" {
		hits := 0
		driver.SetFaultHook(func(point string) {
			if point != cfg.Fault {
				return
			}
			if hits++; hits == cfg.FaultHit {
				fmt.Fprintln(os.Stderr, "fault point reached, SIGKILL:", point)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		})
	}
	rc := &rest.Config{Host: cfg.APIHost, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	if cfg.APIHost == "" {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	hw, err := fakehw.New(cfg.Dirs.HW)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d, err := driver.New(testDriver,
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: testInventory(cfg.Devices)}),
		driver.WithPreparer(hw),
		driver.WithRESTConfig(rc),
		driver.WithNodeName(testNode),
		driver.WithRegistrarDir(cfg.Dirs.Registrar),
		driver.WithPluginDataDir(cfg.Dirs.PluginData),
		driver.WithCDIDir(cfg.Dirs.CDI))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	go func() {
		<-d.Ready()
		_ = os.WriteFile(cfg.Dirs.readyFile(), nil, 0o644)
	}()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

type child struct {
	cmd  *exec.Cmd
	done chan error
}

// startChild runs a driver process and waits until it serves.
func startChild(t *testing.T, c *cluster.Cluster, d dirs, devices int, fault string, hit int) *child {
	t.Helper()
	_ = os.Remove(d.readyFile())
	cfg, _ := json.Marshal(childConfig{Kubeconfig: c.Kubeconfig, Dirs: d, Devices: devices, Fault: fault, FaultHit: hit})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	log, err := os.OpenFile(filepath.Join(d.Root, "child.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, done: make(chan error, 1)}
	go func() { ch.done <- cmd.Wait() }()
	t.Cleanup(func() { ch.kill() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(d.readyFile()); err == nil {
			return ch
		}
		select {
		case err := <-ch.done:
			ch.done <- err
			logData, _ := os.ReadFile(filepath.Join(d.Root, "child.log"))
			t.Fatalf("driver process exited before ready: %v\n%s", err, logData)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("driver process not ready within 60s")
		}
	}
}

// kill stops the process by its PID and waits for it.
func (ch *child) kill() {
	if ch.cmd.Process != nil {
		_ = ch.cmd.Process.Kill()
	}
	select {
	case err := <-ch.done:
		ch.done <- err
	case <-time.After(10 * time.Second):
	}
}

// waitDead waits for the process to die by itself (at its fault point).
func (ch *child) waitDead(t *testing.T) {
	t.Helper()
	select {
	case err := <-ch.done:
		ch.done <- err
		if ws, ok := ch.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("driver process ended with %v, want death by SIGKILL at the fault point", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("driver process did not die at its fault point")
	}
}

// checkNode asserts the invariants after a crash and recovery: exactly the
// claims in want are prepared, each once (checkpoint, CDI spec, device
// state, claim-level state), nothing else is left, and the fake hardware
// saw no rule broken.
func checkNode(ctx context.Context, t *testing.T, d dirs, hw *fakehw.HW, want map[*resourceapi.ResourceClaim][]string) {
	t.Helper()
	store, err := checkpoint.Open(filepath.Join(d.PluginData, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	recs, corrupt, err := store.Load()
	if err != nil || len(corrupt) > 0 {
		t.Fatalf("checkpoint: %v %v", err, corrupt)
	}
	gotRecords := map[types.UID]checkpoint.State{}
	for _, r := range recs {
		gotRecords[r.ClaimUID] = r.State
	}
	wantRecords := map[types.UID]checkpoint.State{}
	wantHolders := map[string][]types.UID{}
	var wantClaims []types.UID
	for c, devs := range want {
		wantRecords[c.UID] = checkpoint.StatePrepared
		wantClaims = append(wantClaims, c.UID)
		for _, dev := range devs {
			wantHolders[testNode+"_"+dev] = append(wantHolders[testNode+"_"+dev], c.UID)
		}
	}
	slices.Sort(wantClaims)
	if d := cmp.Diff(wantRecords, gotRecords); d != "" {
		t.Errorf("checkpoint records (-want +got):\n%s", d)
	}
	w, err := cdi.NewWriter(d.CDI, testDriver, driver.CDIClass)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := w.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantClaims, specs, cmpEmpty); d != "" {
		t.Errorf("CDI specs (-want +got):\n%s", d)
	}
	holders, err := hw.Holders()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantHolders, holders, cmpEmpty); d != "" {
		t.Errorf("configured devices (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantClaims, hw.Claims(), cmpEmpty); d != "" {
		t.Errorf("claim-level setup (-want +got):\n%s", d)
	}
	if v := hw.Violations(); len(v) > 0 {
		t.Errorf("hardware rules broken: %v", v)
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []types.UID) bool { return slices.Equal(a, b) })

// TestKillAtEveryStep kills the driver with SIGKILL at each step of
// prepare and unprepare, restarts it, lets the kubelet retry (or give up
// and unprepare), and checks that every claim ends prepared exactly once
// or cleanly unprepared.
func TestKillAtEveryStep(t *testing.T) {
	c := sharedCluster(t)
	for _, point := range driver.FaultPoints {
		thens := []string{"retry", "give-up"}
		if strings.HasPrefix(point, "unprepare/") {
			thens = []string{"retry"} // the kubelet always retries an unprepare
		}
		for _, then := range thens {
			t.Run(strings.ReplaceAll(point, "/", "-")+"/"+then, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				ns := newNamespace(ctx, t, c)
				d := newDirs(t)
				hw := newHW(t, d)
				a := createClaim(ctx, t, c, ns, "a", drivertest.Device{Request: "gpu/big", Device: "dev-0"}, drivertest.Device{Request: "nic", Device: "dev-1"})
				// b is prepared before the crash and must survive it.
				b := createClaim(ctx, t, c, ns, "b", drivertest.Device{Device: "dev-2"})
				// other wants a's first device: it must succeed exactly
				// when a is clean.
				other := createClaim(ctx, t, c, ns, "other", drivertest.Device{Device: "dev-0"})

				prepareCrash := strings.HasPrefix(point, "prepare/")
				// b's prepare passes the prepare fault points once: die
				// on the second pass, in a's prepare.
				hit := 1
				if prepareCrash {
					hit = 2
				}
				ch := startChild(t, c, d, 4, point, hit)
				k, err := drivertest.Dial(d.draSocket())
				if err != nil {
					t.Fatal(err)
				}
				defer k.Close()
				if _, err := k.Prepare(ctx, b); err != nil {
					t.Fatal(err)
				}
				if !prepareCrash {
					if _, err := k.Prepare(ctx, a); err != nil {
						t.Fatal(err)
					}
				}
				// The fatal call: a's prepare or unprepare.
				var callErr error
				if prepareCrash {
					_, callErr = k.Prepare(ctx, a)
				} else {
					callErr = k.Unprepare(ctx, a)
				}
				if callErr == nil {
					t.Fatalf("call survived fault point %s", point)
				}
				ch.waitDead(t)

				startChild(t, c, d, 4, "", 0)
				// Recovery alone (before any call) has finished or undone a:
				// only a completed prepare stays prepared.
				recovered := map[*resourceapi.ResourceClaim][]string{b: {"dev-2"}}
				if point == "prepare/completed" {
					recovered[a] = []string{"dev-0", "dev-1"}
				}
				checkNode(ctx, t, d, hw, recovered)

				// The kubelet's next step.
				aPrepared := false
				switch {
				case prepareCrash && then == "retry":
					if _, err := k.Prepare(ctx, a); err != nil {
						t.Fatalf("retried prepare: %v", err)
					}
					aPrepared = true
				default:
					// Unprepare: retried after a crashed unprepare, or the
					// pod went away after a crashed prepare.
					if err := k.Unprepare(ctx, a); err != nil {
						t.Fatalf("unprepare after restart: %v", err)
					}
				}
				want := map[*resourceapi.ResourceClaim][]string{b: {"dev-2"}}
				if aPrepared {
					want[a] = []string{"dev-0", "dev-1"}
				}
				checkNode(ctx, t, d, hw, want)

				_, err = k.Prepare(ctx, other)
				if aPrepared {
					if err == nil || !strings.Contains(err.Error(), driver.ErrDeviceInUse.Error()) {
						t.Errorf("prepare of other claim on a's device: %v, want %v", err, driver.ErrDeviceInUse)
					}
				} else if err != nil {
					t.Errorf("prepare of other claim on a's released device: %v", err)
				}
				if err := k.Unprepare(ctx, a, b, other); err != nil {
					t.Fatal(err)
				}
				checkNode(ctx, t, d, hw, nil)
			})
		}
	}
}
