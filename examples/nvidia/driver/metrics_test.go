package driver

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
)

// TestMIGMetrics: drakit_nvidia_mig_devices counts the MIG devices on
// each GPU by profile and owner, from NVML at the scrape: the static
// ones of the setup, and a dynamic one from its prepare to its
// unprepare.
func TestMIGMetrics(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(f.d.Collector()); err != nil {
		t.Fatal(err)
	}
	gather := func() map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var k []string
				for _, l := range m.GetLabel() {
					if l.GetName() != "uuid" {
						k = append(k, l.GetName()+"="+l.GetValue())
					}
				}
				out[strings.Join(k, ",")] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	static := map[string]float64{
		"gpu=2,mode=static,node=node-1,profile=3g.71gb": 1,
		"gpu=2,mode=static,node=node-1,profile=4g.71gb": 1,
		"gpu=3,mode=static,node=node-1,profile=1g.18gb": 1,
		"gpu=3,mode=static,node=node-1,profile=2g.35gb": 1,
		"gpu=3,mode=static,node=node-1,profile=3g.71gb": 1,
	}
	if d := cmp.Diff(static, gather()); d != "" {
		t.Errorf("MIG devices before any claim (-want +got):\n%s", d)
	}
	c, devs := claim(
		"m1",
	), []kit.AllocatedDevice{
		alloc("gpu-5-1g-18gb-3"),
		alloc("gpu-5-1g-18gb-4"),
	}
	if err := f.d.PrepareClaim(ctx, c, devs); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"gpu=5,mode=dynamic,node=node-1,profile=1g.18gb": 2}
	for k, v := range static {
		want[k] = v
	}
	if d := cmp.Diff(want, gather()); d != "" {
		t.Errorf("MIG devices with a claim's two (-want +got):\n%s", d)
	}
	if err := f.d.UnprepareClaim(ctx, c.ClaimRef, devs); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(static, gather()); d != "" {
		t.Errorf("MIG devices after the claim (-want +got):\n%s", d)
	}
}

func TestDeviceKind(t *testing.T) {
	for name, want := range map[string]string{
		"gpu-0":              "gpu",
		"gpu-5-1g-18gb-3":    "1g.18gb",
		"gpu-2-3g-71gb-4":    "3g.71gb",
		"gpu-4-1g-18gb-me-0": "1g.18gb+me",
		"other":              "",
	} {
		if got := DeviceKind(device.DeviceID{Pool: "p", Device: name}); got != want {
			t.Errorf("DeviceKind(%s) = %q, want %q", name, got, want)
		}
	}
}
