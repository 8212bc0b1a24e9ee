package device

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// DynamicDiscoverer is a discoverer of an inventory that changes while
// the driver runs (partitions made at prepare and destroyed at
// unprepare, cards that come and go) and whose health comes from a
// [HealthSource]. Create it with [NewDynamicDiscoverer]. Changed and
// Inventory may be called from any goroutine, also while Watch runs; run
// one Watch at a time (the driver runtime does).
//
// Inventory asks the vendor's function for the inventory of the moment.
// [DynamicDiscoverer.Changed] says that it changed: Watch then asks
// again and sends the new inventory ([EventInventoryChanged] with
// [Event.Inventory] set), followed by a health report on every device of
// it; the changes made until Watch gets to it share one event. Call
// Changed after each change, or hand it to something that coalesces
// changes under churn (the partition lifecycle's republish does).
//
// Health is reported as by a [HealthDiscoverer], with these rules for
// devices that come and go:
//
//   - A report on a counter set (a card) applies to every device that
//     consumes it (and, as for a HealthDiscoverer, to a device of the
//     same name), in the inventory of the moment and in every later one:
//     a partition made on an unhealthy card is unhealthy from its first
//     report. A card's last report is kept while the card is not in the
//     inventory (a card lost and withdrawn), and applies when it is back.
//   - A report on a device applies to that device while it is in the
//     inventory, and wins over its card's report when it is newer. A
//     report on a device that is not in the inventory of the moment is
//     dropped (logged), and a device that leaves the inventory forgets its
//     report: a partition made again at the same place is judged afresh,
//     by its card's health or, until the source reports on it, as Unknown
//     ([ReasonNotReported]).
//
// Every health event names every device of the inventory of the moment
// whose health the source vouched for, re-sent with the batch's time (so
// a source that stops sending lets the devices go stale in the runtime),
// and the first event after an inventory change names every device,
// Unknown where the source has said nothing. What the driver runtime
// does with a report on a device it does not publish is stated at
// [github.com/drakit/drakit/driver.Discoverer].
type DynamicDiscoverer struct {
	inventory func(context.Context) (*Inventory, error)
	src       HealthSource
	changed   chan struct{}

	mu  sync.Mutex
	inv *Inventory
	// sets and devices are the source's last reports on counter sets
	// (Device is the set's name) and on devices of the inventory.
	sets    map[DeviceID]HealthReport
	devices map[DeviceID]HealthReport
}

// NewDynamicDiscoverer returns a discoverer whose inventory inventory
// returns (a new value at every call: the runtime and the discoverer keep
// it unmodified) and whose health comes from src. It fails for a nil
// function or an invalid source.
func NewDynamicDiscoverer(inventory func(context.Context) (*Inventory, error), src HealthSource) (*DynamicDiscoverer, error) {
	switch {
	case inventory == nil:
		return nil, errors.New("new dynamic discoverer: no inventory function")
	case src.poll == nil && src.ch == nil:
		return nil, errors.New("new dynamic discoverer: no health source (use PollHealth or HealthChannel)")
	case src.poll != nil && src.every <= 0:
		return nil, fmt.Errorf("new dynamic discoverer: poll interval %v is not positive", src.every)
	}
	return &DynamicDiscoverer{
		inventory: inventory, src: src, changed: make(chan struct{}, 1),
		sets: map[DeviceID]HealthReport{}, devices: map[DeviceID]HealthReport{},
	}, nil
}

// HealthInterval is the source's poll interval ([PollHealth]); zero for
// a [HealthChannel].
func (d *DynamicDiscoverer) HealthInterval() time.Duration { return d.src.every }

// Changed tells the discoverer that the inventory changed; it never
// blocks, and changes until Watch reads the inventory share one event.
func (d *DynamicDiscoverer) Changed() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// Inventory returns the inventory of the moment.
func (d *DynamicDiscoverer) Inventory(ctx context.Context) (*Inventory, error) {
	inv, err := d.inventory(ctx)
	if err != nil {
		return nil, err
	}
	if inv == nil {
		return nil, errors.New("discover devices: the inventory function returned none")
	}
	d.setInventory(inv)
	return inv, nil
}

