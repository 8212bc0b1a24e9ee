package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
)

// healthState keeps the vendor's health reports, derives taints from them
// and feeds the kubelet's health streams.
//
// It never makes health up: a device's health is the vendor's last report
// on it, with the report's own time. A device the vendor never reported on
// is Unknown, and so is one whose last report is older than the health
// timeout (the vendor's monitor stopped reporting). Nothing is re-sent on
// a timer: the kubelet hears from the runtime when the vendor reports, when
// the inventory changes and when a report goes stale.
type healthState struct {
	driver  string
	timeout time.Duration

	mu      sync.Mutex
	inv     *device.Inventory
	devices map[device.DeviceID]bool // the devices of inv
	// withdrawn are devices of an earlier inventory that inv lacks, with
	// when they went (see published).
	withdrawn map[device.DeviceID]time.Time
	reports   map[device.DeviceID]device.HealthReport
	taintedAt map[device.DeviceID]time.Time
	// reporting is set by the vendor's first health report: from then on
	// the kubelet gets a report on every device.
	reporting bool
	// unsupported is set when the discoverer said it has no changes to
	// report (device.ErrNoChanges) before any health report.
	unsupported bool
	changed     chan struct{} // closed and replaced on every change
}

func newHealthState(driver string, timeout time.Duration) *healthState {
	return &healthState{
		driver: driver, timeout: timeout,
		reports:   map[device.DeviceID]device.HealthReport{},
		taintedAt: map[device.DeviceID]time.Time{},
		withdrawn: map[device.DeviceID]time.Time{},
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
	now := time.Now()
	devices := devicesOf(inv)
	for id := range h.devices {
		if !devices[id] {
			h.withdrawn[id] = now
		}
	}
	for id, at := range h.withdrawn {
		if devices[id] || now.Sub(at) >= withdrawnGrace {
			delete(h.withdrawn, id)
		}
	}
	h.inv = inv
	h.devices = devices
	h.notifyLocked()
}

// withdrawnGrace is how long a device that the inventory no longer has
// still counts as published. The scheduler allocates from the slices it
// last saw, so an allocation can name a device that the driver withdrew a
// moment before (a driver whose partitions are published only while they
// fit withdraws and restores devices on every prepare and unprepare);
// refusing it would fail a valid prepare until the kubelet's retry.
const withdrawnGrace = time.Minute

// noHealth records that the discoverer reports no changes, so no health:
// health streams end with kubeletplugin.ErrHealthNotSupported.
func (h *healthState) noHealth() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.reporting && !h.unsupported {
		h.unsupported = true
		h.notifyLocked()
	}
}

// published says whether the scheduler can have allocated the device:
// the current inventory has it, or an inventory of less than
// withdrawnGrace ago had it.
func (h *healthState) published(pool, dev string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := device.DeviceID{Pool: pool, Device: dev}
	if h.devices[id] {
		return true
	}
	at, ok := h.withdrawn[id]
	return ok && time.Since(at) < withdrawnGrace
}

func (h *healthState) inventory() *device.Inventory {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inv
}

// update applies the vendor's reports, received at received (the time of
// a report without one), and says whether the taints changed. The last
// report on a device wins, also one that repeats the health (its time is
// fresher) or carries an older time (the vendor's word is the latest).
func (h *healthState) update(reports []device.HealthReport, received time.Time) (taintsChanged bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range reports {
		if r.Time.IsZero() {
			r.Time = received
		}
		if r.Health == device.Unhealthy && r.TaintEffect != "" && taintEffect(r) != r.TaintEffect {
			klog.Background().Error(nil, "Health report with an unknown taint effect; tainting NoSchedule", "device", r.Device, "effect", r.TaintEffect)
		}
		old := h.reports[r.Device]
		h.reports[r.Device] = r
		_, tainted := h.taintedAt[r.Device]
		switch {
		case r.Health == device.Unhealthy && !tainted:
			// The API server keeps whole seconds: a stable value keeps
			// republishing from changing the slice.
			h.taintedAt[r.Device] = r.Time.UTC().Truncate(time.Second)
			taintsChanged = true
		case r.Health == device.Unhealthy && (old.Reason != r.Reason || old.TaintEffect != r.TaintEffect):
			taintsChanged = true // the taint's value is the reason
		case r.Health != device.Unhealthy && tainted:
			delete(h.taintedAt, r.Device)
			taintsChanged = true
		}
	}
	if len(reports) > 0 {
		h.reporting = true
		h.notifyLocked()
	}
	return taintsChanged
}

