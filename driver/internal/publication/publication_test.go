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
