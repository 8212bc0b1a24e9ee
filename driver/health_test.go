package driver_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
)

// healthStream follows the driver's health stream over its real socket,
// as the kubelet does.
type healthStream struct {
	t    *testing.T
	recv func() (*drahealthv1.NodeWatchResourcesResponse, error)
}

func watchHealth(ctx context.Context, t *testing.T, socket string) *healthStream {
	t.Helper()
	k, err := drivertest.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	recv, err := k.WatchHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &healthStream{t: t, recv: recv}
}

// until reads reports until one has dev with a health that ok accepts,
// and returns that device's entry. It fails the test when the stream
// ends first (the test's context has a deadline).
func (s *healthStream) until(dev, what string, ok func(*drahealthv1.DeviceHealth) bool) *drahealthv1.DeviceHealth {
	s.t.Helper()
	for {
		resp, err := s.recv()
		if err != nil {
			s.t.Fatalf("health stream ended before %s %s: %v", dev, what, err)
		}
		for _, x := range resp.Devices {
			if x.Device.DeviceName == dev && ok(x) {
				return x
			}
		}
	}
}

func is(h drahealthv1.HealthStatus) func(*drahealthv1.DeviceHealth) bool {
	return func(x *drahealthv1.DeviceHealth) bool { return x.Health == h }
}

// TestHealthOfDeadMonitorDecaysToUnknown: a device's health is the
// monitor's last word with the monitor's time; while the monitor lives
// (heartbeats) it stays fresh, and once it dies (stops sending, its
// channel left open, as a wedged process would) the kubelet's stream
// shows the device Unknown after the health timeout.
func TestHealthOfDeadMonitorDecaysToUnknown(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	reports := make(chan []device.HealthReport)
	disc, err := device.NewHealthDiscoverer(testInventory(2), device.HealthChannel(reports))
	if err != nil {
		t.Fatal(err)
	}
	startDriver(ctx, t, c, d, disc, hw, driver.WithHealthTimeout(5*time.Second))
	stream := watchHealth(ctx, t, d.draSocket())

	// The monitor observed dev-0 healthy a moment ago: the kubelet gets
	// that time, not the time the runtime passed it on.
	observed := time.Now().Add(-2 * time.Second).Truncate(time.Second)
	reports <- []device.HealthReport{{Device: device.DeviceID{Pool: testNode, Device: "dev-0"}, Health: device.Healthy, Time: observed}}
	got := stream.until("dev-0", "HEALTHY", is(drahealthv1.HealthStatus_HEALTHY))
	if got.LastUpdatedTime != observed.Unix() {
		t.Errorf("lastUpdatedTime = %d, want the monitor's observation time %d", got.LastUpdatedTime, observed.Unix())
	}

	// A live monitor's heartbeats keep dev-0 Healthy past the timeout.
	kill := make(chan struct{})
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-kill:
				return
			case <-tick.C:
			}
			select {
			case reports <- nil:
			case <-kill:
				return
			}
		}
	}()
	later := observed.Add(8 * time.Second).Unix()
	stream.until("dev-0", "HEALTHY 8s after the first report", func(x *drahealthv1.DeviceHealth) bool {
		if x.Health != drahealthv1.HealthStatus_HEALTHY {
			t.Fatalf("dev-0 became %v while its monitor was alive: %s", x.Health, x.Message)
		}
		return x.LastUpdatedTime >= later
	})

	// The monitor dies: within the timeout, dev-0 is Unknown.
	close(kill)
	<-monitorDone
	got = stream.until("dev-0", "UNKNOWN after the monitor died", is(drahealthv1.HealthStatus_UNKNOWN))
	t.Logf("after the monitor died: %s", got.Message)
}

// TestHealthOfFailedWatchDecaysToUnknown: a discoverer whose Watch fails
// after reporting a device Healthy does not keep it Healthy.
func TestHealthOfFailedWatchDecaysToUnknown(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	disc := &eventDiscoverer{inv: testInventory(1), events: make(chan device.Event)}
	fail := &failingWatch{eventDiscoverer: disc, fail: make(chan struct{})}
	startDriver(ctx, t, c, d, fail, hw, driver.WithHealthTimeout(2*time.Second))
	stream := watchHealth(ctx, t, d.draSocket())
	disc.events <- device.Event{Type: device.EventHealth, Health: []device.HealthReport{{Device: device.DeviceID{Pool: testNode, Device: "dev-0"}, Health: device.Healthy}}}
	stream.until("dev-0", "HEALTHY", is(drahealthv1.HealthStatus_HEALTHY))
	close(fail.fail)
	stream.until("dev-0", "UNKNOWN after Watch failed", is(drahealthv1.HealthStatus_UNKNOWN))
}

// failingWatch's Watch passes events on until fail is closed, then
// fails, and fails at once when restarted.
type failingWatch struct {
	*eventDiscoverer
	fail chan struct{}
}

func (f *failingWatch) Watch(ctx context.Context, out chan<- device.Event) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.fail:
			return context.DeadlineExceeded
		case ev := <-f.events:
			select {
			case out <- ev:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// TestHealthNotSupportedWithoutChanges: a discoverer without changes has
// no health to report; the kubelet is told so (Unimplemented), not shown
// devices as Healthy that nothing checks.
func TestHealthNotSupportedWithoutChanges(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: testInventory(1)}, hw)
	stream := watchHealth(ctx, t, d.draSocket())
	resp, err := stream.recv()
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("health stream of a static discoverer: %v, %v; want Unimplemented", resp, err)
	}
}
