package device

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Reasons of the Unknown reports a [HealthDiscoverer] makes itself.
const (
	// ReasonNotReported: the health source has not reported on the
	// device yet.
	ReasonNotReported = "NotReported"
	// ReasonHealthCheckFailed: the last poll of the health source failed.
	ReasonHealthCheckFailed = "HealthCheckFailed"
	// ReasonHealthSourceClosed: the health source's channel was closed.
	ReasonHealthSourceClosed = "HealthSourceClosed"
)

// HealthSource is where a [HealthDiscoverer] gets health reports: a
// function it polls ([PollHealth]) or a channel the vendor's monitor
// sends on ([HealthChannel]). The zero value is no source.
type HealthSource struct {
	every time.Duration
	poll  func(context.Context) ([]HealthReport, error)
	ch    <-chan []HealthReport
}

// PollHealth is a source that calls poll when watching starts and then
// every interval. poll returns reports on some or all devices; devices it
// leaves out keep their last health, as of this poll (see
// [HealthDiscoverer]). A poll that fails makes every device Unknown
// (reason [ReasonHealthCheckFailed], the error as message) until a later
// poll reports on it. every must be shorter than the driver's health
// timeout, or devices show as Unknown between polls.
func PollHealth(every time.Duration, poll func(context.Context) ([]HealthReport, error)) HealthSource {
	return HealthSource{every: every, poll: poll}
}

// HealthInterval is the source's poll interval ([PollHealth]); zero for a
// [HealthChannel], whose monitor's rhythm is its own. The driver runtime
// refuses a health timeout that is not above it.
func (h *HealthDiscoverer) HealthInterval() time.Duration { return h.src.every }

// HealthChannel is a source that passes on the batches of reports the
// vendor's monitor sends on ch. Devices a batch leaves out keep their last
// health, as of this batch (see [HealthDiscoverer]): an empty batch is a
// heartbeat that says the monitor is alive and has nothing new. The
// monitor must send a batch within every health timeout of the driver,
// or its devices show as Unknown. When ch is closed every device becomes
// Unknown (reason [ReasonHealthSourceClosed]): nothing watches it any more.
func HealthChannel(ch <-chan []HealthReport) HealthSource {
	return HealthSource{ch: ch}
}

// HealthDiscoverer is a discoverer of a fixed inventory whose health
// comes from a [HealthSource]. Create it with [NewHealthDiscoverer].
// Inventory may be called from any goroutine, also while Watch runs; run
// one Watch at a time (the driver runtime does).
//
// A report may name a device or a counter set of the pool. A counter set
// stands for the physical device whose resources it counts (a card): its
// health applies to every device that consumes from it (the whole card
// and each of its partitions) and to a device of the same name, if any.
//
// Before the source first reports on a device, the device's health is
// Unknown: the first event of Watch says so (reason [ReasonNotReported])
// for every device not reported on yet. A report's Time is kept; a report
// with no Time gets the time the discoverer received it from the source,
// so the runtime sees how old an observation is, not when it was passed on.
//
// Each batch of the source (each successful poll, each batch on the
// channel) is the word of a monitor that is alive: the devices it names
// get their new health, and every other device the source reported on
// before keeps its last health, re-sent with the batch's time. So the
// runtime's health of a device is as fresh as the source's last batch,
// and a source that stops sending (a wedged monitor, a hung poll) lets
// every device go stale: the runtime reports it Unknown after its health
// timeout.
type HealthDiscoverer struct {
	inv *Inventory
	src HealthSource
	// consumers lists, per pool and counter set, the devices consuming it.
	consumers map[string]map[string][]string
	devices   map[DeviceID]bool

	mu sync.Mutex
	// last is the source's last report on each device it reported on
	// since it last failed.
	last map[DeviceID]HealthReport
}

// NewHealthDiscoverer returns a discoverer of inv (which it copies) with
// health from src. It fails for a nil inventory or an invalid source (a
// non-positive poll interval, a nil function or channel).
func NewHealthDiscoverer(inv *Inventory, src HealthSource) (*HealthDiscoverer, error) {
	switch {
	case inv == nil:
		return nil, errors.New("new health discoverer: nil inventory")
	case src.poll == nil && src.ch == nil:
		return nil, errors.New("new health discoverer: no health source (use PollHealth or HealthChannel)")
	case src.poll != nil && src.every <= 0:
		return nil, fmt.Errorf("new health discoverer: poll interval %v is not positive", src.every)
	}
	h := &HealthDiscoverer{
		inv: inv.Clone(), src: src,
		consumers: map[string]map[string][]string{},
		devices:   map[DeviceID]bool{},
		last:      map[DeviceID]HealthReport{},
	}
	for _, p := range h.inv.Pools {
		sets := map[string][]string{}
		for _, d := range p.Devices {
			if d == nil {
				continue
			}
			h.devices[DeviceID{Pool: p.Name, Device: d.name}] = true
			for _, cs := range d.consumesOrder {
				sets[cs] = append(sets[cs], d.name)
			}
		}
		h.consumers[p.Name] = sets
	}
	return h, nil
}

