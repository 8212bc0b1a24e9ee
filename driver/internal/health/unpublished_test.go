package health

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/internal/publication"
)

// A report on a device that is not published now is kept without effect
// (no taint, nothing sent to the kubelet, not counted), and takes effect
// when the device is published: its health reaches the kubelet and an
// Unhealthy report taints it, until a newer report replaces it (the
// contract stated at driver.Discoverer's Watch).
func TestReportOnUnpublishedDeviceTakesEffectWhenPublished(t *testing.T) {
	const drv = "gpu.example.com"
	inv := func(devs ...string) *device.Inventory {
		p := device.Pool{Name: "node-1"}
		for _, n := range devs {
			p.Devices = append(p.Devices, device.New(n))
		}
		return &device.Inventory{Driver: drv, Pools: []device.Pool{p}}
	}
	taints := func(h *State, in *device.Inventory) string {
		t.Helper()
		out, err := h.Taint(in)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, sl := range out.ResourceSlices("node-1") {
			for _, d := range sl.Spec.Devices {
				for _, tn := range d.Taints {
					s = append(s, d.Name+"="+tn.Value)
				}
			}
		}
		return strings.Join(s, " ")
	}
	published := publication.New()
	published.Store(inv("a"))
	h := New(drv, time.Hour, published)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	go func() { _ = h.Stream(ctx, reports) }()
	names := func() string {
		t.Helper()
		var out []string
		for _, d := range (<-reports).Devices {
			out = append(out, d.DeviceName+"="+string(d.Health))
		}
		return strings.Join(out, " ")
	}
	now := time.Now()
	h.Update([]device.HealthReport{
		{Device: device.DeviceID{Pool: "node-1", Device: "a"}, Health: device.Healthy},
		{Device: device.DeviceID{Pool: "node-1", Device: "p"}, Health: device.Unhealthy, Reason: "XID48"},
	}, now)
	if got := names(); got != "a=Healthy" {
		t.Errorf("kubelet report with p unpublished: %q, want a only", got)
	}
	if got := taints(h, inv("a")); got != "" {
		t.Errorf("taints with p unpublished: %q", got)
	}
	// p is published: the kept report takes effect.
	published.Store(inv("a", "p"))
	h.InventoryChanged()
	if got := names(); got != "a=Healthy p=Unhealthy" {
		t.Errorf("kubelet report once p is published: %q", got)
	}
	if got := taints(h, inv("a", "p")); got != "p=XID48" {
		t.Errorf("taints once p is published: %q", got)
	}
	// A newer report replaces it.
	h.Update([]device.HealthReport{{Device: device.DeviceID{Pool: "node-1", Device: "p"}, Health: device.Healthy}}, now)
	if got := names(); got != "a=Healthy p=Healthy" {
		t.Errorf("kubelet report after p's recovery: %q", got)
	}
	if got := taints(h, inv("a", "p")); got != "" {
		t.Errorf("taints after p's recovery: %q", got)
	}
}
