package engine_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/alloc"
	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
	"github.com/drakit/drakit/mig"
)

// layoutSchemes are the schemes the layout proofs run on: NVIDIA's
// H100-80GB and H200 (package mig's catalog) and the instinct-like test
// scheme (card-wide modes).
func layoutSchemes(t testing.TB) []struct {
	name string
	s    *partition.Scheme
} {
	t.Helper()
	out := []struct {
		name string
		s    *partition.Scheme
	}{}
	for _, n := range []string{"H100-80GB", "H200-141GB"} {
		p, err := mig.Lookup(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, struct {
			name string
			s    *partition.Scheme
		}{n, p.Scheme()})
	}
	return append(out, struct {
		name string
		s    *partition.Scheme
	}{"instinct-like", instinctLike(t)})
}

// randomInUse is a random in-use layout: a random valid layout of s with
// a random subset of its partitions kept (nil a quarter of the time).
func randomInUse(rng *rand.Rand, layouts []partition.Layout) partition.Layout {
	if rng.Intn(4) == 0 {
		return nil
	}
	var out partition.Layout
	for _, in := range layouts[rng.Intn(len(layouts))] {
		if rng.Intn(3) > 0 {
			in.InUse = true
			out = append(out, in)
		}
	}
	return out
}

// randomDemand is a random demand over s's profiles, nil a quarter of
// the time, sometimes with whole cards.
func randomDemand(rng *rand.Rand, s *partition.Scheme) partition.Demand {
	if rng.Intn(4) == 0 {
		return nil
	}
	d := partition.Demand{}
	names := s.ProfileNames()
	for i := rng.Intn(4); i >= 0; i-- {
		d[names[rng.Intn(len(names))]] += 1 + rng.Intn(5)
	}
	if rng.Intn(5) == 0 {
		d[partition.WholeCard] = 1 + rng.Intn(2)
	}
	return d
}

// checkTogether checks that the devices named (published, allocated, in
// use: anything a scheduler could hold at once) form, per card, the
// whole card alone or a layout the scheme's Validate accepts.
func checkTogether(s *partition.Scheme, names []string) error {
	parts := map[int]partition.Layout{}
	whole := map[int]bool{}
	for _, n := range names {
		ref, err := s.ParseDeviceName(n)
		if err != nil {
			return err
		}
		if ref.Profile == "" {
			whole[ref.Card] = true
			continue
		}
		parts[ref.Card] = append(parts[ref.Card], partition.Instance{Profile: ref.Profile, Start: ref.Start})
	}
	for c, l := range parts {
		if whole[c] {
			return fmt.Errorf("card %d: whole card together with %v", c, l)
		}
		if err := s.Validate(l); err != nil {
			return fmt.Errorf("card %d: %w", c, err)
		}
	}
	return nil
}

// greedy allocates one-device claims that any device satisfies with the
// real allocator on the slices, the held devices allocated already,
// until it fails; it returns the devices allocated.
func greedy(t testing.TB, a *alloc.Allocator, sl []*resourceapi.ResourceSlice, held []string) []string {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	allocated := sets.New[structured.DeviceID]()
	for _, sl := range sl {
		for _, h := range held {
			allocated.Insert(structured.MakeDeviceID(testDriver, sl.Spec.Pool.Name, h))
		}
	}
	var got []string
	for {
		d, err := a.One(context.Background(), node, sl, allocated, "")
		if err != nil {
			t.Fatal(err)
		}
		if d == "" {
			return got
		}
		got = append(got, d)
		for _, sl := range sl {
			allocated.Insert(structured.MakeDeviceID(testDriver, sl.Spec.Pool.Name, d))
		}
	}
}

