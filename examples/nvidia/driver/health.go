package driver

import (
	"context"
	"fmt"
	"sort"
	"sync"

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

// Watch reports the devices' health and the inventory's changes until ctx
// is done. Its first event says every device is Healthy; then an XID
// event from NVML makes the GPU's devices (the full GPU, or all MIG
// devices on it, or only the MIG device the error is confined to)
// Unhealthy with reason "XID<n>", which the runtime turns into a taint;
// a recovery (nvml.HealthEvent.Recovered) makes them Healthy again. After
// every MIG device the driver makes or destroys it reports
// EventInventoryChanged, so that the slices are published again in
// mig.Preference's new order.
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
	var mu sync.Mutex
	unhealthy := map[string]device.HealthReport{} // device name -> report
	send := func(ev device.Event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// reports is every known device's health now.
	reports := func() []device.HealthReport {
		mu.Lock()
		defer mu.Unlock()
		var out []device.HealthReport
		for _, name := range d.deviceNames() {
			if r, ok := unhealthy[name]; ok {
				out = append(out, r)
				continue
			}
			out = append(out, device.HealthReport{Device: device.DeviceID{Pool: d.node, Device: name}, Health: device.Healthy})
		}
		return out
	}
	if !send(device.Event{Type: device.EventHealth, Health: reports()}) {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.kick:
			if !send(device.Event{Type: device.EventInventoryChanged}) {
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
			names := d.affected(ev)
			var batch []device.HealthReport
			mu.Lock()
			for _, name := range names {
				r := device.HealthReport{Device: device.DeviceID{Pool: d.node, Device: name}, Health: device.Healthy, Time: ev.Time}
				if ev.Recovered {
					delete(unhealthy, name)
				} else {
					r.Health, r.Reason, r.Message = device.Unhealthy, fmt.Sprintf("XID%d", ev.XID), "NVML reported "+ev.String()
					unhealthy[name] = r
				}
				batch = append(batch, r)
			}
			mu.Unlock()
			logger.Info("GPU health changed", "event", ev.String(), "devices", names)
			if len(batch) > 0 && !send(device.Event{Type: device.EventHealth, Health: batch}) {
				return nil
			}
		}
	}
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

// affected is the devices an event concerns: those of its GPU, or only
// the MIG device of the GPU instance it names.
func (d *Driver) affected(ev nvml.HealthEvent) []string {
	var key *nvml.Key
	if ev.GPUInstance >= 0 && !ev.Recovered {
		if gis, err := d.nv.GPUInstances(ev.GPU); err == nil {
			for _, gi := range gis {
				if gi.ID == ev.GPUInstance {
					key = &nvml.Key{GPU: ev.GPU, ProfileID: gi.ProfileID, Start: gi.Placement.Start}
				}
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for name, info := range d.devs {
		if info.gpu != ev.GPU || (key != nil && (info.typ != TypeMIG || info.key != *key)) {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
