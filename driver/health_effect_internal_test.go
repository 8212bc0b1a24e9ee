package driver

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drakit/drakit/device"
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
	h := newHealthState(drv, time.Minute)
	h.setInventory(inv)
	report := func(dev string, effect device.TaintEffect) device.HealthReport {
		return device.HealthReport{Device: device.DeviceID{Pool: "node-1", Device: dev}, Health: device.Unhealthy, Reason: "R" + dev, TaintEffect: effect}
	}
	taints := func() string {
		t.Helper()
		out, err := h.taintedInventory(inv)
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
	h.update([]device.HealthReport{report("lost", device.NoExecute), report("xid", ""), report("info", device.NoEffect), report("odd", "Sometimes")}, now)
	if got, want := taints(), "lost=Rlost:NoExecute xid=Rxid:NoSchedule info=Rinfo:None odd=Rodd:NoSchedule"; got != want {
		t.Errorf("taints %q, want %q", got, want)
	}
	if !h.update([]device.HealthReport{report("xid", device.NoExecute)}, now) {
		t.Error("a new effect on the same reason did not change the taints")
	}
	if got := taints(); !strings.Contains(got, "xid=Rxid:NoExecute") {
		t.Errorf("taints after the effect changed: %q", got)
	}
}
