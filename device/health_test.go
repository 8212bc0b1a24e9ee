package device_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drakit/drakit/device"
)

// cards is a pool of two cards, each usable whole or as two halves
// through the card's counter set, and one device without counters.
func cards() *device.Inventory {
	mem := map[string]resource.Quantity{"mem": resource.MustParse("16Gi")}
	half := map[string]resource.Quantity{"mem": resource.MustParse("8Gi")}
	p := device.Pool{Name: "node"}
	for _, c := range []string{"card-0", "card-1"} {
		p.CounterSets = append(p.CounterSets, device.CounterSet{Name: c, Counters: mem})
		p.Devices = append(p.Devices,
			device.New(c+"-a").ConsumesCounters(c, half),
			device.New(c+"-b").ConsumesCounters(c, half),
			device.New(c).ConsumesCounters(c, mem))
	}
	p.Devices = append(p.Devices, device.New("plain"))
	return &device.Inventory{Driver: "fpga.example.com", Pools: []device.Pool{p}}
}

// brief is what a test compares of a report.
type brief struct {
	Device, Health, Reason string
}

func briefs(reports []device.HealthReport) []brief {
	var out []brief
	for _, r := range reports {
		out = append(out, brief{r.Device.Device, string(r.Health), r.Reason})
	}
	slices.SortFunc(out, func(a, b brief) int { return strings.Compare(a.Device, b.Device) })
	return out
}

// next receives one event or fails after a minute.
func next(t *testing.T, events <-chan device.Event) device.Event {
	t.Helper()
	select {
	case e := <-events:
		if e.Type != device.EventHealth {
			t.Fatalf("event %s, want Health", e.Type)
		}
		return e
	case <-time.After(time.Minute):
		t.Fatal("no event")
	}
	return device.Event{}
}

func watch(t *testing.T, h *device.HealthDiscoverer) (<-chan device.Event, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan device.Event)
	done := make(chan error, 1)
	go func() { done <- h.Watch(ctx, events) }()
	return events, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}
}

func id(name string) device.DeviceID { return device.DeviceID{Pool: "node", Device: name} }

func allUnknown(reason string) []brief {
	var out []brief
	for _, n := range []string{"card-0", "card-0-a", "card-0-b", "card-1", "card-1-a", "card-1-b", "plain"} {
		out = append(out, brief{n, "Unknown", reason})
	}
	return out
}

