package bench

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/mig"
)

func TestSimulateLayoutDeterministic(t *testing.T) {
	ctx := context.Background()
	p := mustLookup(t, "H100-80GB")
	lp := DefaultLayoutParams()
	for _, sh := range []Shape{Counters, LayoutShape} {
		a, err := SimulateLayout(ctx, p, 1.0, sh, 200, 7, lp)
		if err != nil {
			t.Fatal(err)
		}
		b, err := SimulateLayout(ctx, p, 1.0, sh, 200, 7, lp)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(a, b); d != "" {
			t.Errorf("%s: same seed, different results (-first +second):\n%s", sh, d)
		}
		if len(a.Placed) == 0 {
			t.Errorf("%s: nothing placed", sh)
		}
	}
}

// TestSimulateLayoutNeverOverlaps runs both shapes with the simulation's
// own checks on, at an overload, and replays every placement: at every
// placement, each GPU's running instances must be a valid layout.
func TestSimulateLayoutNeverOverlaps(t *testing.T) {
	ctx := context.Background()
	lp := DefaultLayoutParams()
	lp.Check = true
	for _, name := range []string{"H100-80GB", "H200-141GB"} {
		p := mustLookup(t, name)
		for _, sh := range []Shape{Counters, LayoutShape} {
			r, err := SimulateLayout(ctx, p, 1.2, sh, 300, 3, lp)
			if err != nil {
				t.Fatalf("%s %s: %v", name, sh, err)
			}
			if r.Checks != len(r.Placed) || r.Checks == 0 {
				t.Errorf("%s %s: %d checks for %d placements", name, sh, r.Checks, len(r.Placed))
			}
			replayValid(t, p, name+" "+string(sh), r.Placed)
			if sh == LayoutShape && r.Versions < 2 {
				t.Errorf("%s: %d versions published, want re-layouts", name, r.Versions)
			}
		}
	}
}

// replayValid replays placements in time order (a departure before a
// placement at the same instant) and validates each GPU at every
// placement.
func replayValid(t *testing.T, p *mig.Product, what string, placed []Placed) {
	t.Helper()
	type ev struct {
		t      float64
		arrive bool
		pl     Placed
	}
	var evs []ev
	for _, pl := range placed {
		evs = append(evs, ev{pl.At, true, pl}, ev{pl.Departs, false, pl})
	}
	sort.SliceStable(evs, func(a, b int) bool {
		if evs[a].t != evs[b].t {
			return evs[a].t < evs[b].t
		}
		return !evs[a].arrive && evs[b].arrive
	})
	gpus := map[int]mig.Layout{}
	for _, e := range evs {
		in := mig.Instance{Profile: e.pl.Profile, Start: e.pl.Start, InUse: true}
		if !e.arrive {
			l := gpus[e.pl.GPU]
			for k, x := range l {
				if x == in {
					gpus[e.pl.GPU] = append(l[:k:k], l[k+1:]...)
					break
				}
			}
			continue
		}
		gpus[e.pl.GPU] = append(gpus[e.pl.GPU], in)
		if err := p.Validate(gpus[e.pl.GPU]); err != nil {
			t.Fatalf("%s: pod %d at %.3fs on GPU %d: %v", what, e.pl.Pod, e.t, e.pl.GPU, err)
		}
	}
}

// At a tiny load nothing waits for space: today's shape places every pod
// at its first attempt, and the layout places every pod too (some after
// waiting for a layout).
func TestSimulateLayoutTinyLoad(t *testing.T) {
	ctx := context.Background()
	p := mustLookup(t, "H100-80GB")
	lp := DefaultLayoutParams()
	c, err := SimulateLayout(ctx, p, 0.05, Counters, 200, 1, lp)
	if err != nil {
		t.Fatal(err)
	}
	if c.Accepted != 1 || c.Waited != 0 {
		t.Errorf("counters at load 0.05: acceptance %v, waited %v; want 1 and 0", c.Accepted, c.Waited)
	}
	l, err := SimulateLayout(ctx, p, 0.05, LayoutShape, 200, 1, lp)
	if err != nil {
		t.Fatal(err)
	}
	if l.Accepted != 1 || len(l.SpaceWaits) != 0 {
		t.Errorf("layout at load 0.05: acceptance %v, %d waited for space; want 1 and 0", l.Accepted, len(l.SpaceWaits))
	}
	if l.Pods != c.Pods {
		t.Errorf("layout counted %d pods, counters %d: the arrivals differ", l.Pods, c.Pods)
	}
}

func TestSimulateBurst(t *testing.T) {
	ctx := context.Background()
	p := mustLookup(t, "H100-80GB")
	lp := DefaultLayoutParams()
	c, err := SimulateBurst(ctx, p, "1g.10gb", 56, Counters, lp)
	if err != nil {
		t.Fatal(err)
	}
	// Every pod fits at its first attempt: 56 attempts back to back.
	if want := 56 * lp.AttemptTime[Counters].Seconds(); c.Placed != 56 || c.Last < want-1e-9 || c.Last > want+1e-9 {
		t.Errorf("counters: %d placed, last at %.3fs; want 56 at %.3fs", c.Placed, c.Last, want)
	}
	l, err := SimulateBurst(ctx, p, "1g.10gb", 56, LayoutShape, lp)
	if err != nil {
		t.Fatal(err)
	}
	if l.Placed != 56 || l.Last <= lp.Fence.Seconds() {
		t.Errorf("layout: %d placed, last at %.3fs; want 56, after the fence", l.Placed, l.Last)
	}
}

func TestLayoutBenchTable(t *testing.T) {
	cfg := LayoutConfig()
	cfg.Seeds, cfg.Arrivals, cfg.Loads = 2, 150, []float64{0.8}
	var b bytes.Buffer
	if err := LayoutBench(context.Background(), cfg, DefaultLayoutParams(), &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"layout - counters", "H100-80GB", "Burst", "ratio"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	t.Log("\n" + b.String())
}