// setInventory makes inv the inventory of the moment; the devices that
// left it forget their reports.
func (d *DynamicDiscoverer) setInventory(inv *Inventory) {
	have := map[DeviceID]bool{}
	for _, p := range inv.Pools {
		for _, dev := range p.Devices {
			if dev != nil {
				have[DeviceID{Pool: p.Name, Device: dev.name}] = true
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inv = inv
	for id := range d.devices {
		if !have[id] {
			delete(d.devices, id)
		}
	}
}

// Watch sends the inventory's changes and the health events of the
// source until ctx is done, then returns nil. It returns an error when
// the inventory cannot be read after a change (the runtime restarts
// Watch, and discovers again).
func (d *DynamicDiscoverer) Watch(ctx context.Context, events chan<- Event) error {
	if _, err := d.Inventory(ctx); err != nil {
		return err
	}
	if !d.sendAll(ctx, events) {
		return nil
	}
	var batches <-chan []HealthReport
	var tick <-chan time.Time
	if d.src.ch != nil {
		batches = d.src.ch
	} else {
		ticker := time.NewTicker(d.src.every)
		defer ticker.Stop()
		tick = ticker.C
		if !d.poll(ctx, events) {
			return nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.changed:
			inv, err := d.Inventory(ctx)
			if err != nil {
				return fmt.Errorf("watch devices: %w", err)
			}
			select {
			case events <- Event{Type: EventInventoryChanged, Inventory: inv}:
			case <-ctx.Done():
				return nil
			}
			if !d.sendAll(ctx, events) {
				return nil
			}
		case batch, ok := <-batches:
			if !ok {
				d.forgetAll()
				send(ctx, events, d.reports(ReasonHealthSourceClosed, "the health monitor stopped", true, time.Now(), nil))
				batches = nil // inventory changes still come
				continue
			}
			now := time.Now()
			if r := d.reports("", "", false, now, d.apply(ctx, batch, now)); len(r) > 0 && !send(ctx, events, r) {
				return nil
			}
		case <-tick:
			if !d.poll(ctx, events) {
				return nil
			}
		}
	}
}

// poll asks a PollHealth source and sends what it says; false when ctx
// ended.
func (d *DynamicDiscoverer) poll(ctx context.Context, events chan<- Event) bool {
	batch, err := d.src.poll(ctx)
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		d.forgetAll()
		return send(ctx, events, d.reports(ReasonHealthCheckFailed, err.Error(), true, time.Now(), nil))
	}
	now := time.Now()
	r := d.reports("", "", false, now, d.apply(ctx, batch, now))
	return len(r) == 0 || send(ctx, events, r)
}

// sendAll sends a report on every device of the inventory of the
// moment, Unknown where the source has said nothing.
func (d *DynamicDiscoverer) sendAll(ctx context.Context, events chan<- Event) bool {
	r := d.reports(ReasonNotReported, "no health report yet", true, time.Now(), nil)
	return len(r) == 0 || send(ctx, events, r)
}

// forgetAll forgets every report: the source failed, and vouches for
// nothing any more.
func (d *DynamicDiscoverer) forgetAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.sets)
	clear(d.devices)
}

// apply records a batch of the source, stamping reports without a time
// with received, and returns the devices and counter sets it named.
// Reports on a device not in the inventory are dropped.
func (d *DynamicDiscoverer) apply(ctx context.Context, batch []HealthReport, received time.Time) map[DeviceID]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	named := map[DeviceID]bool{}
	for _, r := range batch {
		if r.Time.IsZero() {
			r.Time = received
		}
		switch {
		case d.isSet(r.Device): // a card: for every device consuming it, one of its name included
			d.sets[r.Device], named[r.Device] = r, true
		case d.inv.Lookup(r.Device) != nil:
			d.devices[r.Device], named[r.Device] = r, true
		default:
			klog.FromContext(ctx).V(2).Info("Health report on a device or counter set not in the inventory now; dropped", "device", r.Device.String())
		}
	}
	return named
}

// isSet reports whether id names a counter set of the inventory, or one
// the source reported on before (a card withdrawn for now). d.mu is held.
func (d *DynamicDiscoverer) isSet(id DeviceID) bool {
	if _, ok := d.sets[id]; ok {
		return true
	}
	for _, p := range d.inv.Pools {
		if p.Name != id.Pool {
			continue
		}
		for _, cs := range p.CounterSets {
			if cs.Name == id.Device {
				return true
			}
		}
		for _, dev := range p.Devices {
			if dev != nil {
				if _, ok := dev.consumes[id.Device]; ok {
					return true
				}
			}
		}
	}
	return false
}

// reports is the health of the inventory's devices: each device's
// newest report, its own or its card's, with the report's time when the
// batch named it (fresh) and as of at when it is vouched for again. A
// device without one is left out, or with all reported Unknown with
// reason and message.
func (d *DynamicDiscoverer) reports(reason, message string, all bool, at time.Time, fresh map[DeviceID]bool) []HealthReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []HealthReport
	for _, p := range d.inv.Pools {
		for _, dev := range p.Devices {
			if dev == nil {
				continue
			}
			id := DeviceID{Pool: p.Name, Device: dev.name}
			r, ok := d.devices[id]
			from := id
			if c, cok := d.sets[id]; cok && (!ok || c.Time.After(r.Time)) {
				r, ok = c, true // a card of the device's name
			}
			for _, cs := range dev.consumesOrder {
				set := DeviceID{Pool: p.Name, Device: cs}
				if c, cok := d.sets[set]; cok && (!ok || c.Time.After(r.Time)) {
					r, ok, from = c, true, set
				}
			}
			switch {
			case ok:
				r.Device = id
				if !fresh[from] {
					r.Time = at
				}
			case all:
				r = HealthReport{Device: id, Health: Unknown, Reason: reason, Message: message, Time: at}
			default:
				continue
			}
			out = append(out, r)
		}
	}
	return out
}