func modelOf(t testing.TB, s *partition.Scheme, cards int) partition.CounterModel {
	t.Helper()
	var cs []partition.Card
	for i := 0; i < cards; i++ {
		cs = append(cs, partition.Card{Index: i, Scheme: s})
	}
	m, err := partition.NewCounterModel(cs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func inUseNames(t testing.TB, s *partition.Scheme, cards []partition.LayoutCard) []string {
	t.Helper()
	var out []string
	for _, c := range cards {
		if c.WholeInUse {
			out = append(out, s.CardDeviceName(c.Index))
		}
		for _, in := range c.Layout {
			if in.InUse {
				n, err := s.DeviceName(c.Index, in.Profile, in.Start)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, n)
			}
		}
	}
	return out
}

// TestPlanLayoutsAreValid is guarantee 1 of the layout publication for
// random in-use sets and demands: every planned layout keeps the in-use
// partitions, is valid by the scheme's own rules, is the same when asked
// again, and the real allocator allocating greedily on its slice ends
// with devices that are valid together with the in-use ones.
func TestPlanLayoutsAreValid(t *testing.T) {
	a := alloc.New(testDriver, alloc.Features)
	for _, ts := range layoutSchemes(t) {
		t.Run(ts.name, func(t *testing.T) {
			s := ts.s
			layouts, err := s.Layouts()
			if err != nil {
				t.Fatal(err)
			}
			m := modelOf(t, s, 3)
			rng := rand.New(rand.NewSource(38))
			cases, allocated := 0, 0
			for iter := 0; iter < 150; iter++ {
				var node []partition.LayoutCard
				for i := 0; i < 3; i++ {
					c := partition.LayoutCard{Index: i, Scheme: s, Layout: randomInUse(rng, layouts)}
					if c.Layout == nil && rng.Intn(3) == 0 {
						c.WholeInUse = true
					}
					node = append(node, c)
				}
				demand := randomDemand(rng, s)
				got, err := partition.PlanLayouts(node, demand)
				if err != nil {
					t.Fatal(err)
				}
				again, err := partition.PlanLayouts(node, demand)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(got, again, cmp.Comparer(func(a, b *partition.Scheme) bool { return a == b })); diff != "" {
					t.Fatalf("not deterministic (-first +second):\n%s", diff)
				}
				for i, c := range got {
					if err := s.Validate(c.Layout); err != nil {
						t.Fatalf("case %d card %d: %v (in use %v, demand %v)", iter, i, err, node[i].Layout, demand)
					}
					for _, in := range node[i].Layout {
						if !slices.Contains(c.Layout, in) {
							t.Fatalf("case %d card %d: in-use %v dropped: %v", iter, i, in, c.Layout)
						}
					}
					if len(node[i].Layout) == 0 && demand == nil && len(c.Layout) > 0 {
						t.Errorf("case %d card %d: an unused card without demand is published partitioned: %v", iter, i, c.Layout)
					}
				}
				sl, err := m.LayoutSlices(testDriver, "a", "a", 1, partition.Published(got))
				if err != nil {
					t.Fatal(err)
				}
				if len(sl) != 1 || sl[0].Spec.Pool.ResourceSliceCount != 1 || len(sl[0].Spec.SharedCounters) > 0 {
					t.Fatalf("want one pool of one slice without counters, got %d slices", len(sl))
				}
				held := inUseNames(t, s, got)
				took := greedy(t, a, sl, held)
				if err := checkTogether(s, append(took, held...)); err != nil {
					t.Fatalf("case %d: the allocator allocated %v beside %v: %v", iter, took, held, err)
				}
				cases++
				allocated += len(took)
			}
			t.Logf("%d node states, %d devices allocated greedily, all valid", cases, allocated)
		})
	}
}

// publishSim drives a LayoutPublisher over random arrivals, departures
// and demand, with a scheduler that allocates from any version published
// within the last window (a stale view) when stale is true. At every
// step it checks the publication (guarantees 1 and 3): each version is
// valid with the in-use partitions, the allocator allocating greedily
// on it ends valid, and allocating greedily on the union of the versions
// published within the window ends valid. It returns the first error of
// the union check, and counts.
func publishSim(t *testing.T, s *partition.Scheme, seed int64, fence, window time.Duration, stale bool) (unionErr error, versions, unions int) {
	t.Helper()
	a := alloc.New(testDriver, alloc.Features)
	const cards = 3
	m := modelOf(t, s, cards)
	var cs []partition.Card
	for i := 0; i < cards; i++ {
		cs = append(cs, partition.Card{Index: i, Scheme: s})
	}
	pub, err := partition.NewLayoutPublisher(cs, partition.WithFence(fence))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed))
	now := time.Unix(0, 0)
	type published struct {
		at     time.Time
		slices []*resourceapi.ResourceSlice
	}
	var history []published
	use := map[string]bool{} // in-use device names
	var lastVersion int64
	for step := 0; step < 60; step++ {
		now = now.Add(time.Duration(50+rng.Intn(400)) * time.Millisecond)
		// Departures.
		for _, n := range slices.Sorted(mapsKeys(use)) {
			if rng.Intn(6) == 0 {
				delete(use, n)
			}
		}
		// Arrivals: the scheduler allocates from a version within the
		// window (the latest when not stale).
		if len(history) > 0 {
			for k := rng.Intn(3); k > 0; k-- {
				h := history[len(history)-1]
				if stale {
					var recent []published
					for _, p := range history {
						if now.Sub(p.at) <= window {
							recent = append(recent, p)
						}
					}
					if len(recent) > 0 {
						h = recent[rng.Intn(len(recent))]
					}
				}
				var devs []string
				for _, sl := range h.slices {
					for _, d := range sl.Spec.Devices {
						if !use[d.Name] {
							devs = append(devs, d.Name)
						}
					}
				}
				if len(devs) == 0 {
					continue
				}
				pick := devs[rng.Intn(len(devs))]
				if err := checkTogether(s, append(slices.Sorted(mapsKeys(use)), pick)); err != nil {
					if stale {
						t.Fatalf("step %d: a stale scheduler could allocate %s beside %v: %v", step, pick, use, err)
					}
					continue
				}
				use[pick] = true
			}
		}
		var cu []partition.CardUse
		for n := range use {
			ref, err := s.ParseDeviceName(n)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(cu, func(c partition.CardUse) bool { return c.Index == ref.Card })
			if i < 0 {
				cu = append(cu, partition.CardUse{Index: ref.Card})
				i = len(cu) - 1
			}
			if ref.Profile == "" {
				cu[i].Whole = true
			} else {
				cu[i].InUse = append(cu[i].InUse, partition.Instance{Profile: ref.Profile, Start: ref.Start})
			}
		}
		v, err := pub.Next(cu, randomDemand(rng, s), now)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		// Guarantee 1: the version with the in-use devices.
		for _, c := range v.Cards {
			if !c.Withheld {
				if err := s.Validate(c.Layout); err != nil {
					t.Fatalf("step %d card %d: %v", step, c.Index, err)
				}
			}
		}
		sl, err := m.LayoutSlices(testDriver, "a", "a", v.Version, v.Cards)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range sl[0].Spec.Devices {
			names = append(names, d.Name)
		}
		for n := range use {
			if !slices.Contains(names, n) {
				t.Fatalf("step %d: in-use %s not published: %v", step, n, names)
			}
		}
		held := slices.Sorted(mapsKeys(use))
		if took := greedy(t, a, sl, held); checkTogether(s, append(took, held...)) != nil {
			t.Fatalf("step %d: allocator on the version: %v", step, checkTogether(s, append(took, held...)))
		}
		if v.Version != lastVersion {
			history = append(history, published{at: now, slices: sl})
			lastVersion = v.Version
			versions++
		}
		// Guarantee 3: the union of the versions within the window.
		seen := map[string]bool{}
		union := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "union"}, Spec: sl[0].Spec}
		union.Spec.Devices = nil
		for _, p := range history {
			if now.Sub(p.at) > window {
				continue
			}
			for _, d := range p.slices[0].Spec.Devices {
				if !seen[d.Name] {
					seen[d.Name] = true
					union.Spec.Devices = append(union.Spec.Devices, d)
				}
			}
		}
		unions++
		took := greedy(t, a, []*resourceapi.ResourceSlice{union}, held)
		if err := checkTogether(s, append(took, held...)); err != nil && unionErr == nil {
			unionErr = fmt.Errorf("step %d: the allocator allocated %v from the union of the versions of the last %s: %w", step, took, window, err)
		}
	}
	return unionErr, versions, unions
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestLayoutPublisherFence is guarantee 3: with the default fence, a
// scheduler that allocates from any version published in the last fence
// never gets a device that overlaps one in use, and the real allocator
// on the union of the versions of the last fence never allocates two
// devices that are invalid together.
func TestLayoutPublisherFence(t *testing.T) {
	for _, ts := range layoutSchemes(t) {
		t.Run(ts.name, func(t *testing.T) {
			versions, unions := 0, 0
			for seed := int64(1); seed <= 6; seed++ {
				err, v, u := publishSim(t, ts.s, seed, partition.DefaultFence, partition.DefaultFence, true)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				versions += v
				unions += u
			}
			t.Logf("%d versions published, %d unions of a fence window checked with the allocator", versions, unions)
		})
	}
}

