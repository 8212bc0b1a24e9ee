package driver_test

import (
	"context"
	"encoding/json"
	"errors"
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
	// FailDevice is a device whose PrepareDevice fails ("" for none).
	FailDevice string
	// PodUID and Owner, when set, run the child as an instance of a
	// rolling update (WithRollingUpdate, WithRollingUpdateOwner).
	PodUID, Owner string
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
	// Every step a claim can take: claim hooks, device metadata,
	// claim-wide edits.
	hw.Metadata, hw.ClaimEnv = true, "FAKE_CLAIM"
	if cfg.FailDevice != "" {
		hw.FailPrepare = func(dev driver.AllocatedDevice) error {
			if dev.Device == cfg.FailDevice {
				return fmt.Errorf("simulated failure of %s", dev.Device)
			}
			return nil
		}
	}
	opts := []driver.Option{
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: testInventory(cfg.Devices)}),
		driver.WithPreparer(hw),
		driver.WithRESTConfig(rc),
		driver.WithNodeName(testNode),
		driver.WithRegistrarDir(cfg.Dirs.Registrar),
		driver.WithPluginDataDir(cfg.Dirs.PluginData),
		driver.WithCDIDir(cfg.Dirs.CDI),
		driver.WithDeviceMetadata()}
	if cfg.PodUID != "" {
		opts = append(opts, driver.WithRollingUpdate(types.UID(cfg.PodUID)))
	}
	if cfg.Owner != "" {
		opts = append(opts, driver.WithRollingUpdateOwner(cfg.Owner))
	}
	d, err := driver.New(testDriver, opts...)
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
	return startChildWith(t, childConfig{Kubeconfig: c.Kubeconfig, Dirs: d, Devices: devices, Fault: fault, FaultHit: hit})
}

// spawnChild runs a driver process.
func spawnChild(t *testing.T, cc childConfig) *child {
	t.Helper()
	d := cc.Dirs
	_ = os.Remove(d.readyFile())
	cfg, _ := json.Marshal(cc)
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
	return ch
}

