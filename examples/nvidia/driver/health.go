package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// DefaultIgnoredXIDs are the XID errors that an application causes (13
// graphics engine exception, 31 memory page fault, 43 GPU stopped
// processing, 45 preemptive cleanup, 68 video processor exception, 109
// context switch timeout): they say nothing about the GPU's health and
// leave it healthy, as in NVIDIA's device plugin; as in NVIDIA's DRA
// driver, the GPU's devices are republished with the informational taint
// TaintIgnoredXID (effect None) naming the last one. Every other XID
// makes the GPU unhealthy, and one NVML reports on a GPU it cannot name
// makes every GPU unhealthy (it is not dropped). WithIgnoredXIDs
// replaces the list.
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// XIDFallenOffTheBus is XID 79: the GPU fell off the bus. The GPU is
// lost (see ReasonGPULost).
const XIDFallenOffTheBus = 79

// ReasonGPULost is the health reason (and the health taint's value) of
// every device of a lost GPU: one that fell off the bus (XID 79) or that
// NVML answers with GPU_IS_LOST (nvml.ErrGPULost). Its taint's effect is
// NoExecute: the GPU runs nothing until it is reset, so the pods using
// it are evicted where the cluster runs device taint eviction (NVIDIA's
// driver taints XIDs NoSchedule). A prepare on a lost GPU
// is refused. The taint stays until the GPU is reported recovered (a
// reset; on real hardware, a reset and a driver restart).
const ReasonGPULost = "GPULost"

// TaintIgnoredXID is the key of the informational taint (effect None) on
// every device of a GPU that reported an ignored XID (DefaultIgnoredXIDs,
// WithIgnoredXIDs); its value is the last one, e.g. "XID13". It keeps no
// pod off the GPU; it tells users and tools what happened. A recovery
// (a reset) removes it.
const TaintIgnoredXID = DriverName + "/ignored-xid"

// TaintUnmonitored is the key of the informational taint (effect None)
// on every device of a GPU that NVML could not register for XID events
// (nvml.HealthEvent.Unmonitored): its health cannot be told, so it is
// reported Unknown and the taint lets users and tools see why, without
// keeping pods off it.
const TaintUnmonitored = DriverName + "/unmonitored"

// WithIgnoredXIDs sets the XIDs that leave a GPU healthy (default
// DefaultIgnoredXIDs); every other XID makes its GPU's devices
// Unhealthy.
func WithIgnoredXIDs(xids ...uint64) Option {
	return func(o *options) error {
		o.ignoredXIDs = map[uint64]bool{}
		for _, x := range xids {
			o.ignoredXIDs[x] = true
		}
		return nil
	}
}

// DefaultHealthHeartbeat is how often Watch re-affirms every device's
// health while NVML's event loop answers (WithHealthHeartbeat). The
// runtime lets a report age into Unknown after its health timeout (30 s by
// default), so that a dead monitor never looks healthy; the heartbeat is
// what says this monitor is not dead. A re-affirmation is a new
// observation and carries the time it is sent.
const DefaultHealthHeartbeat = 10 * time.Second

// liveRounds is how many heartbeats NVML's event loop may stay silent
// (no event, no liveness tick) before the heartbeat stops re-affirming
// health.
const liveRounds = 3

// monitor is the driver's health state, fed by one NVML health stream
// that outlives a Watch (the runtime restarts a Watch that failed): the
// book of what the XIDs said, when the event loop last answered, and
// which GPUs changed since a Watch last reported them.
type monitor struct {
	mu       sync.Mutex
	book     healthBook
	running  bool
	gen      int             // the running stream's number
	done     <-chan struct{} // the running stream's context's
	liveness bool            // the stream has liveness ticks (nvml.LivenessWatcher)
	answered time.Time       // the stream's last event or tick
	pending  map[int]bool
	notify   chan struct{} // capacity 1: pending changed or the stream ended
}

// start subscribes to NVML's health stream unless one is running; the
// subscription lasts until ctx (the runtime's, not one Watch's) is done
// or the stream ends.
func (d *Driver) startMonitor(ctx context.Context) error {
	m := &d.health
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		select {
		case <-m.done: // its context ended; its loop is finishing
		default:
			return nil
		}
	}
	var ch <-chan nvml.HealthEvent
	var err error
	lw, live := d.nv.(nvml.LivenessWatcher)
	if live {
		ch, err = lw.WatchHealthLiveness(ctx)
	} else {
		ch, err = d.nv.WatchHealth(ctx)
	}
	if err != nil {
		return fmt.Errorf("watch GPU health: %w", err)
	}
	if m.notify == nil {
		m.notify = make(chan struct{}, 1)
	}
	m.gen++
	m.running, m.liveness, m.answered, m.done = true, live, time.Now(), ctx.Done()
	m.book.unmonitored = nil // the new stream reports its own
	go d.monitorLoop(ctx, ch, m.gen)
	return nil
}

