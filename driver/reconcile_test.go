package driver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/internal/cluster"
)

// flakyDiscoverer serves inv, fails the next `failures` Inventory calls,
// and sends the events the test puts on events.
type flakyDiscoverer struct {
	events chan device.Event

	mu       sync.Mutex
	inv      *device.Inventory
	failures int
	calls    int
}

func (f *flakyDiscoverer) Inventory(context.Context) (*device.Inventory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failures > 0 {
		f.failures--
		return nil, errors.New("device enumeration failed (test)")
	}
	return f.inv.Clone(), nil
}

func (f *flakyDiscoverer) Watch(ctx context.Context, out chan<- device.Event) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-f.events:
			select {
			case out <- ev:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// change makes the next Inventory calls fail `failures` times, then
// return inv.
func (f *flakyDiscoverer) change(inv *device.Inventory, failures int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inv, f.failures = inv, failures
}

func (f *flakyDiscoverer) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// waitForDevices waits until the node's slices have n devices.
func waitForDevices(ctx context.Context, t *testing.T, c *cluster.Cluster, n int) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%d published devices", n), func(ctx context.Context) (bool, error) {
		s, err := slicesOfNode(ctx, c)
		got := 0
		for _, x := range s {
			got += len(x.Spec.Devices)
		}
		return got == n, err
	})
}

// TestFailedRediscoveryIsRetried: an Inventory call that fails after a
// change event is retried until it succeeds, and the slices end up with
// the changed inventory without another event.
func TestFailedRediscoveryIsRetried(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	disc := &flakyDiscoverer{inv: testInventory(2), events: make(chan device.Event)}
	startDriver(ctx, t, c, d, disc, hw)
	waitForDevices(ctx, t, c, 2)
	before := disc.callCount()
	disc.change(testInventory(3), 2)
	disc.events <- device.Event{Type: device.EventInventoryChanged}
	waitForDevices(ctx, t, c, 3)
	if calls := disc.callCount() - before; calls != 3 {
		t.Errorf("Inventory called %d times after the change, want 3 (two failures, one success)", calls)
	}
}

// TestResyncFindsUnannouncedChange: a change the discoverer sends no
// event for reaches the slices at the next resync. (Its inventory leaves
// Driver empty: it is the driver's.)
func TestResyncFindsUnannouncedChange(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	unnamed := func(n int) *device.Inventory {
		inv := testInventory(n)
		inv.Driver = ""
		return inv
	}
	disc := &flakyDiscoverer{inv: unnamed(1), events: make(chan device.Event)}
	startDriver(ctx, t, c, d, disc, hw, driver.WithResyncInterval(time.Second))
	waitForDevices(ctx, t, c, 1)
	disc.change(unnamed(2), 0)
	waitForDevices(ctx, t, c, 2)
}

// TestInventoryOfAnotherDriverRefused: an inventory naming another driver
// stops Run with ErrDriverMismatch instead of publishing its attributes
// under the wrong domain; an empty name is the driver's.
func TestInventoryOfAnotherDriverRefused(t *testing.T) {
	c, ctx, _, d, _ := setupE2E(t)
	inv := testInventory(1)
	inv.Driver = "gpu.vendor.com"
	err := runBriefly(ctx, t, c.RESTConfig, d, device.StaticDiscoverer{Inv: inv})
	if !errors.Is(err, driver.ErrDriverMismatch) || !strings.Contains(err.Error(), `"gpu.vendor.com"`) {
		t.Fatalf("Run with an inventory of gpu.vendor.com: %v, want ErrDriverMismatch naming it", err)
	}
}

// The ready-made discoverers of package device are Discoverers.
var (
	_ driver.Discoverer = device.StaticDiscoverer{}
	_ driver.Discoverer = (*device.HealthDiscoverer)(nil)
)

// consumingDiscoverer's first Watch takes the change the test announces
// on changed and fails before it sends the event (as a watch that dies
// mid-change does); later Watches wait quietly.
type consumingDiscoverer struct {
	flakyDiscoverer
	changed chan *device.Inventory
	once    sync.Once
}

func (c *consumingDiscoverer) Watch(ctx context.Context, out chan<- device.Event) error {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		<-ctx.Done()
		return nil
	}
	select {
	case inv := <-c.changed:
		c.change(inv, 0)
		return errors.New("device watch lost its connection (test)")
	case <-ctx.Done():
		return nil
	}
}

// TestWatchRestartRediscovers: a change that a failed Watch took without
// sending its event reaches the slices when the Watch is restarted, not
// at the 10-minute resync (before: the restart did not mark the inventory
// dirty, and this test timed out).
func TestWatchRestartRediscovers(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	disc := &consumingDiscoverer{flakyDiscoverer: flakyDiscoverer{inv: testInventory(2)}, changed: make(chan *device.Inventory)}
	startDriver(ctx, t, c, d, disc, hw)
	waitForDevices(ctx, t, c, 2)
	disc.changed <- testInventory(3)
	waitForDevices(ctx, t, c, 3)
}

// TestEventCarriesInventory: a change event that carries the new
// inventory is published without another Inventory call; one that names
// another driver is refused and discovered again.
func TestEventCarriesInventory(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	disc := &flakyDiscoverer{inv: testInventory(2), events: make(chan device.Event)}
	startDriver(ctx, t, c, d, disc, hw)
	waitForDevices(ctx, t, c, 2)
	before := disc.callCount()
	disc.events <- device.Event{Type: device.EventInventoryChanged, Inventory: testInventory(3)}
	waitForDevices(ctx, t, c, 3)
	if calls := disc.callCount() - before; calls != 0 {
		t.Errorf("Inventory called %d times for an event carrying the inventory, want 0", calls)
	}
	wrong := testInventory(1)
	wrong.Driver = "gpu.vendor.com"
	disc.change(testInventory(4), 0)
	disc.events <- device.Event{Type: device.EventInventoryChanged, Inventory: wrong}
	waitForDevices(ctx, t, c, 4)
}

// TestHealthTimeoutAboveInterval: New refuses a health timeout that is
// not above the discoverer's poll interval (devices would flap to
// Unknown between polls) and accepts one above it.
func TestHealthTimeoutAboveInterval(t *testing.T) {
	poll := func(context.Context) ([]device.HealthReport, error) { return nil, nil }
	disc, err := device.NewHealthDiscoverer(testInventory(1), device.PollHealth(40*time.Second, poll))
	if err != nil {
		t.Fatal(err)
	}
	d := newDirs(t)
	newDriver := func(opts ...driver.Option) error {
		// New checks options only: nothing dials this address.
		_, err := driver.New(testDriver, append([]driver.Option{driver.WithDiscoverer(disc), driver.WithPreparer(newHW(t, d)),
			driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:1"}), driver.WithNodeName(testNode)}, opts...)...)
		return err
	}
	if err := newDriver(); err == nil || !strings.Contains(err.Error(), "health interval 40s") {
		t.Errorf("default timeout 30s with a 40s poll: error %v, want one naming the interval", err)
	}
	if err := newDriver(driver.WithHealthTimeout(90 * time.Second)); err != nil {
		t.Errorf("timeout 90s with a 40s poll: %v", err)
	}
}
