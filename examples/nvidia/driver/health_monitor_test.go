package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// nextEvent waits for Watch's next event.
func nextEvent(t *testing.T, events <-chan device.Event, what string) device.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30 s", what)
		return device.Event{}
	}
}

func unhealthy(ev device.Event) []string {
	var out []string
	for _, r := range ev.Health {
		if r.Health == device.Unhealthy {
			out = append(out, r.Device.Device+"="+r.Reason)
		}
	}
	return out
}

// Item 8: the health state lives in the driver. After an XID 79 the
// runtime restarts Watch: its first report still has the GPU unhealthy
// (it used to start from a fresh book and say Healthy, removing the
// taint), and a prepare on the GPU is refused with the reason. Ignored
// XIDs are an option.
func TestHealthSurvivesWatchRestart(t *testing.T) {
	f := newFixture(t, WithRepublishDelay(0), WithIgnoredXIDs(48))
	watch := func() (chan device.Event, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		events := make(chan device.Event, 100)
		go func() { _ = f.d.Watch(ctx, events) }()
		nextEvent(t, events, "first report")
		return events, cancel
	}
	events, stop := watch()
	if err := f.sim.RaiseXID(1, 48, -1, -1); err != nil { // ignored by the option
		t.Fatal(err)
	}
	if err := f.sim.RaiseXID(0, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	for got := unhealthy(
		nextEvent(t, events, "XID report"),
	); strings.Join(
		got, " ",
	) != "gpu-0=GPULost"; got = unhealthy(nextEvent(t, events, "XID report")) {
	}
	stop() // Watch ends, as when it failed

	events, stop = watch()
	defer stop()
	f.d.changed() // the runtime asks again: a full report
	for ev := nextEvent(t, events, "report"); ; ev = nextEvent(t, events, "report") {
		if ev.Type != device.EventHealth {
			continue
		}
		if got := unhealthy(ev); strings.Join(got, " ") != "gpu-0=GPULost" {
			t.Fatalf(
				"report after Watch restarted: unhealthy %v, want gpu-0=GPULost (XID 48 on GPU 1 "+
					"ignored)",
				got,
			)
		}
		break
	}
	err := f.d.PrepareClaim(context.Background(), claim("p"), []kit.AllocatedDevice{alloc("gpu-0")})
	if err == nil || !strings.Contains(err.Error(), "fell off the bus") {
		t.Errorf("prepare on GPU 0 after XID 79: %v, want refused as fallen off the bus", err)
	}
	if err := f.d.PrepareClaim(
		context.Background(), claim("q"), []kit.AllocatedDevice{alloc("gpu-1")},
	); err != nil {
		t.Errorf("prepare on healthy GPU 1: %v", err)
	}
}

// stalledNVML is the simulator with a health stream the test drives: it
// answers (liveness ticks) only when the test says so.
type stalledNVML struct {
	*nvmlsim.Sim
	ch chan nvml.HealthEvent
}

func (s stalledNVML) WatchHealthLiveness(ctx context.Context) (<-chan nvml.HealthEvent, error) {
	return s.ch, nil
}

// Item 8: the heartbeat re-affirms health only while NVML's event loop
// answers. A stalled loop stops the re-affirmations, so the runtime lets
// the reports decay to Unknown; when it answers again they resume.
func TestHeartbeatStopsWhenEventLoopStalls(t *testing.T) {
	f := newFixture(t)
	const beat = 20 * time.Millisecond
	nv := stalledNVML{Sim: f.sim, ch: make(chan nvml.HealthEvent)}
	d, err := New(
		nv,
		"node-1",
		WithStateDir(f.dir+"/state2"),
		WithHealthHeartbeat(beat),
		f.dynamicGPUs(t),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer close(nv.ch) // ends the monitor's loop
	defer cancel()
	events := make(chan device.Event, 1000)
	go func() { _ = d.Watch(ctx, events) }()
	nextEvent(t, events, "first report")
	tick := func() { nv.ch <- nvml.HealthEvent{GPU: -1, Alive: true} }

	// Answering: heartbeats come.
	stopTicks := make(chan struct{})
	ticking := make(chan struct{})
	go func() {
		defer close(ticking)
		for {
			select {
			case <-stopTicks:
				return
			case <-time.After(beat / 2):
				tick()
			}
		}
	}()
	if ev := nextEvent(t, events, "heartbeat"); ev.Type != device.EventHealth {
		t.Fatalf("event %s, want a heartbeat", ev.Type)
	}
	// Stalled: after the loop's window has passed, no heartbeat comes.
	close(stopTicks)
	<-ticking
	time.Sleep(2 * liveRounds * beat)
	for len(events) > 0 {
		<-events
	}
	select {
	case ev := <-events:
		t.Fatalf(
			"event %s with %d reports while NVML's event loop is stalled, want none",
			ev.Type,
			len(ev.Health),
		)
	case <-time.After(10 * beat):
	}
	// Answering again: heartbeats resume.
	tick()
	if ev := nextEvent(
		t, events, "heartbeat after the loop answered again",
	); ev.Type != device.EventHealth {
		t.Fatalf("event %s, want a heartbeat", ev.Type)
	}
	cancel()
}

// brokenGPU is the simulator with one GPU whose queries fail.
type brokenGPU struct {
	*nvmlsim.Sim
	gpu int
}

func (b brokenGPU) MigMode(gpu int) (nvml.MigMode, error) {
	if gpu == b.gpu {
		return nvml.MigMode{}, errors.New("GPU requires reset")
	}
	return b.Sim.MigMode(gpu)
}

func (b brokenGPU) GPUInstances(gpu int) ([]nvml.GPUInstance, error) {
	if gpu == b.gpu {
		return nil, errors.New("GPU requires reset")
	}
	return b.Sim.GPUInstances(gpu)
}

// Item 8: one GPU whose NVML queries fail, or that the backend lists as
// unreadable (nvml.GPU.Err, as the real backend does for a GPU NVML
// cannot read), does not stop the others (it used to stop the whole
// node's driver at start): they serve, and the GPU is published whole,
// tainted lost, and refused at prepare (issue 35: it was withdrawn from
// the slices).
func TestUnreadableGPULeftOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		nv   func(*nvmlsim.Sim) nvml.Interface
	}{
		{"queries fail", func(s *nvmlsim.Sim) nvml.Interface { return brokenGPU{Sim: s, gpu: 5} }},
		{
			"listed unreadable",
			func(s *nvmlsim.Sim) nvml.Interface { return unlistedGPU{Sim: s, gpu: 5} },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			d, err := New(tc.nv(f.sim), "node-1", WithStateDir(f.dir+"/state2"), f.dynamicGPUs(t))
			if err != nil {
				t.Fatalf("start with GPU 5 unreadable: %v", err)
			}
			defer d.Close()
			inv, err := d.Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			all := " " + strings.Join(names(inv), " ") + " "
			if !strings.Contains(all, " gpu-5 ") || strings.Contains(all, " gpu-5-") {
				t.Errorf("unreadable GPU 5: published %s, want it whole only", all)
			}
			for _, want := range []string{
				" gpu-0", " gpu-2-3g-71gb-4", " gpu-4-1g-18gb-0", " gpu-6-7g-141gb-0",
			} {
				if !strings.Contains(all, want) {
					t.Errorf("%s missing beside an unreadable GPU 5: %s", want, all)
				}
			}
			var lost device.HealthReport
			for _, r := range d.reports(nil) {
				if r.Device.Device == "gpu-5" {
					lost = r
				}
			}
			if lost.Health != device.Unhealthy || lost.Reason != ReasonGPULost ||
				lost.TaintEffect != device.NoExecute {
				t.Errorf(
					"unreadable GPU 5's health: %+v, want Unhealthy %s NoExecute",
					lost,
					ReasonGPULost,
				)
			}
			if err := d.PrepareClaim(
				context.Background(), claim("x"), []kit.AllocatedDevice{alloc("gpu-4-1g-18gb-0")},
			); err != nil {
				t.Errorf("prepare on GPU 4 beside an unreadable GPU 5: %v", err)
			}
			for _, dev := range []string{"gpu-5-1g-18gb-0", "gpu-5"} {
				if err := d.PrepareClaim(
					context.Background(), claim("y"), []kit.AllocatedDevice{alloc(dev)},
				); err == nil {
					t.Errorf("prepare of %s on the unreadable GPU 5 succeeded", dev)
				}
			}
		})
	}
}

