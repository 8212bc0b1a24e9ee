package health

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/internal/publication"
)

// An Unhealthy report's TaintEffect sets its taint's effect (empty:
// NoSchedule; an unknown one: NoSchedule too, never a slice the API
// server refuses), and a change of effect alone republishes.
func TestHealthTaintEffectPerReport(t *testing.T) {
	const drv = "gpu.example.com"
	p := device.Pool{Name: "node-1"}
	for _, n := range []string{"lost", "xid", "info", "odd"} {
		p.Devices = append(p.Devices, device.New(n))
	}
	inv := &device.Inventory{Driver: drv, Pools: []device.Pool{p}}
	published := publication.New()
	published.Store(inv)
	h := New(drv, time.Minute, published)
	report := func(dev string, effect device.TaintEffect) device.HealthReport {
		return device.HealthReport{Device: device.DeviceID{Pool: "node-1", Device: dev}, Health: device.Unhealthy, Reason: "R" + dev, TaintEffect: effect}
	}
	taints := func() string {
		t.Helper()
		out, err := h.Taint(inv)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, sl := range out.ResourceSlices("node-1") {
			for _, d := range sl.Spec.Devices {
				for _, tn := range d.Taints {
					s = append(s, fmt.Sprintf("%s=%s:%s", d.Name, tn.Value, tn.Effect))
				}
			}
		}
		return strings.Join(s, " ")
	}
	now := time.Now()
	h.Update([]device.HealthReport{report("lost", device.NoExecute), report("xid", ""), report("info", device.NoEffect), report("odd", "Sometimes")}, now)
	if got, want := taints(), "lost=Rlost:NoExecute xid=Rxid:NoSchedule info=Rinfo:None odd=Rodd:NoSchedule"; got != want {
		t.Errorf("taints %q, want %q", got, want)
	}
	if !h.Update([]device.HealthReport{report("xid", device.NoExecute)}, now) {
		t.Error("a new effect on the same reason did not change the taints")
	}
	if got := taints(); !strings.Contains(got, "xid=Rxid:NoExecute") {
		t.Errorf("taints after the effect changed: %q", got)
	}
}

// The streams report on the inventory the publication set holds: after
// InventoryChanged, on the new one's devices.
func TestStreamReadsThePublishedInventory(t *testing.T) {
	const drv = "gpu.example.com"
	inv := func(devs ...string) *device.Inventory {
		p := device.Pool{Name: "node-1"}
		for _, n := range devs {
			p.Devices = append(p.Devices, device.New(n))
		}
		return &device.Inventory{Driver: drv, Pools: []device.Pool{p}}
	}
	published := publication.New()
	published.Store(inv("a"))
	h := New(drv, time.Hour, published)
	h.Update([]device.HealthReport{{Device: device.DeviceID{Pool: "node-1", Device: "a"}, Health: device.Healthy}}, time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- h.Stream(ctx, reports) }()
	names := func(r kubeletplugin.DeviceHealthReport) string {
		var out []string
		for _, d := range r.Devices {
			out = append(out, d.DeviceName+"="+string(d.Health))
		}
		return strings.Join(out, " ")
	}
	if got := names(<-reports); got != "a=Healthy" {
		t.Errorf("first report %q, want a=Healthy", got)
	}
	published.Store(inv("a", "b"))
	h.InventoryChanged()
	if got := names(<-reports); got != "a=Healthy b=Unknown" {
		t.Errorf("report after the inventory changed %q, want a=Healthy b=Unknown", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Stream: %v", err)
	}
}