// monitorLoop applies the stream's events to the book until it ends.
func (d *Driver) monitorLoop(ctx context.Context, ch <-chan nvml.HealthEvent, gen int) {
	logger := klog.FromContext(ctx)
	m := &d.health
	for ev := range ch {
		m.mu.Lock()
		if m.gen != gen {
			m.mu.Unlock()
			continue // a newer stream reports
		}
		m.answered = time.Now()
		if ev.Alive {
			m.mu.Unlock()
			continue
		}
		if ev.Unmonitored {
			m.book.setUnmonitored(ev.GPU)
			m.mu.Unlock()
			logger.Error(
				nil,
				"GPU not monitored: NVML could not register it for XID events; its health is "+
					"reported Unknown",
				"gpu",
				ev.GPU,
				"uuid",
				ev.UUID,
			)
			d.changed() // its devices get the TaintUnmonitored taint
			continue
		}
		if !ev.Recovered && d.o.ignoredXIDs[ev.XID] {
			m.book.setIgnored(ev)
			m.mu.Unlock()
			logger.V(2).
				Info(
					"Ignored XID leaves the GPU healthy; its devices get an informational taint",
					"event",
					ev.String(),
					"taint",
					TaintIgnoredXID,
				)
			d.changed() // republished with the TaintIgnoredXID taint
			continue
		}
		if ev.GPU < 0 && !ev.Recovered && ev.XID != 0 {
			logger.Error(
				nil,
				"XID on a GPU NVML cannot name: every GPU is marked unhealthy",
				"event",
				ev.String(),
				"uuid",
				ev.UUID,
			)
		}
		m.book.apply(ev, d.instanceKey(ev))
		if m.pending == nil {
			m.pending = map[int]bool{}
		}
		m.pending[ev.GPU] = true
		m.mu.Unlock()
		logger.Info("GPU health changed", "event", ev.String())
		m.wake()
	}
	m.mu.Lock()
	if m.gen == gen {
		m.running = false
	}
	m.mu.Unlock()
	m.wake()
}

func (m *monitor) wake() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// live reports whether the stream runs and, when it has liveness ticks,
// answered within window.
func (m *monitor) live(window time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running && (!m.liveness || time.Since(m.answered) <= window)
}

// takePending returns the GPUs changed since the last call and whether
// the stream still runs.
func (m *monitor) takePending() ([]int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var gpus []int
	for g := range m.pending {
		gpus = append(gpus, g)
	}
	sort.Ints(gpus)
	m.pending = nil
	return gpus, m.running
}

// lostEvent is what made the GPU lost, if it is.
func (m *monitor) lostEvent(gpu int) (nvml.HealthEvent, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ev, lost := m.book.lost[gpu]
	return ev, lost
}

// markLost records that NVML answered a query of the GPU with
// GPU_IS_LOST; true when that is news.
func (m *monitor) markLost(gpu int, err error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.book.lost[gpu]; ok {
		return false
	}
	m.book.init()
	m.book.lost[gpu] = nvml.HealthEvent{
		GPU:             gpu,
		GPUInstance:     -1,
		ComputeInstance: -1,
		Time:            time.Now().UTC(),
	}
	m.book.lostWhy[gpu] = err.Error()
	if m.pending == nil {
		m.pending = map[int]bool{}
	}
	m.pending[gpu] = true
	return true
}

// ignoredXIDs are the GPUs' last ignored XIDs.
func (m *monitor) ignoredXIDs() map[int]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int]uint64{}
	for g, ev := range m.book.ignored {
		out[g] = ev.XID
	}
	return out
}

// unmonitoredGPUs are the GPUs the running stream could not watch.
func (m *monitor) unmonitoredGPUs() map[int]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.book.unmonitored)
}

