// Package health keeps a driver's device health as its vendor reports
// it, derives the health taints of the published devices from it, and
// feeds the kubelet's health streams.
package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/internal/publication"
)

// State keeps the vendor's health reports, derives taints from them and
// feeds the kubelet's health streams. It is safe for concurrent use.
//
// It never makes health up: a device's health is the vendor's last report
// on it, with the report's own time. A device the vendor never reported on
// is Unknown, and so is one whose last report is older than the health
// timeout (the vendor's monitor stopped reporting). Nothing is re-sent on
// a timer: the kubelet hears from the runtime when the vendor reports, when
// the inventory changes and when a report goes stale.
type State struct {
	driver    string
	timeout   time.Duration
	published Published

	// mu is taken before published's own lock, never after it.
	mu        sync.Mutex
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

// Published gives the inventory whose devices the health streams carry:
// the one the driver published last. [publication.Set] implements it.
type Published interface {
	Inventory() *device.Inventory
}

// New returns the health state of driver's devices, which published
// gives; a report is valid for timeout from its time.
func New(driver string, timeout time.Duration, published Published) *State {
	return &State{
		driver: driver, timeout: timeout, published: published,
		reports:   map[device.DeviceID]device.HealthReport{},
		taintedAt: map[device.DeviceID]time.Time{},
		changed:   make(chan struct{}),
	}
}

func (h *State) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// InventoryChanged tells the streams that the published inventory
// changed: each sends a report on its devices. Call it after the change.
func (h *State) InventoryChanged() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notifyLocked()
}

// NoHealth records that the discoverer reports no changes, so no health:
// health streams end with kubeletplugin.ErrHealthNotSupported.
func (h *State) NoHealth() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.reporting && !h.unsupported {
		h.unsupported = true
		h.notifyLocked()
	}
}

// Update applies the vendor's reports, received at received (the time of
// a report without one), and says whether the taints changed. The last
// report on a device wins, also one that repeats the health (its time is
// fresher) or carries an older time (the vendor's word is the latest).
func (h *State) Update(reports []device.HealthReport, received time.Time) (taintsChanged bool) {
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

// UnhealthyCount is the number of devices reported Unhealthy.
func (h *State) UnhealthyCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.taintedAt)
}

// Taint returns inv with the health taint on each device
// reported unhealthy. A stale Unhealthy report keeps its taint: only a
// report of recovery removes it.
func (h *State) Taint(inv *device.Inventory) (*device.Inventory, error) {
	if inv == nil {
		return nil, errors.New("no inventory")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.taintedAt) == 0 {
		return inv, nil
	}
	have := publication.DevicesOf(inv)
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
// that is one the API knows (Update logged any other), else NoSchedule.
func taintEffect(r device.HealthReport) device.TaintEffect {
	switch r.TaintEffect {
	case device.NoSchedule, device.NoExecute, device.NoEffect:
		return r.TaintEffect
	}
	return device.NoSchedule
}

// snapshot is the health of every device of the published inventory at
// now, as the vendor last reported it: Unknown for a device never
// reported on or whose report is older than the timeout. stale is when
// the next fresh report goes stale (zero if none will). The caller holds
// mu, and read the changed channel before: an inventory stored after
// this read closes that channel.
func (h *State) snapshot(now time.Time) (rep kubeletplugin.DeviceHealthReport, stale time.Time) {
	inv := h.published.Inventory()
	if inv == nil {
		return rep, stale
	}
	for _, p := range inv.Pools {
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

// Stream sends the devices' health to the kubelet until ctx is done: once
// the vendor has reported health, then on each of its reports, on each
// inventory change and when a report goes stale. When the discoverer has
// no health to report it returns kubeletplugin.ErrHealthNotSupported.
func (h *State) Stream(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
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

// Healths is each published device's health as the kubelet hears it at
// now: the vendor's last report, or Unknown when there is none or it is
// older than the timeout.
func (h *State) Healths(now time.Time) map[device.DeviceID]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	rep, _ := h.snapshot(now)
	out := make(map[device.DeviceID]string, len(rep.Devices))
	for _, d := range rep.Devices {
		out[device.DeviceID{Pool: d.PoolName, Device: d.DeviceName}] = string(d.Health)
	}
	return out
}
