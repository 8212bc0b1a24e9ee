// Package publication keeps what a driver has published: the inventory
// its slices were last built from, the devices the node's ResourceSlices
// in the API server list (written by this process, by the other instance
// of a rolling update, or by the process before a restart), and the
// devices withdrawn from either recently, which the scheduler may still
// allocate from the slices it last saw.
package publication

import (
	"sync"
	"time"

	"github.com/drakit/drakit/device"
)

// WithdrawnGrace is how long a device that the inventory no longer has
// still counts as published. The scheduler allocates from the slices it
// last saw, so an allocation can name a device that the driver withdrew a
// moment before (a driver whose partitions are published only while they
// fit withdraws and restores devices on every prepare and unprepare);
// refusing it would fail a valid prepare until the kubelet's retry.
const WithdrawnGrace = time.Minute

// Set is the published inventory. It is safe for concurrent use.
type Set struct {
	mu      sync.Mutex
	inv     *device.Inventory
	devices map[device.DeviceID]bool // the devices of inv
	// observed are the devices the node's slices in the API server list
	// now (Observe).
	observed map[device.DeviceID]bool
	// withdrawn are devices of an earlier inventory or of the API
	// server's slices that neither lists now, with when they went (or,
	// Saw, when a read of the API server listed them).
	withdrawn map[device.DeviceID]time.Time
	now       func() time.Time
}

// New returns an empty set.
func New() *Set {
	return &Set{withdrawn: map[device.DeviceID]time.Time{}, now: time.Now}
}

// Store makes inv the published inventory; its devices that inv lacks
// count as withdrawn from now.
func (s *Set) Store(inv *device.Inventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inv = inv
	s.replaceLocked(&s.devices, DevicesOf(inv))
}

// Observe makes devices what the node's ResourceSlices in the API server
// list now, whoever wrote them: during a rolling update the other
// instance publishes as well, and after a restart the slices are the
// previous process's until this one's first publish. Devices observed
// before that devices lacks count as withdrawn from now.
func (s *Set) Observe(devices map[device.DeviceID]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaceLocked(&s.observed, devices)
}

// replaceLocked makes next the set *cur points to (the inventory's or
// the slices' devices); those of the old set that next lacks count as
// withdrawn from now.
func (s *Set) replaceLocked(cur *map[device.DeviceID]bool, next map[device.DeviceID]bool) {
	now := s.now()
	for id := range *cur {
		if !next[id] {
			s.withdrawn[id] = now
		}
	}
	*cur = next
	s.expireLocked(now)
}

// Saw records devices that a read of the API server's slices listed just
// now: they count as published for [WithdrawnGrace] from now, whatever
// Observe says meanwhile.
func (s *Set) Saw(devices map[device.DeviceID]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for id := range devices {
		if !s.devices[id] && !s.observed[id] {
			s.withdrawn[id] = now
		}
	}
}

// expireLocked forgets withdrawals that are over: the device is listed
// again, or went WithdrawnGrace ago.
func (s *Set) expireLocked(now time.Time) {
	for id, at := range s.withdrawn {
		if s.devices[id] || s.observed[id] || now.Sub(at) >= WithdrawnGrace {
			delete(s.withdrawn, id)
		}
	}
}

// Inventory is the inventory last stored (nil before the first).
func (s *Set) Inventory() *device.Inventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inv
}

// Has says whether the scheduler can have allocated the device: the
// current inventory or the API server's slices (Observe) list it, or did
// less than [WithdrawnGrace] ago.
func (s *Set) Has(pool, dev string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := device.DeviceID{Pool: pool, Device: dev}
	if s.devices[id] || s.observed[id] {
		return true
	}
	at, ok := s.withdrawn[id]
	return ok && s.now().Sub(at) < WithdrawnGrace
}

// DevicesOf is the set of inv's devices.
func DevicesOf(inv *device.Inventory) map[device.DeviceID]bool {
	out := map[device.DeviceID]bool{}
	if inv == nil {
		return out
	}
	for _, p := range inv.Pools {
		for _, d := range p.Devices {
			out[device.DeviceID{Pool: p.Name, Device: d.Name()}] = true
		}
	}
	return out
}