// startChildWith runs a driver process and waits until it serves.
func startChildWith(t *testing.T, cc childConfig) *child {
	t.Helper()
	d := cc.Dirs
	ch := spawnChild(t, cc)
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
	for _, h := range wantHolders {
		slices.Sort(h) // as Holders lists them (shares: several claims a device)
	}
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

// killCase is one way the driver is killed with SIGKILL: the claim a's
// step (fault point, a's pass there) and what a is doing then.
type killCase struct {
	point string
	hit   int // a's pass at point, from 1
	// what a is doing: "prepare", "unprepare", "rollback" (its prepare
	// failed on dev-1 and is being undone), "lost" (its record was
	// corrupt and it is being released from its allocation), "recover"
	// (a second crash, in the recovery of a crashed prepare).
	during string
}

func (k killCase) name() string {
	return fmt.Sprintf("%s/%s#%d", k.during, strings.ReplaceAll(k.point, "/", "-"), k.hit)
}

// killCases are the fault points in every phase, a pass per device where
// a step runs per device (a has two devices).
func killCases() []killCase {
	var out []killCase
	add := func(during, point string, hits int) {
		for h := 1; h <= hits; h++ {
			out = append(out, killCase{point: point, hit: h, during: during})
		}
	}
	for _, p := range []struct {
		point string
		hits  int
	}{
		{"prepare/record-created", 1}, {"prepare/intent-written", 1}, {"prepare/claim-hook-done", 1}, {"prepare/device-prepared", 2},
		{"prepare/metadata-recorded", 2}, {"prepare/claim-edits-done", 1}, {"prepare/cdi-written", 1}, {"prepare/completion-appended", 1}, {"prepare/completed", 1},
	} {
		add("prepare", p.point, p.hits)
	}
	undo := []struct {
		point string
		hits  int
	}{{"unprepare/device-unprepared", 2}, {"unprepare/claim-hook-done", 1}, {"unprepare/cdi-removed", 1}, {"unprepare/record-unlinked", 1}, {"unprepare/record-deleted", 1}}
	add("unprepare", "unprepare/intent-written", 1)
	for _, during := range []string{"unprepare", "rollback", "lost", "recover"} {
		for _, p := range undo {
			if during == "lost" && p.point == "unprepare/record-unlinked" {
				continue // a lost claim has no record to unlink
			}
			add(during, p.point, p.hits)
		}
	}
	add("lost", "lost/released", 1)
	return out
}

// TestKillAtEveryStep kills the driver with SIGKILL at each step of
// prepare, unprepare, rollback, the release of a claim whose record was
// lost, and recovery; restarts it, lets the kubelet retry (or give up and
// unprepare), and checks that every claim ends prepared exactly once or
// cleanly unprepared (the fake hardware reports any device or claim set
// up twice).
func TestKillAtEveryStep(t *testing.T) {
	c := sharedCluster(t)
	covered := map[string]bool{}
	survived, tried := 0, 0
	for _, kc := range killCases() {
		covered[kc.point] = true
		thens := []string{"retry", "give-up"}
		if kc.during == "unprepare" {
			thens = []string{"retry"} // the kubelet always retries an unprepare
		}
		for _, then := range thens {
			ran := false
			ok := t.Run(kc.name()+"/"+then, func(t *testing.T) {
				ran = true
				killAndRecover(t, c, kc, then)
			})
			if ran {
				tried++
				if ok {
					survived++
				}
			}
		}
	}
	for _, p := range driver.FaultPoints {
		if !covered[p] {
			t.Errorf("fault point %s is not tried", p)
		}
	}
	t.Logf("kill -9 at %d injection points (%d fault points): %d of %d scenarios survived", len(killCases()), len(driver.FaultPoints), survived, tried)
}

func killAndRecover(t *testing.T, c *cluster.Cluster, kc killCase, then string) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t, c)
	d := newDirs(t)
	hw := newHW(t, d)
	a := createClaim(ctx, t, c, ns, "a", drivertest.Device{Request: "gpu/big", Device: "dev-0"}, drivertest.Device{Request: "nic", Device: "dev-1"})
	// b is prepared before the crash and must survive it.
	b := createClaim(ctx, t, c, ns, "b", drivertest.Device{Device: "dev-2"})
	// other wants a's first device: it must succeed exactly when a is
	// clean.
	other := createClaim(ctx, t, c, ns, "other", drivertest.Device{Device: "dev-0"})
	base := childConfig{Kubeconfig: c.Kubeconfig, Dirs: d, Devices: 4}
	dial := func(t *testing.T) *drivertest.Kubelet {
		t.Helper()
		k, err := drivertest.Dial(d.draSocket())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		return k
	}
	withFault := func(point string, hit int) childConfig {
		cc := base
		cc.Fault, cc.FaultHit = point, hit
		return cc
	}

	var callErr error
	switch kc.during {
	case "prepare":
		// b's prepare passes each prepare fault point once (it has one
		// device): die on a's pass.
		ch := startChildWith(t, withFault(kc.point, kc.hit+1))
		k := dial(t)
		if _, err := k.Prepare(ctx, b); err != nil {
			t.Fatal(err)
		}
		_, callErr = k.Prepare(ctx, a)
		ch.waitDead(t)
	case "unprepare":
		ch := startChildWith(t, withFault(kc.point, kc.hit))
		k := dial(t)
		if _, err := k.Prepare(ctx, b, a); err != nil {
			t.Fatal(err)
		}
		callErr = k.Unprepare(ctx, a)
		ch.waitDead(t)
	case "rollback":
		cc := withFault(kc.point, kc.hit)
		cc.FailDevice = "dev-1"
		ch := startChildWith(t, cc)
		k := dial(t)
		if _, err := k.Prepare(ctx, b); err != nil {
			t.Fatal(err)
		}
		_, callErr = k.Prepare(ctx, a)
		ch.waitDead(t)
	case "lost":
		ch := startChildWith(t, base)
		k := dial(t)
		if _, err := k.Prepare(ctx, b, a); err != nil {
			t.Fatal(err)
		}
		ch.kill()
		if err := os.WriteFile(filepath.Join(d.PluginData, "checkpoint", string(a.UID)+".json"), []byte(`{"kind":`), 0o600); err != nil {
			t.Fatal(err)
		}
		ch = startChildWith(t, withFault(kc.point, kc.hit))
		k = dial(t)
		if then == "retry" {
			_, callErr = k.Prepare(ctx, a) // a pod restart: released, then prepared afresh
		} else {
			callErr = k.Unprepare(ctx, a) // released through the API server's allocation
		}
		ch.waitDead(t)
	case "recover":
		// A prepare killed once all of a's devices are prepared...
		ch := startChildWith(t, withFault("prepare/cdi-written", 2))
		k := dial(t)
		if _, err := k.Prepare(ctx, b); err != nil {
			t.Fatal(err)
		}
		if _, err := k.Prepare(ctx, a); err == nil {
			t.Fatal("prepare survived its fault point")
		}
		ch.waitDead(t)
		// ... and the next process killed while recovery undoes it.
		spawnChild(t, withFault(kc.point, kc.hit)).waitDead(t)
		callErr = errors.New("killed in recovery")
	}
	if callErr == nil {
		t.Fatalf("call survived fault point %s", kc.point)
	}

	startChildWith(t, base)
	k := dial(t)
	// Recovery alone (before any call) has finished or undone a: only a
	// completed prepare stays prepared. A lost claim waits for the
	// kubelet's next call.
	if kc.during != "lost" {
		recovered := map[*resourceapi.ResourceClaim][]string{b: {"dev-2"}}
		// The completed record is in the file once appended (a process
		// crash loses no written data; the fsync is for power loss).
		if kc.point == "prepare/completion-appended" || kc.point == "prepare/completed" {
			recovered[a] = []string{"dev-0", "dev-1"}
		}
		checkNode(ctx, t, d, hw, recovered)
	}

	// The kubelet's next step.
	aPrepared := false
	switch {
	case kc.during != "unprepare" && then == "retry":
		if _, err := k.Prepare(ctx, a); err != nil {
			t.Fatalf("retried prepare: %v", err)
		}
		aPrepared = true
	default:
		// Unprepare: retried after a crashed unprepare, or the pod went
		// away after a crashed prepare.
		if err := k.Unprepare(ctx, a); err != nil {
			t.Fatalf("unprepare after restart: %v", err)
		}
	}
	want := map[*resourceapi.ResourceClaim][]string{b: {"dev-2"}}
	if aPrepared {
		want[a] = []string{"dev-0", "dev-1"}
	}
	checkNode(ctx, t, d, hw, want)

	_, err := k.Prepare(ctx, other)
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
}