func TestHealthDiscovererPoll(t *testing.T) {
	observed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	polls := make(chan []device.HealthReport, 3)
	polls <- []device.HealthReport{
		{Device: id("card-0"), Health: device.Unhealthy, Reason: "Overheat", Time: observed},
		{Device: id("card-1-a"), Health: device.Healthy},
		{Device: id("no-such-card"), Health: device.Healthy},
	}
	h, err := device.NewHealthDiscoverer(cards(), device.PollHealth(time.Millisecond, func(ctx context.Context) ([]device.HealthReport, error) {
		select {
		case r := <-polls:
			return r, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	events, stop := watch(t, h)
	if diff := cmp.Diff(allUnknown(device.ReasonNotReported), briefs(next(t, events).Health)); diff != "" {
		t.Errorf("first event (-want +got):\n%s", diff)
	}
	e := next(t, events)
	want := []brief{{"card-0", "Unhealthy", "Overheat"}, {"card-0-a", "Unhealthy", "Overheat"}, {"card-0-b", "Unhealthy", "Overheat"}, {"card-1-a", "Healthy", ""}}
	if diff := cmp.Diff(want, briefs(e.Health)); diff != "" {
		t.Errorf("card report (-want +got):\n%s", diff)
	}
	for _, r := range e.Health {
		switch {
		case r.Device.Device != "card-1-a" && !r.Time.Equal(observed):
			t.Errorf("%s: time %v, want the source's %v", r.Device, r.Time, observed)
		case r.Time.IsZero():
			t.Errorf("%s: no time", r.Device)
		}
	}
	stop()

	// Watching again: only devices never reported on are Unknown.
	events, stop = watch(t, h)
	want = []brief{{"card-1", "Unknown", device.ReasonNotReported}, {"card-1-b", "Unknown", device.ReasonNotReported}, {"plain", "Unknown", device.ReasonNotReported}}
	if diff := cmp.Diff(want, briefs(next(t, events).Health)); diff != "" {
		t.Errorf("first event of a second watch (-want +got):\n%s", diff)
	}
	stop()
}

func TestHealthDiscovererPollFails(t *testing.T) {
	h, err := device.NewHealthDiscoverer(cards(), device.PollHealth(time.Hour, func(context.Context) ([]device.HealthReport, error) {
		return nil, errors.New("monitor unreachable")
	}))
	if err != nil {
		t.Fatal(err)
	}
	events, stop := watch(t, h)
	defer stop()
	next(t, events) // not reported yet
	e := next(t, events)
	if diff := cmp.Diff(allUnknown(device.ReasonHealthCheckFailed), briefs(e.Health)); diff != "" {
		t.Errorf("after a failed poll (-want +got):\n%s", diff)
	}
	if e.Health[0].Message != "monitor unreachable" {
		t.Errorf("message %q, want the poll's error", e.Health[0].Message)
	}
}

func TestHealthDiscovererChannel(t *testing.T) {
	ch := make(chan []device.HealthReport)
	h, err := device.NewHealthDiscoverer(cards(), device.HealthChannel(ch))
	if err != nil {
		t.Fatal(err)
	}
	events, stop := watch(t, h)
	defer stop()
	next(t, events)
	before := time.Now()
	ch <- []device.HealthReport{{Device: id("card-1"), Health: device.Unhealthy, Reason: "Xid"}}
	e := next(t, events)
	want := []brief{{"card-1", "Unhealthy", "Xid"}, {"card-1-a", "Unhealthy", "Xid"}, {"card-1-b", "Unhealthy", "Xid"}}
	if diff := cmp.Diff(want, briefs(e.Health)); diff != "" {
		t.Errorf("card report (-want +got):\n%s", diff)
	}
	if r := e.Health[0]; r.Time.Before(before) {
		t.Errorf("report without time got %v, want the time it was received (after %v)", r.Time, before)
	}
	close(ch)
	if diff := cmp.Diff(allUnknown(device.ReasonHealthSourceClosed), briefs(next(t, events).Health)); diff != "" {
		t.Errorf("after the channel closed (-want +got):\n%s", diff)
	}
}

func TestNewHealthDiscovererErrors(t *testing.T) {
	poll := func(context.Context) ([]device.HealthReport, error) { return nil, nil }
	for name, tc := range map[string]struct {
		inv *device.Inventory
		src device.HealthSource
	}{
		"nil inventory": {nil, device.PollHealth(time.Second, poll)},
		"no source":     {cards(), device.HealthSource{}},
		"zero interval": {cards(), device.PollHealth(0, poll)},
		"nil function":  {cards(), device.PollHealth(time.Second, nil)},
		"nil channel":   {cards(), device.HealthChannel(nil)},
	} {
		if _, err := device.NewHealthDiscoverer(tc.inv, tc.src); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestHealthDiscovererReaffirms: each batch of a live source re-sends the
// devices it leaves out with their last health as of the batch (an empty
// batch is a heartbeat), so their reports stay fresh only while the
// source sends; devices never reported are not vouched for.
func TestHealthDiscovererReaffirms(t *testing.T) {
	ch := make(chan []device.HealthReport)
	h, err := device.NewHealthDiscoverer(cards(), device.HealthChannel(ch))
	if err != nil {
		t.Fatal(err)
	}
	events, stop := watch(t, h)
	defer stop()
	next(t, events) // NotReported
	observed := time.Now().Add(-time.Hour)
	ch <- []device.HealthReport{{Device: id("plain"), Health: device.Healthy, Time: observed}}
	if diff := cmp.Diff([]brief{{"plain", "Healthy", ""}}, briefs(next(t, events).Health)); diff != "" {
		t.Errorf("first batch (-want +got):\n%s", diff)
	}
	before := time.Now()
	ch <- nil // heartbeat
	e := next(t, events)
	if diff := cmp.Diff([]brief{{"plain", "Healthy", ""}}, briefs(e.Health)); diff != "" {
		t.Errorf("heartbeat (-want +got):\n%s", diff)
	}
	if e.Health[0].Time.Before(before) {
		t.Errorf("heartbeat re-sent plain as of %v, want the heartbeat's time (after %v)", e.Health[0].Time, before)
	}
	ch <- []device.HealthReport{{Device: id("card-0"), Health: device.Unhealthy, Reason: "Xid"}}
	want := []brief{{"card-0", "Unhealthy", "Xid"}, {"card-0-a", "Unhealthy", "Xid"}, {"card-0-b", "Unhealthy", "Xid"}, {"plain", "Healthy", ""}}
	if diff := cmp.Diff(want, briefs(next(t, events).Health)); diff != "" {
		t.Errorf("batch on card-0 (-want +got):\n%s", diff)
	}
}