// probeLost asks NVML about every GPU that serves and records the lost
// ones: a GPU that fell off the bus before the event stream was
// subscribed (an XID is not replayed) or without an XID still answers
// GPU_IS_LOST. True when a GPU was found lost now.
func (d *Driver) probeLost(ctx context.Context) bool {
	found := false
	gpus := d.hw()
	for i := range gpus {
		g := &gpus[i]
		if g.broken != nil {
			continue
		}
		if _, err := d.nv.MigMode(g.Index); errors.Is(err, nvml.ErrGPULost) &&
			d.health.markLost(g.Index, err) {
			klog.FromContext(ctx).Error(err, "GPU is lost", "gpu", g.Index, "uuid", g.UUID)
			found = true
		}
	}
	return found
}

// Watch reports the devices' health and the inventory's changes until ctx
// is done. Health lives in the driver, fed by one NVML health stream that
// a restarted Watch finds running (an XID reported before a Watch failed
// is still reported by the next one). Its first event reports every
// device's health from that state; then an XID event from NVML makes the
// GPU's devices (the full GPU, or all MIG devices on it, or only the MIG
// device the error is confined to) Unhealthy with reason "XID<n>", which
// the runtime turns into a taint; a recovery (nvml.HealthEvent.Recovered)
// makes them Healthy again; the XIDs of WithIgnoredXIDs change nothing.
// After every MIG device the driver makes or destroys it reports
// EventInventoryChanged with the new inventory, so that the slices are published again in
// mig.Preference's new order, and then the health of every device again
// (devices that appear on an unhealthy GPU are Unhealthy at once). Every
// heartbeat (WithHealthHeartbeat) it reports every device's health again,
// but only while NVML's event loop answered within the last three
// heartbeats (nvml.LivenessWatcher): a stuck loop vouches for nothing,
// and the runtime lets the reports decay to Unknown. Watch returns an
// error when NVML's stream ends, so that the runtime restarts it.
func (d *Driver) Watch(ctx context.Context, events chan<- device.Event) error {
	logger := klog.FromContext(ctx)
	if _, err := d.Inventory(ctx); err != nil {
		return err
	}
	if err := d.startMonitor(ctx); err != nil {
		return err
	}
	m := &d.health
	d.probeLost(ctx)
	m.takePending() // the first report covers every device
	send := func(ev device.Event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send(device.Event{Type: device.EventHealth, Health: d.reports(nil)}) {
		return nil
	}
	heartbeat := time.NewTicker(d.o.heartbeat)
	defer heartbeat.Stop()
	silent := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C:
			// Whether other NVML clients hold an idle dynamic GPU
			// decides whether it is offered whole.
			d.pollOthers()
			if !m.live(liveRounds * d.o.heartbeat) {
				if !silent {
					logger.Error(
						nil,
						"NVML's health event loop has not answered; no longer re-affirming the "+
							"GPUs' health",
						"for",
						liveRounds*d.o.heartbeat,
					)
				}
				silent = true
				continue
			}
			silent = false
			if d.probeLost(ctx) {
				m.wake() // its devices are reported at once below, and again with the pending batch
			}
			batch := d.reports(nil)
			for i := range batch {
				batch[i].Time = time.Time{} // observed now, by the runtime's clock
			}
			if !send(device.Event{Type: device.EventHealth, Health: batch}) {
				return nil
			}
		case <-d.kick:
			inv, err := d.Inventory(ctx)
			if err != nil {
				return err
			}
			// The event carries the inventory, so the runtime publishes
			// it as it is rather than reading every GPU again.
			if !send(device.Event{Type: device.EventInventoryChanged, Inventory: inv}) ||
				!send(device.Event{Type: device.EventHealth, Health: d.reports(nil)}) {
				return nil
			}
		case <-m.notify:
			gpus, running := m.takePending()
			if slices.Contains(gpus, -1) {
				gpus = []int{-1} // an XID on a GPU NVML could not name: every device
			}
			for _, g := range gpus {
				var which *int
				if g >= 0 {
					which = &g
				}
				batch := d.reports(which)
				if len(batch) > 0 && !send(device.Event{Type: device.EventHealth, Health: batch}) {
					return nil
				}
			}
			if !running {
				return fmt.Errorf("watch GPU health: NVML's event stream ended")
			}
		}
	}
}

// healthBook is what the XID events and NVML said: unhealthy GPUs and MIG
// devices, lost GPUs, and the GPUs the running stream cannot watch.
type healthBook struct {
	// anyGPU is the last XID NVML reported on a GPU it could not name
	// (GPU -1): every GPU counts as unhealthy with it until a recovery.
	anyGPU      *nvml.HealthEvent
	ignored     map[int]nvml.HealthEvent // each GPU's last ignored XID
	gpus        map[int]nvml.HealthEvent
	migs        map[Key]nvml.HealthEvent
	lost        map[int]nvml.HealthEvent
	lostWhy     map[int]string // the NVML error that found a GPU lost without an XID
	unmonitored map[int]bool
}