func (h *healthState) unhealthyCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.taintedAt)
}

// taintedInventory returns inv with the health taint on each device
// reported unhealthy. A stale Unhealthy report keeps its taint: only a
// report of recovery removes it.
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
		r := h.reports[id]
		r.Time = at
		if t, ok := device.HealthTaint(h.driver, r, taintEffect(r)); ok {
			taints[id] = []device.Taint{t}
		}
	}
	out, err := inv.WithTaints(taints)
	if err != nil {
		return nil, fmt.Errorf("taint unhealthy devices: %w", err)
	}
	return out, nil
}

// taintEffect is the effect of r's health taint: its TaintEffect when
// that is one the API knows (update logged any other), else NoSchedule.
func taintEffect(r device.HealthReport) device.TaintEffect {
	switch r.TaintEffect {
	case device.NoSchedule, device.NoExecute, device.NoEffect:
		return r.TaintEffect
	}
	return device.NoSchedule
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

// snapshot is the health of every device of the inventory at now, as the
// vendor last reported it: Unknown for a device never reported on or
// whose report is older than the timeout. stale is when the next fresh
// report goes stale (zero if none will).
func (h *healthState) snapshot(now time.Time) (rep kubeletplugin.DeviceHealthReport, stale time.Time) {
	if h.inv == nil {
		return rep, stale
	}
	for _, p := range h.inv.Pools {
		for _, d := range p.Devices {
			id := device.DeviceID{Pool: p.Name, Device: d.Name()}
			dh := kubeletplugin.DeviceHealth{PoolName: p.Name, DeviceName: d.Name(), Health: kubeletplugin.HealthStatusUnknown, HealthCheckTimeout: h.timeout}
			r, ok := h.reports[id]
			switch expires := r.Time.Add(h.timeout); {
			case !ok:
				dh.Message = "no health report on this device yet"
			case !now.Before(expires):
				dh.LastUpdated = r.Time
				dh.Message = fmt.Sprintf("the last health report (%s, %s) is older than the health timeout %v: the health monitor stopped reporting", r.Time.UTC().Format(time.RFC3339), r.Health, h.timeout)
			default:
				dh.LastUpdated = r.Time
				dh.Message = r.Message
				if r.Health != "" {
					dh.Health = kubeletplugin.HealthStatus(r.Health)
				}
				if stale.IsZero() || expires.Before(stale) {
					stale = expires
				}
			}
			rep.Devices = append(rep.Devices, dh)
		}
	}
	return rep, stale
}

// stream sends the devices' health to the kubelet until ctx is done: once
// the vendor has reported health, then on each of its reports, on each
// inventory change and when a report goes stale. When the discoverer has
// no health to report it returns kubeletplugin.ErrHealthNotSupported.
func (h *healthState) stream(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	timer := time.NewTimer(h.timeout)
	timer.Stop()
	defer timer.Stop()
	for {
		h.mu.Lock()
		changed := h.changed
		reporting, unsupported := h.reporting, h.unsupported
		var rep kubeletplugin.DeviceHealthReport
		var stale time.Time
		if reporting {
			rep, stale = h.snapshot(time.Now())
		}
		h.mu.Unlock()
		if !reporting && unsupported {
			return kubeletplugin.ErrHealthNotSupported
		}
		if reporting {
			select {
			case <-ctx.Done():
				return nil
			case reports <- rep:
			}
		}
		var expired <-chan time.Time
		if !stale.IsZero() {
			timer.Reset(time.Until(stale))
			expired = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-expired:
		}
		timer.Stop()
	}
}
