package driver_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/driver/internal/fakehw"
)

// blocking is fakehw's preparer whose PrepareDevice waits for release.
type blocking struct {
	*fakehw.HW
	entered chan struct{}
	release chan struct{}
}

func (b blocking) PrepareDevice(ctx context.Context, claim driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.HW.PrepareDevice(ctx, claim, dev)
}

func (b blocking) UnprepareDevice(ctx context.Context, claim driver.ClaimRef, dev driver.AllocatedDevice, data json.RawMessage) error {
	return b.HW.UnprepareDevice(ctx, claim, dev, data)
}

// samples gathers g and returns the values of family name by their
// labels other than driver, as "k=v,k=v".
func samples(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "driver" {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			sort.Strings(labels)
			out[strings.Join(labels, ",")] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}

// TestStateMetrics: the kubelet's calls in flight, the published
// devices by health and kind and the prepared claims' devices by kind,
// and a vendor's collector on the runtime's registry.
func TestStateMetrics(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	inv := testInventory(3)
	reports := make(chan []device.HealthReport, 1)
	disc, err := device.NewHealthDiscoverer(inv, device.HealthChannel(reports))
	if err != nil {
		t.Fatal(err)
	}
	kind := func(id device.DeviceID) string {
		if id.Device == "dev-0" {
			return "big"
		}
		return "small"
	}
	vendor := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vendor_things", Help: "The vendor's own."})
	vendor.Set(7)
	p := blocking{HW: hw, entered: make(chan struct{}), release: make(chan struct{})}
	r := startDriver(ctx, t, c, d, disc, hw, driver.WithPreparer(p), driver.WithDeviceKind(kind), driver.WithCollectors(vendor))
	g := r.d.Gatherer()

	if got := samples(t, g, "vendor_things"); got[""] != 7 {
		t.Errorf("vendor_things %v, want 7 on the runtime's registry", got)
	}
	if d := cmp.Diff(map[string]float64{"health=Unknown,kind=big": 1, "health=Unknown,kind=small": 2}, samples(t, g, "drakit_driver_devices")); d != "" {
		t.Errorf("devices before any health report (-want +got):\n%s", d)
	}
	reports <- []device.HealthReport{{Device: device.DeviceID{Pool: testNode, Device: "dev-1"}, Health: device.Unhealthy, Reason: "Overheated"},
		{Device: device.DeviceID{Pool: testNode, Device: "dev-0"}, Health: device.Healthy},
		{Device: device.DeviceID{Pool: testNode, Device: "dev-2"}, Health: device.Healthy}}
	want := map[string]float64{"health=Healthy,kind=big": 1, "health=Healthy,kind=small": 1, "health=Unhealthy,kind=small": 1}
	if err := pollUntil(ctx, func() bool { return cmp.Equal(want, samples(t, g, "drakit_driver_devices")) }); err != nil {
		t.Errorf("devices after the reports: %v, want %v", samples(t, g, "drakit_driver_devices"), want)
	}

	k, err := drivertest.Dial(r.d.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	claim := createClaim(ctx, t, c, ns, "two", drivertest.Device{Device: "dev-0"}, drivertest.Device{Device: "dev-2"})
	done := make(chan error, 1)
	go func() { _, err := k.Prepare(ctx, claim); done <- err }()
	<-p.entered
	if got := samples(t, g, "drakit_driver_requests_in_flight"); got["operation=prepare"] != 1 {
		t.Errorf("requests in flight during a prepare: %v, want prepare 1", got)
	}
	close(p.release)
	<-p.entered // the second device
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := samples(t, g, "drakit_driver_requests_in_flight"); got["operation=prepare"] != 0 {
		t.Errorf("requests in flight after the prepare: %v, want prepare 0", got)
	}
	if d := cmp.Diff(map[string]float64{"kind=big": 1, "kind=small": 1}, samples(t, g, "drakit_driver_prepared_devices")); d != "" {
		t.Errorf("prepared devices (-want +got):\n%s", d)
	}
	if err := k.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if got := samples(t, g, "drakit_driver_prepared_devices"); len(got) != 0 {
		t.Errorf("prepared devices after unprepare: %v, want none", got)
	}
}

func pollUntil(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// A vendor collector that collides with the runtime's metrics is
// refused by New.
func TestWithCollectorsCollision(t *testing.T) {
	dup := prometheus.NewGauge(prometheus.GaugeOpts{Name: "drakit_driver_prepared_claims", Help: "x", ConstLabels: prometheus.Labels{"driver": "gpu.example.com"}})
	if _, err := newUnstarted(t, "gpu.example.com", driver.WithCollectors(dup)); err == nil || !strings.Contains(err.Error(), "WithCollectors") {
		t.Errorf("colliding collector: %v, want a WithCollectors error", err)
	}
}
