package driver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/driver/internal/fakehw"
	"github.com/drakit/drakit/internal/cluster"
)

// running is an in-process driver started by a test.
type running struct {
	d      *driver.Runtime
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if err := r.err; err != nil {
			t.Errorf("driver Run returned %v after cancel, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("driver did not stop within 30s of cancel")
	}
}

// waitPublished waits until the driver's slices are in the API server
// (Runtime.Published), and fails the test as what if ctx ends first.
func (r *running) waitPublished(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.d.Published():
	case <-ctx.Done():
		t.Fatal(what)
	}
}

func startDriver(ctx context.Context, t *testing.T, c *cluster.Cluster, d dirs, disc driver.Discoverer, hw *fakehw.HW, opts ...driver.Option) *running {
	t.Helper()
	return startWith(ctx, t, c.RESTConfig, d, disc, hw, opts...)
}

// startWith runs a driver that talks to the API server rc names (which
// need not answer: the driver serves the kubelet without it).
func startWith(ctx context.Context, t *testing.T, rc *rest.Config, d dirs, disc driver.Discoverer, hw *fakehw.HW, opts ...driver.Option) *running {
	t.Helper()
	base := []driver.Option{
		driver.WithDiscoverer(disc),
		driver.WithPreparer(hw),
		driver.WithRESTConfig(rc),
		driver.WithNodeName(testNode),
		driver.WithRegistrarDir(d.Registrar),
		driver.WithPluginDataDir(d.PluginData),
		driver.WithCDIDir(d.CDI),
	}
	drv, err := driver.New(testDriver, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &running{d: drv, cancel: cancel, done: make(chan struct{})}
	go func() { r.err = drv.Run(rctx); close(r.done) }()
	select {
	case <-drv.Ready():
	case <-r.done:
		cancel()
		t.Fatalf("driver Run: %v", r.err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("driver not ready within 60s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
		}
	})
	return r
}

func newHW(t *testing.T, d dirs) *fakehw.HW {
	t.Helper()
	hw, err := fakehw.New(d.HW)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

func createClaim(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, devs ...drivertest.Device) *resourceapi.ResourceClaim {
	t.Helper()
	for i := range devs {
		if devs[i].Pool == "" {
			devs[i].Pool = testNode
		}
	}
	claim, err := drivertest.CreateAllocatedClaim(ctx, c.Client, drivertest.ClaimSpec{Namespace: ns, Name: name, Driver: testDriver, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

func slicesOfNode(ctx context.Context, c *cluster.Cluster) ([]resourceapi.ResourceSlice, error) {
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + testNode + ",spec.driver=" + testDriver})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func taintsOf(slices []resourceapi.ResourceSlice) map[string][]string {
	out := map[string][]string{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			for _, t := range d.Taints {
				out[d.Name] = append(out[d.Name], t.Key+"="+t.Value+":"+string(t.Effect))
			}
		}
	}
	return out
}

func TestDriverThroughKubeletSockets(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	disc := &eventDiscoverer{inv: testInventory(4), events: make(chan device.Event)}
	r := startDriver(ctx, t, c, d, disc, hw, driver.WithHTTPAddress("127.0.0.1:0"))

	t.Run("registration", func(t *testing.T) {
		info, err := drivertest.GetInfo(ctx, d.Registrar+"/"+testDriver+"-reg.sock")
		if err != nil {
			t.Fatal(err)
		}
		if info.Name != testDriver || info.Type != "DRAPlugin" || info.Endpoint != d.draSocket() {
			t.Errorf("GetInfo = %+v", info)
		}
		if !slices.Contains(info.SupportedVersions, "v1.DRAPlugin") || !slices.Contains(info.SupportedVersions, "v1beta1.DRAPlugin") {
			t.Errorf("supported versions %v lack v1 or v1beta1 DRAPlugin", info.SupportedVersions)
		}
	})

	t.Run("slices published", func(t *testing.T) {
		waitFor(ctx, t, "4 published devices", func(ctx context.Context) (bool, error) {
			s, err := slicesOfNode(ctx, c)
			n := 0
			for _, x := range s {
				n += len(x.Spec.Devices)
			}
			return n == 4, err
		})
	})

	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	t.Run("prepare, repeat, unprepare", func(t *testing.T) {
		claim := createClaim(ctx, t, c, ns, "one", drivertest.Device{Request: "gpu/small", Device: "dev-0"}, drivertest.Device{Request: "nic", Device: "dev-1"})
		first, err := k.Prepare(ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		got := first[string(claim.UID)]
		type dev struct {
			Requests []string
			Device   string
			IDs      int
		}
		var gotDevs []dev
		for _, x := range got.Devices {
			gotDevs = append(gotDevs, dev{x.RequestNames, x.DeviceName, len(x.CdiDeviceIds)})
		}
		// The helper strips subrequests on the wire; drakit returns them
		// as allocated.
		want := []dev{{[]string{"gpu"}, "dev-0", 1}, {[]string{"nic"}, "dev-1", 1}}
		if d := cmp.Diff(want, gotDevs); d != "" {
			t.Errorf("prepared devices (-want +got):\n%s", d)
		}
		for i, x := range got.Devices {
			env := injectEnv(t, d.CDI, x.CdiDeviceIds...)
			if d := cmp.Diff([]string{fmt.Sprintf("FAKE_DEVICE=dev-%d", i)}, env); d != "" {
				t.Errorf("env of device %d (-want +got):\n%s", i, d)
			}
		}
		again, err := k.Prepare(ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(got.String(), again[string(claim.UID)].String()); d != "" {
			t.Errorf("repeated prepare differs:\n%s", d)
		}
		for i := range 2 {
			if err := k.Unprepare(ctx, claim); err != nil {
				t.Fatalf("unprepare #%d: %v", i, err)
			}
		}
		if n := d.specCount(t); n != 0 {
			t.Errorf("%d CDI specs left after unprepare", n)
		}
	})

	t.Run("unprepare after claim deleted", func(t *testing.T) {
		claim := createClaim(ctx, t, c, ns, "gone", drivertest.Device{Device: "dev-2"})
		if _, err := k.Prepare(ctx, claim); err != nil {
			t.Fatal(err)
		}
		if err := c.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := k.Unprepare(ctx, claim); err != nil {
			t.Fatalf("unprepare of deleted claim: %v", err)
		}
		holders, _ := hw.Holders()
		if len(holders) != 0 {
			t.Errorf("devices still configured: %v", holders)
		}
		unknown := claim.DeepCopy()
		unknown.UID = types.UID("00000000-0000-0000-0000-000000000000")
		if err := k.Unprepare(ctx, unknown); err != nil {
			t.Errorf("unprepare of unknown claim: %v", err)
		}
	})

	t.Run("unpublished device refused", func(t *testing.T) {
		ghost := createClaim(ctx, t, c, ns, "ghost", drivertest.Device{Device: "dev-3"}, drivertest.Device{Request: "x", Device: "ghost"})
		_, err := k.Prepare(ctx, ghost)
		if err == nil || !strings.Contains(err.Error(), testNode+`/ghost (request "x") is not published`) {
			t.Errorf("prepare of a claim allocated an unpublished device: %v", err)
		}
		if h, _ := hw.Holders(); len(h) != 0 {
			t.Errorf("devices configured: %v", h)
		}
	})

	t.Run("guard refuses a device in use", func(t *testing.T) {
		a := createClaim(ctx, t, c, ns, "guard-a", drivertest.Device{Device: "dev-3"})
		b := createClaim(ctx, t, c, ns, "guard-b", drivertest.Device{Device: "dev-3"})
		admin := createClaim(ctx, t, c, ns, "guard-admin", drivertest.Device{Device: "dev-3", AdminAccess: true})
		if _, err := k.Prepare(ctx, a); err != nil {
			t.Fatal(err)
		}
		_, err := k.Prepare(ctx, b)
		if err == nil || !strings.Contains(err.Error(), driver.ErrDeviceInUse.Error()) {
			t.Errorf("prepare of second claim on dev-3: %v, want %q", err, driver.ErrDeviceInUse)
		}
		if _, err := k.Prepare(ctx, admin); err != nil {
			t.Errorf("admin access claim on dev-3: %v", err)
		}
		if err := k.Unprepare(ctx, a, b, admin); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("health becomes taints and kubelet reports", func(t *testing.T) {
		hctx, hcancel := context.WithCancel(ctx)
		defer hcancel()
		recv, err := k.WatchHealth(hctx)
		if err != nil {
			t.Fatal(err)
		}
		healthOf := func(dev string) drahealthv1.HealthStatus {
			for {
				resp, err := recv()
				if err != nil {
					t.Fatalf("health stream: %v", err)
				}
				for _, x := range resp.Devices {
					if x.Device.DeviceName == dev {
						return x.Health
					}
				}
			}
		}
		// Nothing is reported before the vendor reports health; then
		// every device is, those not reported on as Unknown.
		disc.events <- device.Event{Type: device.EventHealth, Health: []device.HealthReport{{Device: device.DeviceID{Pool: testNode, Device: "dev-1"}, Health: device.Healthy}}}
		if h := healthOf("dev-1"); h != drahealthv1.HealthStatus_HEALTHY {
			t.Errorf("initial health of dev-1 = %v, want HEALTHY", h)
		}
		if h := healthOf("dev-2"); h != drahealthv1.HealthStatus_UNKNOWN {
			t.Errorf("health of dev-2, never reported = %v, want UNKNOWN", h)
		}
		disc.events <- device.Event{Type: device.EventHealth, Health: []device.HealthReport{{Device: device.DeviceID{Pool: testNode, Device: "dev-1"}, Health: device.Unhealthy, Reason: "XidError79"}}}
		waitFor(ctx, t, "taint on dev-1", func(ctx context.Context) (bool, error) {
			s, err := slicesOfNode(ctx, c)
			return cmp.Equal(map[string][]string{"dev-1": {testDriver + "/unhealthy=XidError79:NoSchedule"}}, taintsOf(s)), err
		})
		for healthOf("dev-1") != drahealthv1.HealthStatus_UNHEALTHY {
		}
		disc.events <- device.Event{Type: device.EventHealth, Health: []device.HealthReport{{Device: device.DeviceID{Pool: testNode, Device: "dev-1"}, Health: device.Healthy}}}
		waitFor(ctx, t, "taint on dev-1 removed", func(ctx context.Context) (bool, error) {
			s, err := slicesOfNode(ctx, c)
			return len(taintsOf(s)) == 0 && len(s) > 0, err
		})
		for healthOf("dev-1") != drahealthv1.HealthStatus_HEALTHY {
		}
	})

	t.Run("metrics and liveness", func(t *testing.T) {
		body := httpGet(t, "http://"+r.d.HTTPAddr()+"/metrics")
		for _, want := range []string{
			`drakit_driver_prepare_claim_duration_seconds_count{driver="` + testDriver + `"}`,
			`drakit_driver_unprepare_claim_duration_seconds_count{driver="` + testDriver + `"}`,
			`drakit_driver_errors_total{driver="` + testDriver + `",operation="prepare",reason="DeviceInUse"} 1`,
			`drakit_driver_prepared_claims{driver="` + testDriver + `"} 0`,
			`drakit_driver_published_devices{driver="` + testDriver + `"} 4`,
			"go_goroutines ",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
		if got := httpGet(t, "http://"+r.d.HTTPAddr()+"/healthz"); got != "ok\n" {
			t.Errorf("/healthz = %q", got)
		}
		// A DRA socket that no longer accepts connections fails liveness.
		moved := d.draSocket() + ".moved"
		if err := os.Rename(d.draSocket(), moved); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + r.d.HTTPAddr() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/healthz without DRA socket: %s, want 503", resp.Status)
		}
		if err := os.Rename(moved, d.draSocket()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("graceful stop", func(t *testing.T) {
		r.stop(t)
		if _, err := os.Stat(d.draSocket()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("DRA socket still there after stop: %v", err)
		}
	})
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

func TestRestartBetweenPrepareAndUnprepare(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	disc := device.StaticDiscoverer{Inv: testInventory(2)}
	r := startDriver(ctx, t, c, d, disc, hw)
	claim := createClaim(ctx, t, c, ns, "keep", drivertest.Device{Device: "dev-0"})
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	before, err := k.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	lost := createClaim(ctx, t, c, ns, "lost", drivertest.Device{Device: "dev-1"})
	if _, err := k.Prepare(ctx, lost); err != nil {
		t.Fatal(err)
	}
	r.stop(t)

	// A corrupt record next to the good one is quarantined and reported
	// with an event on the node; the driver starts anyway. So is the
	// corrupted record of a prepared claim, whose device the driver
	// releases from the claim's allocation in the API server.
	if err := os.WriteFile(filepath.Join(d.PluginData, "checkpoint", "0000-corrupt.json"), []byte(`{"kind":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.PluginData, "checkpoint", string(lost.UID)+".json"), []byte(`{"kind":`), 0o600); err != nil {
		t.Fatal(err)
	}
	startDriver(ctx, t, c, d, disc, hw)
	waitFor(ctx, t, "event about the corrupt record", func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + driver.ReasonCorrupt + ",involvedObject.name=" + testNode})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "0000-corrupt.json") {
				return true, nil
			}
		}
		return false, nil
	})
	after, err := k.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before[string(claim.UID)].String(), after[string(claim.UID)].String()); d != "" {
		t.Errorf("prepare after restart differs:\n%s", d)
	}
	if err := k.Unprepare(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if err := k.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	holders, _ := hw.Holders()
	for dev, uids := range holders {
		if len(uids) == 0 {
			delete(holders, dev)
		}
	}
	if len(holders) != 0 || d.specCount(t) != 0 {
		t.Errorf("after unprepare: devices %v, %d CDI specs", holders, d.specCount(t))
	}
	if v := hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

// TestRollingUpdate runs two instances on the same folders, as during a
// DaemonSet rolling update: a claim prepared by the old one is seen as
// prepared by the new one and unprepared by it.
func TestRollingUpdate(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	disc := device.StaticDiscoverer{Inv: testInventory(2)}
	old := startDriver(ctx, t, c, d, disc, hw, driver.WithRollingUpdate("old-pod"))
	claim := createClaim(ctx, t, c, ns, "rolled", drivertest.Device{Device: "dev-0"})
	kOld, err := drivertest.Dial(old.d.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer kOld.Close()
	first, err := kOld.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	newer := startDriver(ctx, t, c, d, disc, hw, driver.WithRollingUpdate("new-pod"))
	if old.d.DRASocket() == newer.d.DRASocket() {
		t.Fatalf("both instances use socket %s", old.d.DRASocket())
	}
	kNew, err := drivertest.Dial(newer.d.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer kNew.Close()
	again, err := kNew.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(first[string(claim.UID)].String(), again[string(claim.UID)].String()); d != "" {
		t.Errorf("new instance's prepare differs:\n%s", d)
	}
	// The guard spans instances: the old one refuses dev-0 for another claim.
	other := createClaim(ctx, t, c, ns, "other", drivertest.Device{Device: "dev-0"})
	if _, err := kOld.Prepare(ctx, other); err == nil || !strings.Contains(err.Error(), driver.ErrDeviceInUse.Error()) {
		t.Errorf("old instance prepared a device the claim holds: %v", err)
	}
	old.stop(t)
	if err := kNew.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	holders, _ := hw.Holders()
	if len(holders) != 0 || d.specCount(t) != 0 {
		t.Errorf("after unprepare by the new instance: devices %v, %d CDI specs", holders, d.specCount(t))
	}
	if v := hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

// TestAPIServerDownAtStart: a driver started while the API server cannot
// be reached serves the kubelet and is live at once, not ready; once the
// API server answers, its slices are published and it is ready.
func TestAPIServerDownAtStart(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	// The driver reaches the API server through a proxy that is not
	// there yet: the address refuses connections.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rc := rest.CopyConfig(c.RESTConfig)
	rc.Host = "https://" + addr
	r := startWith(ctx, t, rc, d, device.StaticDiscoverer{Inv: testInventory(2)}, hw, driver.WithHTTPAddress("127.0.0.1:0"))
	base := "http://" + r.d.HTTPAddr()
	if got := httpGet(t, base+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz during the outage = %q", got)
	}
	if code, body := httpStatus(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage = %d %q, want 503", code, body)
	}
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	// The API server comes back.
	proxy, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the proxy's address: %v", err)
	}
	defer proxy.Close()
	upstream := strings.TrimPrefix(c.RESTConfig.Host, "https://")
	go func() {
		for {
			conn, err := proxy.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, conn) }()
				_, _ = io.Copy(conn, up)
			}()
		}
	}()
	waitFor(ctx, t, "2 published devices", func(ctx context.Context) (bool, error) {
		s, err := slicesOfNode(ctx, c)
		n := 0
		for _, x := range s {
			n += len(x.Spec.Devices)
		}
		return n == 2, err
	})
	waitFor(ctx, t, "/readyz ok", func(context.Context) (bool, error) {
		code, _ := httpStatus(t, base+"/readyz")
		return code == http.StatusOK, nil
	})
	claim := createClaim(ctx, t, c, ns, "after-outage", drivertest.Device{Device: "dev-0"})
	if _, err := k.Prepare(ctx, claim); err != nil {
		t.Fatalf("prepare after the outage: %v", err)
	}
	if err := k.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
}

// TestReadyzAsksNothing: a readiness probe makes no API request (before:
// one ResourceSlice LIST per probe, 2,500 LISTs/s for a 5,000-node
// cluster probed every 2 s).
func TestReadyzAsksNothing(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	var lists atomic.Int64
	rc := rest.CopyConfig(c.RESTConfig)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/resourceslices") && req.URL.Query().Get("watch") == "" {
				lists.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	r := startWith(ctx, t, rc, d, device.StaticDiscoverer{Inv: testInventory(1)}, hw, driver.WithHTTPAddress("127.0.0.1:0"))
	base := "http://" + r.d.HTTPAddr()
	waitFor(ctx, t, "/readyz ok", func(context.Context) (bool, error) {
		code, _ := httpStatus(t, base+"/readyz")
		return code == http.StatusOK, nil
	})
	before := lists.Load()
	for range 20 {
		if code, body := httpStatus(t, base+"/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz = %d %q", code, body)
		}
	}
	if n := lists.Load() - before; n != 0 {
		t.Errorf("20 readiness probes listed ResourceSlices %d times, want 0", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestUncheckedPools: devices of a pool named in WithUncheckedPools (one
// a controller publishes) are prepared unpublished; other unpublished
// devices are still refused.
func TestUncheckedPools(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: testInventory(1)}, hw, driver.WithUncheckedPools("fabric"))
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	fabric := createClaim(ctx, t, c, ns, "fabric", drivertest.Device{Pool: "fabric", Device: "nic-7"})
	if _, err := k.Prepare(ctx, fabric); err != nil {
		t.Errorf("prepare of a device in an unchecked pool: %v", err)
	}
	ghost := createClaim(ctx, t, c, ns, "ghost", drivertest.Device{Device: "ghost"})
	if _, err := k.Prepare(ctx, ghost); err == nil || !strings.Contains(err.Error(), "is not published") {
		t.Errorf("prepare of an unpublished device in the node's pool: %v", err)
	}
	if err := k.Unprepare(ctx, fabric, ghost); err != nil {
		t.Fatal(err)
	}
}