// unlistedGPU is a backend whose GPUs reports one GPU unreadable
// (nvml.GPU.Err), as the real backend does for a GPU NVML cannot read.
type unlistedGPU struct {
	*nvmlsim.Sim
	gpu int
}

func (u unlistedGPU) GPUs() ([]nvml.GPU, error) {
	gpus, err := u.Sim.GPUs()
	for i := range gpus {
		if gpus[i].Index == u.gpu {
			// The facts read before the failing query stay.
			gpus[i].Err = &nvml.Error{
				Op:   fmt.Sprintf("get minor number of GPU %d", u.gpu),
				Code: nvml.ErrorGPUIsLost,
			}
		}
	}
	return gpus, err
}

// A GPU that fell off the bus before Watch subscribed (an XID is not
// replayed to a later subscriber, on hardware as in the simulator) is
// still found lost: NVML answers it GPU_IS_LOST. Every device of it is
// Unhealthy with ReasonGPULost and a NoExecute taint, stays published as
// last seen, and is refused at prepare. A GPU that NVML could not
// register for events is reported Unknown, and its devices carry the
// informational TaintUnmonitored taint (effect None).
func TestLostAndUnmonitoredGPUs(t *testing.T) {
	f := newFixture(t, WithRepublishDelay(0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := f.d.Inventory(ctx); err != nil { // published before the XID
		t.Fatal(err)
	}
	if err := f.sim.RaiseXID(0, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(
		nvmlsim.Fault{Op: nvmlsim.FaultRegisterEvents, GPU: 6},
	); err != nil {
		t.Fatal(err)
	}
	events := make(chan device.Event, 100)
	go func() { _ = f.d.Watch(ctx, events) }()
	first := nextEvent(t, events, "first report")
	var lost []string
	for _, r := range first.Health {
		if r.Health == device.Unhealthy {
			lost = append(lost, fmt.Sprintf("%s=%s:%s", r.Device.Device, r.Reason, r.TaintEffect))
		}
	}
	if got := strings.Join(lost, " "); got != "gpu-0=GPULost:NoExecute" {
		t.Errorf(
			"first report after XID 79 before the subscription: unhealthy %q, want "+
				"gpu-0=GPULost:NoExecute",
			got,
		)
	}
	err := f.d.PrepareClaim(ctx, claim("p"), []kit.AllocatedDevice{alloc("gpu-0")})
	if err == nil || !strings.Contains(err.Error(), "is lost") {
		t.Errorf("prepare on lost GPU 0: %v", err)
	}
	// Unmonitored GPU 6: republished with the taint, reported Unknown.
	for ev := nextEvent(t, events, "report"); ; ev = nextEvent(t, events, "report") {
		unknown := 0
		for _, r := range ev.Health {
			if r.Health == device.Unknown {
				unknown++
				if !strings.HasPrefix(r.Device.Device, "gpu-6") ||
					!strings.Contains(r.Message, "not monitored") {
					t.Errorf("Unknown report %+v, want only GPU 6's, not monitored", r)
				}
			}
		}
		if unknown > 0 {
			break
		}
	}
	inv, err := f.d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sl := range inv.ResourceSlices("node-1") {
		for _, d := range sl.Spec.Devices {
			tainted := len(d.Taints) == 1 && d.Taints[0].Key == TaintUnmonitored &&
				d.Taints[0].Effect == resourceapi.DeviceTaintEffectNone
			if on6 := strings.HasPrefix(d.Name, "gpu-6"); on6 != tainted {
				t.Errorf("device %s taints %+v", d.Name, d.Taints)
			}
			if d.Name == "gpu-0" {
				n++
			}
		}
	}
	if n != 1 {
		t.Errorf("lost GPU 0 published %d times, want once, as last seen", n)
	}
}

// An ignored XID (13, an application's fault) leaves the GPU healthy and
// republishes its devices with the informational TaintIgnoredXID taint,
// effect None, as NVIDIA's DRA driver does; an XID NVML reports on a GPU
// it cannot name is not dropped: every GPU is reported unhealthy with it.
func TestIgnoredAndUnnamedXIDs(t *testing.T) {
	f := newFixture(t, WithRepublishDelay(0))
	ctx := context.Background()
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	feed := func(evs ...nvml.HealthEvent) {
		t.Helper()
		ch := make(chan nvml.HealthEvent, len(evs))
		for _, ev := range evs {
			ch <- ev
		}
		close(ch)
		f.d.health.mu.Lock()
		f.d.health.gen++
		gen := f.d.health.gen
		f.d.health.running = true
		f.d.health.mu.Unlock()
		f.d.monitorLoop(ctx, ch, gen) // returns once ch is drained
	}
	now := time.Now().UTC()
	feed(nvml.HealthEvent{GPU: 3, XID: 13, GPUInstance: -1, ComputeInstance: -1, Time: now})
	if bad := unhealthy(device.Event{Health: f.d.reports(nil)}); len(bad) != 0 {
		t.Errorf("ignored XID 13 made devices unhealthy: %v", bad)
	}
	inv, err := f.d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range inv.ResourceSlices("node-1") {
		for _, d := range sl.Spec.Devices {
			tainted := len(d.Taints) == 1 && d.Taints[0].Key == TaintIgnoredXID &&
				d.Taints[0].Value == "XID13" &&
				d.Taints[0].Effect == resourceapi.DeviceTaintEffectNone
			if on3 := strings.HasPrefix(d.Name, "gpu-3"); on3 != tainted {
				t.Errorf(
					"device %s taints %+v, want %s=XID13:None on GPU 3's devices only",
					d.Name,
					d.Taints,
					TaintIgnoredXID,
				)
			}
		}
	}

	feed(nvml.HealthEvent{GPU: -1, XID: 48, GPUInstance: -1, ComputeInstance: -1, Time: now})
	reports := f.d.reports(nil)
	bad := unhealthy(device.Event{Health: reports})
	if len(bad) != len(reports) || len(bad) == 0 {
		t.Errorf(
			"XID 48 on a GPU NVML cannot name: unhealthy %v of %d devices, want all",
			bad,
			len(reports),
		)
	}
	for _, b := range bad {
		if !strings.HasSuffix(b, "=XID48") {
			t.Errorf("unhealthy %s, want reason XID48", b)
		}
	}
}
