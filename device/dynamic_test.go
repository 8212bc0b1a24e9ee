package device

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// dynamicNode is a card whose partitions come and go: counter set
// "card-0" in pool "node", the card whole and its partitions consuming
// it.
type dynamicNode struct {
	mu    sync.Mutex
	parts []string
}

func (n *dynamicNode) set(parts ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.parts = parts
}

func (n *dynamicNode) inventory(context.Context) (*Inventory, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	one := map[string]resource.Quantity{"units": resource.MustParse("1")}
	p := Pool{Name: "node", CounterSets: []CounterSet{{Name: "card-0", Counters: map[string]resource.Quantity{"units": resource.MustParse("4")}}}}
	p.Devices = append(p.Devices, New("card-0").ConsumesCounters("card-0", map[string]resource.Quantity{"units": resource.MustParse("4")}))
	for _, name := range n.parts {
		p.Devices = append(p.Devices, New(name).ConsumesCounters("card-0", one))
	}
	p.Devices = append(p.Devices, New("other")) // consumes nothing
	return &Inventory{Driver: "x.example.com", Pools: []Pool{p}}, nil
}

// health renders a health event as "device=Health(reason)" sorted.
func health(ev Event) string {
	var out []string
	for _, r := range ev.Health {
		s := r.Device.Device + "=" + string(r.Health)
		if r.Reason != "" {
			s += "(" + r.Reason + ")"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func report(dev string, h Health, reason string, at time.Time) HealthReport {
	return HealthReport{Device: DeviceID{Pool: "node", Device: dev}, Health: h, Reason: reason, Time: at}
}

// A card's health applies to every partition of it, those made later
// included; a partition's own report applies while it exists; a
// partition made again is judged afresh; a report on a device not in the
// inventory is dropped.
func TestDynamicDiscoverer(t *testing.T) {
	n := &dynamicNode{}
	n.set("p0")
	src := make(chan []HealthReport)
	d, err := NewDynamicDiscoverer(n.inventory, HealthChannel(src))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan Event)
	done := make(chan error, 1)
	go func() { done <- d.Watch(ctx, events) }()
	next := func() Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(time.Minute):
			t.Fatal("no event within a minute")
			return Event{}
		}
	}
	expect := func(what, want string) {
		t.Helper()
		ev := next()
		if ev.Type != EventHealth {
			t.Fatalf("%s: %s event, want health", what, ev.Type)
		}
		if got := health(ev); got != want {
			t.Errorf("%s:\n got %s\nwant %s", what, got, want)
		}
	}
	changed := func(what string, parts ...string) {
		t.Helper()
		n.set(parts...)
		d.Changed()
		ev := next()
		if ev.Type != EventInventoryChanged || ev.Inventory == nil {
			t.Fatalf("%s: %+v, want the new inventory", what, ev)
		}
		var got []string
		for _, dev := range ev.Inventory.Pools[0].Devices {
			got = append(got, dev.Name())
		}
		if want := append(append([]string{"card-0"}, parts...), "other"); !slices.Equal(got, want) {
			t.Errorf("%s: inventory %v, want %v", what, got, want)
		}
	}
	expect("first", "card-0=Unknown(NotReported) other=Unknown(NotReported) p0=Unknown(NotReported)")
	t0 := time.Now()
	src <- []HealthReport{report("card-0", Unhealthy, "Lost", t0), report("gone", Unhealthy, "X", t0)}
	expect("the card lost", "card-0=Unhealthy(Lost) p0=Unhealthy(Lost)")
	changed("a partition made on the lost card", "p0", "p1")
	expect("after the change", "card-0=Unhealthy(Lost) other=Unknown(NotReported) p0=Unhealthy(Lost) p1=Unhealthy(Lost)")
	src <- []HealthReport{report("p1", Healthy, "", t0.Add(time.Second)), report("other", Healthy, "", time.Time{})}
	expect("a newer report on p1", "card-0=Unhealthy(Lost) other=Healthy p0=Unhealthy(Lost) p1=Healthy")
	changed("p1 destroyed", "p0")
	expect("after p1 went", "card-0=Unhealthy(Lost) other=Healthy p0=Unhealthy(Lost)")
	changed("p1 made again", "p0", "p1")
	expect("p1 made again", "card-0=Unhealthy(Lost) other=Healthy p0=Unhealthy(Lost) p1=Unhealthy(Lost)")
	src <- []HealthReport{report("card-0", Healthy, "", t0.Add(2*time.Second))}
	expect("the card recovered", "card-0=Healthy other=Healthy p0=Healthy p1=Healthy")
	close(src)
	expect("the source closed", "card-0=Unknown(HealthSourceClosed) other=Unknown(HealthSourceClosed) p0=Unknown(HealthSourceClosed) p1=Unknown(HealthSourceClosed)")
	changed("a change after the source closed", "p2")
	expect("after it", "card-0=Unknown(NotReported) other=Unknown(NotReported) p2=Unknown(NotReported)")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch after its context ended: %v", err)
	}
}

