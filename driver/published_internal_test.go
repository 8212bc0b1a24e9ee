package driver

import (
	"testing"
	"time"

	"github.com/drakit/drakit/device"
)

// A device that the inventory withdrew still counts as published for
// withdrawnGrace (the scheduler may have allocated it from the slices it
// last saw); one never published, or withdrawn longer ago, does not.
func TestPublishedAfterWithdrawal(t *testing.T) {
	inv := func(names ...string) *device.Inventory {
		p := device.Pool{Name: "node-1"}
		for _, n := range names {
			p.Devices = append(p.Devices, device.New(n))
		}
		return &device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{p}}
	}
	h := newHealthState("gpu.example.com", time.Minute)
	h.setInventory(inv("a", "b"))
	h.setInventory(inv("a"))
	if !h.published("node-1", "b") {
		t.Error("b, withdrawn just now, is refused; the scheduler may have allocated it from the previous slices")
	}
	if h.published("node-1", "never") {
		t.Error("a device never published is accepted")
	}
	h.mu.Lock()
	h.withdrawn[device.DeviceID{Pool: "node-1", Device: "b"}] = time.Now().Add(-withdrawnGrace)
	h.mu.Unlock()
	if h.published("node-1", "b") {
		t.Errorf("b, withdrawn %v ago, is still accepted", withdrawnGrace)
	}
	h.setInventory(inv("a", "b"))
	h.setInventory(inv("a"))
	h.setInventory(inv("a", "c"))
	if !h.published("node-1", "b") || !h.published("node-1", "c") {
		t.Error("a later inventory change forgot b's withdrawal or c's arrival")
	}
}