// Inventory returns a copy of the fixed inventory.
func (h *HealthDiscoverer) Inventory(context.Context) (*Inventory, error) {
	return h.inv.Clone(), nil
}

// Watch sends the health events of the source until ctx is done, then
// returns nil. See [HealthDiscoverer] for what a report applies to.
func (h *HealthDiscoverer) Watch(ctx context.Context, events chan<- Event) error {
	if first := h.unknown(ReasonNotReported, "no health report yet", true); len(first) > 0 {
		if !send(ctx, events, first) {
			return nil
		}
	}
	if h.src.ch != nil {
		for {
			select {
			case <-ctx.Done():
				return nil
			case batch, ok := <-h.src.ch:
				if !ok {
					send(ctx, events, h.unknown(ReasonHealthSourceClosed, "the health monitor stopped", false))
					<-ctx.Done()
					return nil
				}
				if reports := h.expand(ctx, batch, time.Now()); len(reports) > 0 && !send(ctx, events, reports) {
					return nil
				}
			}
		}
	}
	ticker := time.NewTicker(h.src.every)
	defer ticker.Stop()
	for {
		batch, err := h.src.poll(ctx)
		if ctx.Err() != nil {
			return nil // watching ended, the source did not fail
		}
		var reports []HealthReport
		if err != nil {
			reports = h.unknown(ReasonHealthCheckFailed, err.Error(), false)
		} else {
			reports = h.expand(ctx, batch, time.Now())
		}
		if len(reports) > 0 && !send(ctx, events, reports) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// send sends one health event; false when ctx ended first.
func send(ctx context.Context, events chan<- Event, reports []HealthReport) bool {
	select {
	case events <- Event{Type: EventHealth, Health: reports}:
		return true
	case <-ctx.Done():
		return false
	}
}

// unknown returns an Unknown report for every device: only those the
// source has not reported on when onlyNew, else all, and then the source's
// reports are forgotten (it failed: they are not vouched for any more).
func (h *HealthDiscoverer) unknown(reason, message string, onlyNew bool) []HealthReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HealthReport
	now := time.Now()
	for _, p := range h.inv.Pools {
		for _, d := range p.Devices {
			if d == nil {
				continue
			}
			id := DeviceID{Pool: p.Name, Device: d.name}
			if _, known := h.last[id]; onlyNew && known {
				continue
			}
			out = append(out, HealthReport{Device: id, Health: Unknown, Reason: reason, Message: message, Time: now})
		}
	}
	if !onlyNew {
		clear(h.last)
	}
	return out
}

// expand turns reports on devices and counter sets into reports on
// devices, stamping those without a time with received, and adds the last
// report on every other device the source reported on, as of received.
// Reports naming neither a device nor a counter set are logged and
// dropped.
func (h *HealthDiscoverer) expand(ctx context.Context, batch []HealthReport, received time.Time) []HealthReport {
	var out []HealthReport
	for _, r := range batch {
		if r.Time.IsZero() {
			r.Time = received
		}
		consumers := h.consumers[r.Device.Pool][r.Device.Device]
		if !h.devices[r.Device] && len(consumers) == 0 {
			klog.FromContext(ctx).Error(nil, "Health report for a device or counter set the inventory does not have; dropped", "device", r.Device.String())
			continue
		}
		if h.devices[r.Device] {
			out = append(out, r)
		}
		for _, name := range consumers {
			if name == r.Device.Device {
				continue
			}
			c := r
			c.Device = DeviceID{Pool: r.Device.Pool, Device: name}
			out = append(out, c)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	named := make(map[DeviceID]bool, len(out))
	for _, r := range out {
		named[r.Device] = true
		h.last[r.Device] = r
	}
	// The others keep their last health, vouched for as of this batch.
	for _, p := range h.inv.Pools {
		for _, d := range p.Devices {
			if d == nil {
				continue
			}
			id := DeviceID{Pool: p.Name, Device: d.name}
			if r, ok := h.last[id]; ok && !named[id] {
				r.Time = received
				h.last[id] = r
				out = append(out, r)
			}
		}
	}
	return out
}