// A failing poll makes every device Unknown; a failing inventory ends
// Watch with an error (the runtime restarts it).
func TestDynamicDiscovererFailures(t *testing.T) {
	n := &dynamicNode{}
	polls := 0
	d, err := NewDynamicDiscoverer(n.inventory, PollHealth(time.Hour, func(context.Context) ([]HealthReport, error) {
		polls++
		if polls == 1 {
			return []HealthReport{report("card-0", Healthy, "", time.Time{})}, nil
		}
		return nil, errors.New("monitor is down")
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan Event, 10)
	go func() { _ = d.Watch(ctx, events) }()
	<-events // not reported yet
	if got := health(<-events); got != "card-0=Healthy" {
		t.Errorf("first poll: %s", got)
	}
	if _, err := NewDynamicDiscoverer(nil, HealthChannel(make(chan []HealthReport))); err == nil {
		t.Error("no inventory function accepted")
	}
	if _, err := NewDynamicDiscoverer(n.inventory, HealthSource{}); err == nil {
		t.Error("no health source accepted")
	}
	bad, _ := NewDynamicDiscoverer(func(context.Context) (*Inventory, error) { return nil, fmt.Errorf("card unreadable") }, HealthChannel(make(chan []HealthReport)))
	if err := bad.Watch(ctx, events); err == nil || !strings.Contains(err.Error(), "card unreadable") {
		t.Errorf("Watch with an inventory that fails: %v", err)
	}
}

// TestDynamicDiscovererConcurrent: Changed and Inventory are called from
// many goroutines while Watch runs and the source reports (as the
// runtime and a partition lifecycle do; run it with -race). Changed
// never blocks, and after the last change Watch sends the inventory of
// the moment.
func TestDynamicDiscovererConcurrent(t *testing.T) {
	n := &dynamicNode{}
	src := make(chan []HealthReport)
	d, err := NewDynamicDiscoverer(n.inventory, HealthChannel(src))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan Event)
	done := make(chan error, 1)
	go func() { done <- d.Watch(ctx, events) }()
	var mu sync.Mutex
	var last *Inventory // the last inventory Watch sent
	received := make(chan struct{})
	go func() {
		defer close(received)
		for ev := range events {
			if ev.Type == EventInventoryChanged {
				mu.Lock()
				last = ev.Inventory
				mu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				n.set(fmt.Sprintf("p%d-%d", w, i))
				d.Changed()
				if _, err := d.Inventory(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			at := time.Now()
			src <- []HealthReport{
				report("card-0", Healthy, "", at),
				report(fmt.Sprint("p0-", i), Unhealthy, "X", at),
			}
		}
	})
	wg.Wait()
	n.set("final")
	d.Changed()
	deadline := time.After(time.Minute)
	for {
		mu.Lock()
		inv := last
		mu.Unlock()
		if inv != nil && len(inv.Pools[0].Devices) == 3 && inv.Pools[0].Devices[1].Name() == "final" {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("no inventory with the last change within a minute; last sent: %+v", inv)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch after its context ended: %v", err)
	}
	close(events)
	<-received
}