func (h *healthBook) setUnmonitored(gpu int) {
	if h.unmonitored == nil {
		h.unmonitored = map[int]bool{}
	}
	h.unmonitored[gpu] = true
}

// setIgnored records an ignored XID; one on a GPU NVML could not name is
// only logged.
func (h *healthBook) setIgnored(ev nvml.HealthEvent) {
	if ev.GPU < 0 {
		return
	}
	if h.ignored == nil {
		h.ignored = map[int]nvml.HealthEvent{}
	}
	h.ignored[ev.GPU] = ev
}

func (h *healthBook) init() {
	if h.gpus == nil {
		h.gpus, h.migs = map[int]nvml.HealthEvent{}, map[Key]nvml.HealthEvent{}
		h.lost, h.lostWhy = map[int]nvml.HealthEvent{}, map[int]string{}
	}
}

// apply records an event; key is the MIG device it is confined to, if any.
func (h *healthBook) apply(ev nvml.HealthEvent, key *Key) {
	h.init()
	switch {
	case ev.Recovered:
		h.anyGPU = nil
		delete(h.ignored, ev.GPU)
		delete(h.lost, ev.GPU)
		delete(h.lostWhy, ev.GPU)
		delete(h.gpus, ev.GPU)
		for k := range h.migs {
			if k.GPU == ev.GPU {
				delete(h.migs, k)
			}
		}
	case ev.GPU < 0 && ev.XID != 0:
		h.anyGPU = &ev
	case key != nil:
		h.migs[*key] = ev
	case ev.XID == XIDFallenOffTheBus:
		h.lost[ev.GPU] = ev
		delete(h.lostWhy, ev.GPU)
	case ev.XID != 0:
		h.gpus[ev.GPU] = ev
	}
}

// reports is the health of every device of the last inventory, or only of
// GPU *gpu's devices.
func (d *Driver) reports(gpu *int) []device.HealthReport {
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	h := &d.health.book
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []device.HealthReport
	for name, info := range d.devs {
		if gpu != nil && info.gpu != *gpu {
			continue
		}
		r := device.HealthReport{
			Device: device.DeviceID{Pool: info.pool, Device: name},
			Health: device.Healthy,
		}
		ev, bad := h.gpus[info.gpu]
		if !bad && h.anyGPU != nil {
			ev, bad = *h.anyGPU, true
		}
		if !bad && info.typ == TypeMIG {
			k := info.key
			k.UUID = "" // the book's keys are this process's, by index
			ev, bad = h.migs[k]
		}
		switch lost, isLost := h.lost[info.gpu]; {
		case isLost:
			why := "NVML reported " + lost.String() + " (fallen off the bus)"
			if w, ok := h.lostWhy[info.gpu]; ok {
				why = "NVML answers " + w
			}
			r.Health, r.Reason, r.TaintEffect, r.Message, r.Time = device.Unhealthy, ReasonGPULost,
				device.NoExecute, fmt.Sprintf(
					"GPU %d is lost: %s; it runs nothing until it is reset",
					info.gpu,
					why,
				), lost.Time
		case bad:
			r.Health, r.Reason, r.Message, r.Time = device.Unhealthy, fmt.Sprintf(
				"XID%d",
				ev.XID,
			), "NVML reported "+ev.String(), ev.Time
		case h.unmonitored[info.gpu]:
			r.Health, r.Message = device.Unknown, fmt.Sprintf(
				"GPU %d is not monitored: NVML could not register it for XID events",
				info.gpu,
			)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device.Device < out[j].Device.Device })
	return out
}

// instanceKey is the MIG device an XID is confined to; nil for the whole
// GPU (or an instance that is gone).
func (d *Driver) instanceKey(ev nvml.HealthEvent) *Key {
	if ev.GPUInstance < 0 || ev.Recovered {
		return nil
	}
	gis, err := d.nv.GPUInstances(ev.GPU)
	if err != nil {
		return nil
	}
	for _, gi := range gis {
		if gi.ID == ev.GPUInstance {
			return &Key{GPU: ev.GPU, ProfileID: gi.ProfileID, Start: gi.Placement.Start}
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