// TestLayoutFenceIsNeeded is the control of TestLayoutPublisherFence:
// without the fence (WithFence(0)) a re-layout publishes overlapping
// devices at once, and the allocator on the union of the versions a
// scheduler up to a second behind could see allocates devices that are
// invalid together.
func TestLayoutFenceIsNeeded(t *testing.T) {
	for _, ts := range layoutSchemes(t) {
		t.Run(ts.name, func(t *testing.T) {
			for seed := int64(1); seed <= 3; seed++ {
				err, _, _ := publishSim(t, ts.s, seed, 0, partition.DefaultFence, false)
				if err != nil {
					t.Logf("without the fence, seed %d: %v", seed, err)
					return
				}
			}
			t.Error("without the fence no union of versions was invalid: the check proves nothing")
		})
	}
}

// TestLayoutPublisherRetireThenReuse follows one re-layout on one H100:
// the free whole GPU is retired first, the partitions over it come only
// after the fence, and a retired device allocated meanwhile is kept and
// laid out around.
func TestLayoutPublisherRetireThenReuse(t *testing.T) {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Scheme()
	pub, err := partition.NewLayoutPublisher([]partition.Card{{Index: 0, Scheme: s}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	v, err := pub.Next(nil, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Cards[0]; c.Withheld || len(c.Layout) != 0 || v.Version != 1 {
		t.Fatalf("an idle GPU without demand: want the whole GPU, version 1, got %+v", v)
	}
	demand := partition.Demand{"1g.10gb": 2}
	v, err = pub.Next(nil, demand, t0.Add(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Cards[0]; !c.Withheld || v.HeldBack == 0 || !v.Retry.After(t0.Add(1100*time.Millisecond)) {
		t.Fatalf("re-layout: want the whole GPU retired and its partitions held back until after 1.1 s, got %+v", v)
	}
	// Within the fence nothing overlapping appears.
	if v, err = pub.Next(nil, demand, t0.Add(time.Second)); err != nil || !v.Cards[0].Withheld {
		t.Fatalf("within the fence: %+v, %v", v, err)
	}
	v, err = pub.Next(nil, demand, v.Retry)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Cards[0]; c.Withheld || v.HeldBack != 0 || len(c.Layout) < 2 {
		t.Fatalf("after the fence: want the layout, got %+v", v)
	}
	got := v.Cards[0].Layout.String()
	if err := s.Validate(v.Cards[0].Layout); err != nil {
		t.Fatal(err)
	}
	t.Logf("layout for two 1g.10gb: %s", got)

	// A stale allocation of a retired device: the whole GPU goes back to
	// whole once nothing is in use; a scheduler allocates it before the
	// fence ends; it is kept.
	pub2, _ := partition.NewLayoutPublisher([]partition.Card{{Index: 0, Scheme: s}})
	if _, err := pub2.Next(nil, nil, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := pub2.Next(nil, demand, t0.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	v, err = pub2.Next([]partition.CardUse{{Index: 0, Whole: true}}, demand, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Cards[0]; c.Withheld || len(c.Layout) != 0 || !c.WholeInUse {
		t.Fatalf("a retired whole GPU allocated meanwhile must stay published in use, got %+v", c)
	}
}

// TestLayoutPoolsSplit checks the cut into pools: 18 H200s (7 devices
// each at most, 126) are one pool of one slice; 20 are two pools, cut by
// the worst case, whatever the layouts.
func TestLayoutPoolsSplit(t *testing.T) {
	p, err := mig.Lookup("H200-141GB")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Scheme()
	for _, tc := range []struct{ cards, pools int }{{18, 1}, {20, 2}} {
		m := modelOf(t, s, tc.cards)
		var node []partition.LayoutCard
		for i := 0; i < tc.cards; i++ {
			node = append(node, partition.LayoutCard{Index: i, Scheme: s})
		}
		sl, err := m.LayoutSlices(testDriver, "node-a", "node-a", 1, partition.Published(node))
		if err != nil {
			t.Fatal(err)
		}
		pools, err := m.LayoutPools("node-a", partition.Published(node))
		if err != nil {
			t.Fatal(err)
		}
		if len(sl) != tc.pools || len(pools) != tc.pools {
			t.Fatalf("%d cards: want %d pools, got %d slices, %d pools", tc.cards, tc.pools, len(sl), len(pools))
		}
		for _, x := range sl {
			if x.Spec.Pool.ResourceSliceCount != 1 || len(x.Spec.Devices) > partition.LayoutMaxDevices {
				t.Errorf("%s: %d slices in pool, %d devices", x.Name, x.Spec.Pool.ResourceSliceCount, len(x.Spec.Devices))
			}
			for _, d := range x.Spec.Devices {
				if len(d.ConsumesCounters) > 0 {
					t.Errorf("%s consumes counters", d.Name)
				}
			}
		}
	}
}

// TestLayoutPublisherRestore: a publisher told what an earlier process
// published keeps it (a restart changes no device for nothing, where a
// fresh publisher lays the card out afresh) and fences what it drops (no
// device of its next version overlaps one of the earlier version until
// the fence has passed).
func TestLayoutPublisherRestore(t *testing.T) {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Scheme()
	cards := []partition.Card{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}}
	inUse := []partition.CardUse{{Index: 0, InUse: partition.Layout{{Profile: "1g.10gb", Start: 0}}}}
	t0 := time.Unix(0, 0)
	before, err := partition.NewLayoutPublisher(cards)
	if err != nil {
		t.Fatal(err)
	}
	old, err := before.Next(inUse, partition.Demand{"1g.10gb": 4}, t0)
	if err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Minute)

	// The restart: the demand is gone meanwhile.
	restored, err := partition.NewLayoutPublisher(cards)
	if err != nil {
		t.Fatal(err)
	}
	if err := restored.Restore(old.Cards, t1); err != nil {
		t.Fatal(err)
	}
	got, err := restored.Next(inUse, nil, t1)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := partition.NewLayoutPublisher(cards)
	if err != nil {
		t.Fatal(err)
	}
	anew, err := fresh.Next(inUse, nil, t1)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := old.Cards[0].Layout.String(), got.Cards[0].Layout.String(); a != b {
		t.Errorf("restored publisher changed GPU 0 from %s to %s with nothing asked", a, b)
	}
	t.Logf("before: %s; restored: %s; fresh: %s", old.Cards[0].Layout, got.Cards[0].Layout, anew.Cards[0].Layout)
	if old.Cards[0].Layout.String() == anew.Cards[0].Layout.String() {
		t.Errorf("a fresh publisher keeps %s too: the test shows nothing", anew.Cards[0].Layout)
	}

	// A demand that needs the space: what replaces the old devices waits
	// for the fence.
	v, err := restored.Next(inUse, partition.Demand{"3g.40gb": 1, "4g.40gb": 1}, t1.Add(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Cards {
		union := slices.Clone(old.Cards[c.Index].Layout)
		for _, in := range c.Layout {
			if !slices.ContainsFunc(union, func(x partition.Instance) bool { return x.Profile == in.Profile && x.Start == in.Start }) {
				union = append(union, partition.Instance{Profile: in.Profile, Start: in.Start})
			}
		}
		wholeBoth := len(old.Cards[c.Index].Layout) == 0 && !old.Cards[c.Index].Withheld && len(c.Layout) > 0
		if err := s.Validate(union); err != nil || wholeBoth {
			t.Errorf("GPU %d: the version after the restart (%s) overlaps the earlier one (%s) within the fence: %v", c.Index, c.Layout, old.Cards[c.Index].Layout, err)
		}
	}
	if v.HeldBack == 0 {
		t.Errorf("nothing held back for the new demand: %+v", v.Cards)
	}

	// Misuse.
	if err := restored.Restore(old.Cards, t1); err == nil {
		t.Error("Restore after Next did not fail")
	}
	bad, _ := partition.NewLayoutPublisher(cards)
	if err := bad.Restore(partition.Published([]partition.LayoutCard{{Index: 5}}), t1); err == nil {
		t.Error("Restore of an unknown card did not fail")
	}
	if err := bad.Restore(partition.Published([]partition.LayoutCard{{Index: 0, Layout: partition.Layout{{Profile: "4g.40gb", Start: 0}, {Profile: "3g.40gb", Start: 0}}}}), t1); err == nil {
		t.Error("Restore of an overlapping layout did not fail")
	}
}

// TestLayoutPoolNames: the names LayoutPoolNames gives before any layout
// are those of the pools LayoutPools makes, for a node that fits one
// pool and one cut into groups.
func TestLayoutPoolNames(t *testing.T) {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{8, 20} {
		var cards []partition.Card
		var lc []partition.LayoutCard
		for i := range n {
			cards = append(cards, partition.Card{Index: i, Scheme: p.Scheme()})
			lc = append(lc, partition.LayoutCard{Index: i, Scheme: p.Scheme()})
		}
		m, err := partition.NewCounterModel(cards)
		if err != nil {
			t.Fatal(err)
		}
		pools, err := m.LayoutPools("node", partition.Published(lc))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, pl := range pools {
			want = append(want, pl.Name)
		}
		got, err := partition.LayoutPoolNames("node", lc)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%d cards: LayoutPoolNames = %v, %v; LayoutPools made %v", n, got, err, want)
		}
	}
}
