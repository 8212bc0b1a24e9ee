package driver

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// ApplicationXIDs are the XID errors that an application causes (13
// graphics engine exception, 31 memory page fault, 43 GPU stopped
// processing, 45 preemptive cleanup, 68 video processor exception, 109
// context switch timeout): they say nothing about the GPU's health and
// leave it healthy, as in NVIDIA's device plugin. Every other XID makes
// the GPU unhealthy.
var ApplicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// DefaultHealthHeartbeat is how often Watch re-affirms every device's
// health while NVML's event stream is alive (WithHealthHeartbeat). The
// runtime lets a report age into Unknown after its health timeout (30 s by
// default), so that a dead monitor never looks healthy; the heartbeat is
// what says this monitor is not dead. A re-affirmation is a new
// observation and carries the time it is sent.
const DefaultHealthHeartbeat = 10 * time.Second

// Watch reports the devices' health and the inventory's changes until ctx
// is done. Its first event says every device is Healthy; then an XID
// event from NVML makes the GPU's devices (the full GPU, or all MIG
// devices on it, or only the MIG device the error is confined to)
// Unhealthy with reason "XID<n>", which the runtime turns into a taint;
// a recovery (nvml.HealthEvent.Recovered) makes them Healthy again. After
// every MIG device the driver makes or destroys it reports
// EventInventoryChanged, so that the slices are published again in
// mig.Preference's new order, and then the health of every device again
// (devices that appear on an unhealthy GPU are Unhealthy at once). Every
// heartbeat (WithHealthHeartbeat) it reports every device's health again.
func (d *Driver) Watch(ctx context.Context, events chan<- device.Event) error {
	logger := klog.FromContext(ctx)
	if _, err := d.Inventory(ctx); err != nil {
		return err
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	health, err := d.nv.WatchHealth(hctx)
	if err != nil {
		return fmt.Errorf("watch GPU health: %w", err)
	}
	var h healthBook
	send := func(ev device.Event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send(device.Event{Type: device.EventHealth, Health: d.reports(&h, nil)}) {
		return nil
	}
	heartbeat := time.NewTicker(d.o.heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C:
			batch := d.reports(&h, nil)
			for i := range batch {
				batch[i].Time = time.Time{} // observed now, by the runtime's clock
			}
			if !send(device.Event{Type: device.EventHealth, Health: batch}) {
				return nil
			}
		case <-d.kick:
			if _, err := d.Inventory(ctx); err != nil {
				return err
			}
			if !send(device.Event{Type: device.EventInventoryChanged}) || !send(device.Event{Type: device.EventHealth, Health: d.reports(&h, nil)}) {
				return nil
			}
		case ev, ok := <-health:
			if !ok {
				return fmt.Errorf("watch GPU health: NVML's event stream ended")
			}
			if !ev.Recovered && ApplicationXIDs[ev.XID] {
				logger.V(2).Info("Application XID leaves the GPU healthy", "event", ev.String())
				continue
			}
			h.apply(ev, d.instanceKey(ev))
			batch := d.reports(&h, &ev.GPU)
			logger.Info("GPU health changed", "event", ev.String(), "devices", len(batch))
			if len(batch) > 0 && !send(device.Event{Type: device.EventHealth, Health: batch}) {
				return nil
			}
		}
	}
}

// healthBook is what the XID events said: unhealthy GPUs and MIG devices.
type healthBook struct {
	gpus map[int]nvml.HealthEvent
	migs map[nvml.Key]nvml.HealthEvent
}

// apply records an event; key is the MIG device it is confined to, if any.
func (h *healthBook) apply(ev nvml.HealthEvent, key *nvml.Key) {
	if h.gpus == nil {
		h.gpus, h.migs = map[int]nvml.HealthEvent{}, map[nvml.Key]nvml.HealthEvent{}
	}
	switch {
	case ev.Recovered:
		delete(h.gpus, ev.GPU)
		for k := range h.migs {
			if k.GPU == ev.GPU {
				delete(h.migs, k)
			}
		}
	case key != nil:
		h.migs[*key] = ev
	default:
		h.gpus[ev.GPU] = ev
	}
}

// reports is the health of every device of the last inventory, or only of
// GPU *gpu's devices.
func (d *Driver) reports(h *healthBook, gpu *int) []device.HealthReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []device.HealthReport
	for name, info := range d.devs {
		if gpu != nil && info.gpu != *gpu {
			continue
		}
		r := device.HealthReport{Device: device.DeviceID{Pool: info.pool, Device: name}, Health: device.Healthy}
		ev, bad := h.gpus[info.gpu]
		if !bad && info.typ == TypeMIG {
			ev, bad = h.migs[info.key]
		}
		if bad {
			r.Health, r.Reason, r.Message, r.Time = device.Unhealthy, fmt.Sprintf("XID%d", ev.XID), "NVML reported "+ev.String(), ev.Time
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device.Device < out[j].Device.Device })
	return out
}

// instanceKey is the MIG device an XID is confined to; nil for the whole
// GPU (or an instance that is gone).
func (d *Driver) instanceKey(ev nvml.HealthEvent) *nvml.Key {
	if ev.GPUInstance < 0 || ev.Recovered {
		return nil
	}
	gis, err := d.nv.GPUInstances(ev.GPU)
	if err != nil {
		return nil
	}
	for _, gi := range gis {
		if gi.ID == ev.GPUInstance {
			return &nvml.Key{GPU: ev.GPU, ProfileID: gi.ProfileID, Start: gi.Placement.Start}
		}
	}
	return nil
}

// deviceNames lists the last inventory's devices.
func (d *Driver) deviceNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.devs))
	for n := range d.devs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
