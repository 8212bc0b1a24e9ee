package driver_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
)

// TestRollingUpdateProbes: the two instances of a rolling update share
// the host's network. The new one starts while the old one holds the
// HTTP address and waits for it; each instance's probe socket answers
// for that instance (an httpGet probe on the shared address would reach
// the old one); once the old one stops, the new one takes the address.
func TestRollingUpdateProbes(t *testing.T) {
	ctx := testCtx(t)
	d := newDirs(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	disc := device.StaticDiscoverer{Inv: testInventory(1)}
	hw := newHW(t, d)
	oldSock, newSock := filepath.Join(d.Root, "old.sock"), filepath.Join(d.Root, "new.sock")
	old := startWith(ctx, t, deadAPI(t), d, disc, hw, driver.WithRollingUpdate("old-pod"), driver.WithHTTPAddress(addr), driver.WithProbeSocket(oldSock))
	if old.d.HTTPAddr() != addr {
		t.Fatalf("old instance's HTTP address %q, want %s", old.d.HTTPAddr(), addr)
	}
	newer := startWith(ctx, t, deadAPI(t), d, disc, hw, driver.WithRollingUpdate("new-pod"), driver.WithHTTPAddress(addr), driver.WithProbeSocket(newSock))
	if newer.d.HTTPAddr() != "" {
		t.Errorf("new instance's HTTP address %q while the old one holds it", newer.d.HTTPAddr())
	}
	for _, sock := range []string{oldSock, newSock} {
		if err := driverflag.Probe(ctx, sock, "/healthz"); err != nil {
			t.Errorf("/healthz on %s: %v", sock, err)
		}
		// No API server: not ready, and the answer says why.
		if err := driverflag.Probe(ctx, sock, "/readyz"); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "ResourceSlices") {
			t.Errorf("/readyz on %s without an API server: %v, want 503 naming the slices", sock, err)
		}
	}
	// Each probe socket is its instance's: it stops answering with it.
	old.stop(t)
	if err := driverflag.Probe(ctx, oldSock, "/healthz"); err == nil {
		t.Error("the old instance's probe socket answers after it stopped")
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the new instance did not take %s over after the old one stopped: %v", addr, err)
	}
	if body := httpGet(t, fmt.Sprintf("http://%s/healthz", addr)); body != "ok\n" {
		t.Errorf("/healthz on the taken-over address: %q", body)
	}
	if err := driverflag.Probe(ctx, newSock, "/healthz"); err != nil {
		t.Errorf("/healthz on the new instance's socket: %v", err)
	}
}

// A driver without a rolling update does not wait for a busy address:
// it fails at once, naming it.
func TestHTTPAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := newDirs(t)
	drv, err := driver.New(testDriver, driver.WithDiscoverer(device.StaticDiscoverer{Inv: testInventory(1)}), driver.WithPreparer(newHW(t, d)),
		driver.WithRESTConfig(deadAPI(t)), driver.WithNodeName(testNode), driver.WithRegistrarDir(d.Registrar),
		driver.WithPluginDataDir(d.PluginData), driver.WithCDIDir(d.CDI), driver.WithHTTPAddress(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), time.Minute)
	defer cancel()
	if err := drv.Run(ctx); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Run with a busy HTTP address: %v, want address already in use", err)
	}
}
