package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/device"
)

// healthState keeps the devices' health, derives taints from it and feeds
// the kubelet's health streams.
type healthState struct {
	taintKey string
	timeout  time.Duration

	mu        sync.Mutex
	inv       *device.Inventory
	devices   map[device.DeviceID]bool // the devices of inv
	reports   map[device.DeviceID]device.HealthReport
	taintedAt map[device.DeviceID]time.Time
	changed   chan struct{} // closed and replaced on every change
}

func newHealthState(taintKey string, timeout time.Duration) *healthState {
	return &healthState{
		taintKey: taintKey, timeout: timeout,
		reports:   map[device.DeviceID]device.HealthReport{},
		taintedAt: map[device.DeviceID]time.Time{},
		changed:   make(chan struct{}),
	}
}

func (h *healthState) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *healthState) setInventory(inv *device.Inventory) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inv = inv
	h.devices = devicesOf(inv)
	h.notifyLocked()
}

// published says whether the current inventory has the device: whether
// the scheduler can have allocated it.
func (h *healthState) published(pool, dev string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.devices[device.DeviceID{Pool: pool, Device: dev}]
}

func (h *healthState) inventory() *device.Inventory {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inv
}

// update applies reports and says whether any device's health changed.
func (h *healthState) update(reports []device.HealthReport) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := false
	for _, r := range reports {
		if r.Time.IsZero() {
			r.Time = time.Now()
		}
		old, had := h.reports[r.Device]
		if !had || old.Health != r.Health || old.Reason != r.Reason {
			changed = true
		}
		h.reports[r.Device] = r
		if r.Health == device.Unhealthy {
			if _, ok := h.taintedAt[r.Device]; !ok {
				h.taintedAt[r.Device] = r.Time.UTC().Truncate(time.Second)
			}
		} else {
			delete(h.taintedAt, r.Device)
		}
	}
	if changed {
		h.notifyLocked()
	}
	return changed
}

func (h *healthState) unhealthyCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.taintedAt)
}

// taintedInventory returns inv with a NoSchedule taint on each unhealthy
// device it has.
func (h *healthState) taintedInventory(inv *device.Inventory) (*device.Inventory, error) {
	if inv == nil {
		return nil, errors.New("no inventory")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.taintedAt) == 0 {
		return inv, nil
	}
	have := devicesOf(inv)
	taints := map[device.DeviceID][]device.Taint{}
	for id, at := range h.taintedAt {
		if !have[id] {
			continue
		}
		value := h.reports[id].Reason
		if len(utilvalidation.IsValidLabelValue(value)) > 0 {
			value = ""
		}
		t := at
		taints[id] = []device.Taint{{Key: h.taintKey, Value: value, Effect: device.NoSchedule, TimeAdded: &t}}
	}
	out, err := inv.WithTaints(taints)
	if err != nil {
		return nil, fmt.Errorf("taint unhealthy devices: %w", err)
	}
	return out, nil
}

func devicesOf(inv *device.Inventory) map[device.DeviceID]bool {
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

// snapshot is a report on every device of the inventory; devices never
// reported on are healthy (a published device is assumed to work).
func (h *healthState) snapshot() (kubeletplugin.DeviceHealthReport, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rep kubeletplugin.DeviceHealthReport
	now := time.Now()
	if h.inv != nil {
		for _, p := range h.inv.Pools {
			for _, d := range p.Devices {
				id := device.DeviceID{Pool: p.Name, Device: d.Name()}
				dh := kubeletplugin.DeviceHealth{PoolName: p.Name, DeviceName: d.Name(), Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now, HealthCheckTimeout: h.timeout}
				if r, ok := h.reports[id]; ok {
					dh.Health = kubeletplugin.HealthStatus(r.Health)
					dh.Message = r.Message
					if dh.Health == "" {
						dh.Health = kubeletplugin.HealthStatusUnknown
					}
				}
				rep.Devices = append(rep.Devices, dh)
			}
		}
	}
	return rep, h.changed
}

// stream sends a full report at once, on every change and at half the
// health timeout, until ctx is done.
func (h *healthState) stream(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	ticker := time.NewTicker(h.timeout / 2)
	defer ticker.Stop()
	for {
		rep, changed := h.snapshot()
		select {
		case <-ctx.Done():
			return nil
		case reports <- rep:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C:
		}
	}
}
