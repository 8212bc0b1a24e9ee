package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// This file runs whole drivers against an API server that does not
// answer: the kubelet's side (sockets, checkpoint, CDI folder) must not
// depend on it.

// deadAPI is a REST config for an address where nothing listens.
func deadAPI(t *testing.T) *rest.Config {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return &rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

func testCtx(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestOneInstancePerFolder: a second driver on the same folders, in the
// same process or in another one, fails at once with an error naming the
// first, and changes nothing: the first's claim in the middle of a
// prepare is not undone, its sockets are not taken over or removed.
func TestOneInstancePerFolder(t *testing.T) {
	ctx := testCtx(t)
	d := newDirs(t)
	hw := newHW(t, d)
	rc := deadAPI(t)
	disc := device.StaticDiscoverer{Inv: testInventory(2)}
	first := startWith(ctx, t, rc, d, disc, hw)

	// A claim the first is preparing right now: intent recorded, device
	// configured.
	store, err := checkpoint.Open(filepath.Join(d.PluginData, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	claim := driver.Claim{ClaimRef: driver.ClaimRef{UID: "preparing", Namespace: "ns", Name: "c"}}
	dev := driver.AllocatedDevice{Request: "r", Pool: testNode, Device: "dev-0"}
	if _, err := hw.PrepareDevice(ctx, claim, dev); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteIntent(&checkpoint.Record{ClaimUID: claim.UID, Namespace: "ns", Name: "c", State: checkpoint.StatePrepareStarted,
		Devices: []checkpoint.Device{{Request: "r", Pool: testNode, Device: "dev-0"}}}); err != nil {
		t.Fatal(err)
	}
	sockets := socketInodes(t, d)
	wantHolder := fmt.Sprintf("process %d (driver %s)", os.Getpid(), testDriver)

	t.Run("in this process", func(t *testing.T) {
		err := runBriefly(ctx, t, rc, d, disc)
		if !errors.Is(err, driver.ErrFoldersInUse) || !strings.Contains(err.Error(), wantHolder) {
			t.Errorf("second Run = %v, want %v naming %q", err, driver.ErrFoldersInUse, wantHolder)
		}
	})
	t.Run("with rolling update", func(t *testing.T) {
		err := runBriefly(ctx, t, rc, d, disc, driver.WithRollingUpdate("pod-2"))
		if !errors.Is(err, driver.ErrFoldersInUse) || !strings.Contains(err.Error(), wantHolder) {
			t.Errorf("second Run = %v, want %v naming %q", err, driver.ErrFoldersInUse, wantHolder)
		}
	})
	t.Run("in another process", func(t *testing.T) {
		cfg, _ := json.Marshal(childConfig{APIHost: rc.Host, Dirs: d, Devices: 2})
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("second driver process: %v, want exit status 1; output:\n%s", err, out)
		}
		if !strings.Contains(string(out), driver.ErrFoldersInUse.Error()) || !strings.Contains(string(out), wantHolder) {
			t.Errorf("second driver process output lacks %q and %q:\n%s", driver.ErrFoldersInUse, wantHolder, out)
		}
	})

	if d := cmp.Diff(sockets, socketInodes(t, d)); d != "" {
		t.Errorf("sockets replaced or removed (-before +after):\n%s", d)
	}
	if h, _ := hw.Holders(); !cmp.Equal(map[string][]types.UID{testNode + "_dev-0": {"preparing"}}, h) {
		t.Errorf("the first's claim in preparation was undone: devices %v", h)
	}
	if r, err := store.Get("preparing"); err != nil || r == nil || r.State != checkpoint.StatePrepareStarted {
		t.Errorf("the first's intent record: %+v, %v", r, err)
	}
	// The first still serves (an unprepare needs no API server).
	k, err := drivertest.Dial(first.d.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.Unprepare(ctx, testClaim("unknown")); err != nil {
		t.Errorf("first driver after the second's attempts: %v", err)
	}
	first.stop(t)
	// Once the first is gone, a second starts.
	startWith(ctx, t, rc, d, disc, hw)
}

// TestRollingUpdateAdmitsItsPeerOnly: the folders' instance lock admits
// the two instances of a rolling update of one driver and owner, each a
// process of its own, and refuses a third process and a process of
// another owner (a second release of the driver on the node), naming the
// folder and the processes that hold it; once one instance is gone the
// next instance of the same owner starts.
func TestRollingUpdateAdmitsItsPeerOnly(t *testing.T) {
	ctx := testCtx(t)
	d := newDirs(t)
	rc := deadAPI(t)
	disc := device.StaticDiscoverer{Inv: testInventory(2)}
	instance := func(owner, pod string) childConfig {
		return childConfig{APIHost: rc.Host, Dirs: d, Devices: 2, Owner: owner, PodUID: pod}
	}
	old := startChildWith(t, instance("gpus/release-a", "pod-1"))
	surge := startChildWith(t, instance("gpus/release-a", "pod-2"))
	named := func(c *child, owner string) string {
		return fmt.Sprintf("process %d (driver %s of %s)", c.cmd.Process.Pid, testDriver, owner)
	}
	refused := func(err error, want ...string) {
		t.Helper()
		if !errors.Is(err, driver.ErrFoldersInUse) {
			t.Fatalf("Run = %v, want %v", err, driver.ErrFoldersInUse)
		}
		for _, w := range append(want, d.PluginData+" is held by ") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the refusal %q does not name %q", err, w)
			}
		}
	}
	third := []driver.Option{driver.WithRollingUpdate("pod-3"),
		driver.WithRollingUpdateOwner("gpus/release-a")}
	refused(runBriefly(ctx, t, rc, d, disc, third...), named(old, "gpus/release-a"),
		named(surge, "gpus/release-a"), "a third process is refused")
	old.kill()
	other := []driver.Option{driver.WithRollingUpdate("pod-4"),
		driver.WithRollingUpdateOwner("gpus/release-b")}
	refused(runBriefly(ctx, t, rc, d, disc, other...), named(surge, "gpus/release-a"),
		"(driver "+testDriver+" of gpus/release-b) is not the other instance")
	refused(runBriefly(ctx, t, rc, d, disc), named(surge, "gpus/release-a"),
		"this process is not one of them")
	// The next instance of the same owner runs beside the surviving one.
	next := startWith(ctx, t, rc, d, disc, newHW(t, d), driver.WithRollingUpdate("pod-5"),
		driver.WithRollingUpdateOwner("gpus/release-a"))
	next.stop(t)
	surge.kill()
}

// runBriefly runs a driver on d and returns Run's error, or fails the
// test when Run is still running after 20s (a driver that started).
func runBriefly(ctx context.Context, t *testing.T, rc *rest.Config, d dirs, disc driver.Discoverer, opts ...driver.Option) error {
	t.Helper()
	drv, err := driver.New(testDriver, append([]driver.Option{
		driver.WithDiscoverer(disc), driver.WithPreparer(newHW(t, d)), driver.WithRESTConfig(rc), driver.WithNodeName(testNode),
		driver.WithRegistrarDir(d.Registrar), driver.WithPluginDataDir(d.PluginData), driver.WithCDIDir(d.CDI),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = drv.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("second driver ran (Run returned %v after its context ended)", err)
	}
	return err
}

// socketInodes maps each socket in d's folders to its inode.
func socketInodes(t *testing.T, d dirs) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, dir := range []string{d.PluginData, d.Registrar} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil || info.Mode().Type() != fs.ModeSocket {
				continue
			}
			out[e.Name()] = info.Sys().(*syscall.Stat_t).Ino
		}
	}
	return out
}

// TestModesUnderUmask000: sockets, lock files and folders get the
// runtime's modes whatever the umask, and loose existing folders are
// tightened.
func TestModesUnderUmask000(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, rolling := range []bool{false, true} {
		t.Run(fmt.Sprintf("rolling update %v", rolling), func(t *testing.T) {
			ctx := testCtx(t)
			d := newDirs(t)
			for _, dir := range []string{d.PluginData, d.Registrar, filepath.Join(d.PluginData, "checkpoint")} {
				if err := os.MkdirAll(dir, 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			var opts []driver.Option
			if rolling {
				opts = append(opts, driver.WithRollingUpdate("pod-1"))
			}
			r := startWith(ctx, t, deadAPI(t), d, device.StaticDiscoverer{Inv: testInventory(1)}, newHW(t, d), opts...)
			want := map[string]fs.FileMode{
				d.PluginData: 0o750 | fs.ModeDir,
				d.Registrar:  0o755 | fs.ModeDir,
				filepath.Join(d.PluginData, "checkpoint"):             0o700 | fs.ModeDir,
				filepath.Join(d.PluginData, "drakit.lock"):            0o600,
				filepath.Join(d.PluginData, "checkpoint/drakit.lock"): 0o600,
				r.d.DRASocket(): 0o600 | fs.ModeSocket,
			}
			// The instance lock's admission gate, and the record of who
			// holds it.
			want[filepath.Join(d.PluginData, "drakit.gate")] = 0o600
			want[filepath.Join(d.PluginData, "drakit.holder")] = 0o600
			if rolling {
				want[filepath.Join(d.PluginData, "serialize.lock")] = 0o600
				delete(want, filepath.Join(d.PluginData, "drakit.holder"))
				want[filepath.Join(d.PluginData, "drakit.slot0.holder")] = 0o600
			}
			regs, _ := filepath.Glob(filepath.Join(d.Registrar, "*.sock"))
			if len(regs) != 1 {
				t.Fatalf("registration sockets: %v", regs)
			}
			want[regs[0]] = 0o600 | fs.ModeSocket
			got := map[string]fs.FileMode{}
			for p := range want {
				info, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				got[p] = info.Mode() & (fs.ModePerm | fs.ModeDir | fs.ModeSocket)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("modes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPeriodicHousekeeping: temporary files of crashed CDI writes and
// orphaned specs that appear while the driver runs are collected without
// a restart.
func TestPeriodicHousekeeping(t *testing.T) {
	ctx := testCtx(t)
	d := newDirs(t)
	startWith(ctx, t, deadAPI(t), d, device.StaticDiscoverer{Inv: testInventory(1)}, newHW(t, d), driver.WithHousekeepingInterval(50*time.Millisecond))
	w, err := cdi.NewWriter(d.CDI, testDriver, driver.CDIClass)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, cdi.Claim{UID: "orphan", Devices: []cdi.Device{{Name: "d"}}}); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(d.CDI, "."+testDriver+"+"+driver.CDIClass+"+crashed.json.1.tmp")
	if err := os.WriteFile(tmp, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, time.Now().Add(-2*time.Minute), time.Now().Add(-2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the CDI folder to be collected", func(context.Context) (bool, error) {
		return d.specCount(t) == 0, nil
	})
}

// TestAPIServerUnreachable: with the API server down, the driver serves
// the kubelet, /healthz says ok and /readyz says why it is not ready.
func TestAPIServerUnreachable(t *testing.T) {
	ctx := testCtx(t)
	d := newDirs(t)
	r := startWith(ctx, t, deadAPI(t), d, device.StaticDiscoverer{Inv: testInventory(1)}, newHW(t, d), driver.WithHTTPAddress("127.0.0.1:0"))
	base := "http://" + r.d.HTTPAddr()
	if got := httpGet(t, base+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	code, body := httpStatus(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the API server") {
		t.Errorf("/readyz = %d %q, want 503 naming the API server", code, body)
	}
	if m := httpGet(t, base+"/metrics"); !strings.Contains(m, `drakit_driver_api_server_reachable{driver="`+testDriver+`"} 0`) {
		t.Errorf("metrics lack api_server_reachable 0")
	}
}

func httpStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCDIKind: with WithCDIKind the runtime's specs are of that kind: the
// runtime collects an orphan of its kind and leaves one of the default
// kind alone.
func TestCDIKind(t *testing.T) {
	ctx := testCtx(t)
	d := newDirs(t)
	write := func(vendor, class string) {
		w, err := cdi.NewWriter(d.CDI, vendor, class)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(ctx, cdi.Claim{UID: "orphan", Devices: []cdi.Device{{Name: "d"}}}); err != nil {
			t.Fatal(err)
		}
	}
	write("acme.example.com", "fpga")
	write(testDriver, driver.CDIClass)
	startWith(ctx, t, deadAPI(t), d, device.StaticDiscoverer{Inv: testInventory(1)}, newHW(t, d), driver.WithCDIKind("acme.example.com/fpga"))
	entries, err := os.ReadDir(d.CDI)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if d := cmp.Diff([]string{testDriver + "+" + driver.CDIClass + "+orphan.json"}, names); d != "" {
		t.Errorf("CDI folder after start (-want +got):\n%s", d)
	}
}

// TestRunTwice: a Runtime runs once. A second Run, while the first runs
// or after it returned, returns ErrRunAgain at once and touches nothing
// (before, a Run after the first had returned closed Ready again and
// panicked).
func TestRunTwice(t *testing.T) {
	ctx := testCtx(t)
	d := newDirs(t)
	hw := newHW(t, d)
	first := startWith(ctx, t, deadAPI(t), d, device.StaticDiscoverer{Inv: testInventory(1)}, hw)
	if err := first.d.Run(ctx); !errors.Is(err, driver.ErrRunAgain) {
		t.Fatalf("Run while Run runs: %v, want ErrRunAgain", err)
	}
	first.cancel()
	<-first.done
	if first.err != nil {
		t.Fatalf("the first Run: %v", first.err)
	}
	if err := first.d.Run(ctx); !errors.Is(err, driver.ErrRunAgain) {
		t.Fatalf("Run after Run returned: %v, want ErrRunAgain", err)
	}
}
