package publication

import (
	"testing"
	"time"

	"github.com/drakit/drakit/device"
)

// A device that the inventory withdrew still counts as published for
// WithdrawnGrace (the scheduler may have allocated it from the slices it
// last saw); one never published, or withdrawn longer ago, does not.
func TestPublishedAfterWithdrawal(t *testing.T) {
	inv := func(names ...string) *device.Inventory {
		p := device.Pool{Name: "node-1"}
		for _, n := range names {
			p.Devices = append(p.Devices, device.New(n))
		}
		return &device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{p}}
	}
	clock := time.Now()
	s := New()
	s.now = func() time.Time { return clock }
	s.Store(inv("a", "b"))
	s.Store(inv("a"))
	if !s.Has("node-1", "b") {
		t.Error("b, withdrawn just now, is refused; the scheduler may have allocated it from the previous slices")
	}
	if s.Has("node-1", "never") {
		t.Error("a device never published is accepted")
	}
	clock = clock.Add(WithdrawnGrace)
	if s.Has("node-1", "b") {
		t.Errorf("b, withdrawn %v ago, is still accepted", WithdrawnGrace)
	}
	s.Store(inv("a", "b"))
	s.Store(inv("a"))
	s.Store(inv("a", "c"))
	if !s.Has("node-1", "b") || !s.Has("node-1", "c") {
		t.Error("a later inventory change forgot b's withdrawal or c's arrival")
	}
	if got := s.Inventory(); len(got.Pools[0].Devices) != 2 {
		t.Errorf("Inventory has %d devices, want the last stored (a, c)", len(got.Pools[0].Devices))
	}
}

// Devices that the API server's slices list count as published whoever
// wrote them (the other instance of a rolling update, the process before
// a restart), and for WithdrawnGrace after the slices drop them; a read
// of the slices (Saw) counts from the read. The process's own inventory
// does not hide them, nor they it.
func TestPublishedByTheSlices(t *testing.T) {
	id := func(n string) device.DeviceID { return device.DeviceID{Pool: "node-1", Device: n} }
	set := func(names ...string) map[device.DeviceID]bool {
		out := map[device.DeviceID]bool{}
		for _, n := range names {
			out[id(n)] = true
		}
		return out
	}
	clock := time.Now()
	s := New()
	s.now = func() time.Time { return clock }
	s.Store(&device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{{Name: "node-1", Devices: []*device.Device{device.New("own")}}}})
	s.Observe(set("old", "own"))
	for _, n := range []string{"own", "old"} {
		if !s.Has("node-1", n) {
			t.Errorf("%s, listed by the slices, is refused", n)
		}
	}
	if s.Has("node-1", "ghost") {
		t.Error("a device no slice and no inventory listed is accepted")
	}
	// This process's first publish replaces the previous process's slices.
	clock = clock.Add(time.Second)
	s.Observe(set("own"))
	if !s.Has("node-1", "old") {
		t.Error("old, dropped by the slices just now, is refused; the scheduler may have allocated it from them")
	}
	clock = clock.Add(WithdrawnGrace)
	if s.Has("node-1", "old") {
		t.Errorf("old, dropped by the slices %v ago, is still accepted", WithdrawnGrace)
	}
	if !s.Has("node-1", "own") {
		t.Error("the inventory's own device is refused")
	}
	// A read of the slices between two watch events.
	s.Saw(set("read", "own"))
	s.Observe(set("own"))
	if !s.Has("node-1", "read") {
		t.Error("read, listed by a read of the slices just now, is refused")
	}
	clock = clock.Add(WithdrawnGrace)
	s.Observe(set("own"))
	if s.Has("node-1", "read") {
		t.Errorf("read, listed %v ago, is still accepted", WithdrawnGrace)
	}
}
