package engine_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/alloc"
	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

var testSchemes = []struct {
	name   string
	scheme func(testing.TB) *partition.Scheme
}{
	{"instinct-like", instinctLike},
	{"tile-4", tiles},
	{"core-6", cores},
}

// placements lists every profile x placement of s as an instance.
func placements(s *partition.Scheme) []partition.Instance {
	var out []partition.Instance
	for _, pr := range s.Profiles {
		for _, pl := range pr.Placements {
			out = append(out, partition.Instance{Profile: pr.Name, Start: pl.Start})
		}
	}
	return out
}

func score(t testing.TB, s *partition.Scheme, l partition.Layout) int {
	t.Helper()
	v, err := s.Score(l)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func with(l partition.Layout, in partition.Instance) partition.Layout {
	return append(slices.Clone(l), in)
}

// TestFreeCardBonusDominates checks the scoring contract on the test
// schemes: placing any partition on a free card loses more score than
// any placement on a partly used card, so free cards are broken last.
func TestFreeCardBonusDominates(t *testing.T) {
	for _, ts := range testSchemes {
		t.Run(ts.name, func(t *testing.T) {
			s := ts.scheme(t)
			empty := score(t, s, nil)
			minEmptyLoss := -1
			for _, in := range placements(s) {
				if l := empty - score(t, s, partition.Layout{in}); minEmptyLoss < 0 || l < minEmptyLoss {
					minEmptyLoss = l
				}
			}
			layouts, err := s.Layouts()
			if err != nil {
				t.Fatal(err)
			}
			maxPartialLoss := 0
			for _, l := range layouts {
				before := score(t, s, l)
				for _, in := range placements(s) {
					if after := with(l, in); s.Validate(after) == nil {
						maxPartialLoss = max(maxPartialLoss, before-score(t, s, after))
					}
				}
			}
			if maxPartialLoss >= minEmptyLoss {
				t.Errorf("a partly used card can lose %d, a free card only %d", maxPartialLoss, minEmptyLoss)
			}
		})
	}
}

// placedUnits is the placed units a layout of s covers.
func placedUnits(t testing.TB, s *partition.Scheme, l partition.Layout) int {
	n := 0
	for _, in := range l {
		pr, err := s.Profile(in.Profile)
		if err != nil {
			t.Fatal(err)
		}
		if s.Memory.Placed {
			n += pr.Memory
		}
		if s.Compute.Placed {
			n += pr.Compute
		}
	}
	return n
}

// TestPreferenceIsAllocatorChoice checks on random node states of the
// test schemes that the real allocator, over slices in the preference
// order, picks for every profile the device the planner's rules choose,
// computed here from the scheme's score alone: the least loss, then the
// card with the most partitions, then the fewest placed units left free,
// then card order, then start.
func TestPreferenceIsAllocatorChoice(t *testing.T) {
	ctx := context.Background()
	a := alloc.New(testDriver, alloc.Features)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	for _, ts := range testSchemes {
		t.Run(ts.name, func(t *testing.T) {
			s := ts.scheme(t)
			rng := rand.New(rand.NewSource(5))
			layouts, err := s.Layouts()
			if err != nil {
				t.Fatal(err)
			}
			total := s.Compute.Count
			if s.Memory.Placed {
				total += s.Memory.Count
			}
			if !s.Compute.Placed {
				total -= s.Compute.Count
			}
			for iter := 0; iter < 8; iter++ {
				var fleet []partition.FleetCard
				allocated := sets.New[structured.DeviceID]()
				for i := 0; i < 3; i++ {
					f := partition.FleetCard{Node: "a", Index: i, Scheme: s}
					if rng.Intn(4) > 0 {
						f.Layout = slices.Clone(layouts[rng.Intn(len(layouts))])
					}
					for _, in := range f.Layout {
						n, _ := s.DeviceName(i, in.Profile, in.Start)
						allocated.Insert(structured.MakeDeviceID(testDriver, "a", n))
					}
					fleet = append(fleet, f)
				}
				cards, err := partition.ModelCards(fleet)
				if err != nil {
					t.Fatal(err)
				}
				m, err := partition.NewCounterModel(cards)
				if err != nil {
					t.Fatal(err)
				}
				names, err := partition.Preference(fleet)
				if err != nil {
					t.Fatal(err)
				}
				ordered, err := m.Reorder(names)
				if err != nil {
					t.Fatal(err)
				}
				sl := ordered.Slices(testDriver, "a", "a", int64(iter+1))
				for _, pr := range s.Profiles {
					want, bestLoss, bestRunning, bestFree := "", 0, 0, 0
					for gi, f := range fleet {
						for _, pl := range pr.Placements {
							after := with(f.Layout, partition.Instance{Profile: pr.Name, Start: pl.Start})
							if s.Validate(after) != nil {
								continue
							}
							loss := score(t, s, f.Layout) - score(t, s, after)
							free := total - placedUnits(t, s, after)
							running := len(f.Layout)
							if want == "" || loss < bestLoss || (loss == bestLoss && running > bestRunning) ||
								(loss == bestLoss && running == bestRunning && free < bestFree) {
								want, _ = s.DeviceName(gi, pr.Name, pl.Start)
								bestLoss, bestRunning, bestFree = loss, running, free
							}
						}
					}
					n := s.Names
					sel := fmt.Sprintf(`%s == %q && %s == %q`, a.Attr(n.TypeAttribute), n.PartitionType, a.Attr(n.ProfileAttribute), pr.Name)
					got, err := a.One(ctx, node, sl, allocated, sel)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Errorf("state %d, %s: allocator chose %q, planner wants %q (layouts %v)", iter, pr.Name, got, want, fleet)
					}
				}
			}
		})
	}
}

// TestAnyDeviceClaims shows what the order means for claims that any
// device satisfies (a conformance suite's): with the whole cards last, a
// one-card node takes four such claims on tile-4, each a quarter; with
// the whole cards first (WithCardsFirst) the first claim takes the whole
// card and the second finds nothing.
func TestAnyDeviceClaims(t *testing.T) {
	ctx := context.Background()
	a := alloc.New(testDriver, alloc.Features)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	s := tiles(t)
	for _, tc := range []struct {
		name string
		opts []partition.Option
		want []string
	}{
		{"partitions first", nil, []string{"quarter", "quarter", "quarter", "quarter"}},
		{"whole cards first", []partition.Option{partition.WithCardsFirst()}, []string{"whole card", "nothing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet := []partition.FleetCard{{Node: "a", Index: 0, Scheme: s}}
			m, err := partition.NewCounterModel([]partition.Card{{Index: 0, Scheme: s}})
			if err != nil {
				t.Fatal(err)
			}
			allocated := sets.New[structured.DeviceID]()
			var got []string
			for i := range tc.want {
				names, err := partition.Preference(fleet, append([]partition.Option{partition.WithFitOnly()}, tc.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				pub, err := m.Only(names)
				if err != nil {
					t.Fatal(err)
				}
				d, err := a.One(ctx, node, pub.Slices(testDriver, "a", "a", int64(i+1)), allocated, "")
				if err != nil {
					t.Fatal(err)
				}
				if d == "" {
					got = append(got, "nothing")
					break
				}
				allocated.Insert(structured.MakeDeviceID(testDriver, "a", d))
				ref, err := s.ParseDeviceName(d)
				if err != nil {
					t.Fatal(err)
				}
				if ref.Profile == "" {
					got = append(got, "whole card")
					continue
				}
				got = append(got, ref.Profile)
				fleet[0].Layout = append(fleet[0].Layout, partition.Instance{Profile: ref.Profile, Start: ref.Start, InUse: true})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devices the claims got (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFitOnlyKeepsAllocations proves with the real allocator that
// publishing only the devices that fit beside the in-use partitions
// changes no allocation, on schemes unlike MIG.
func TestFitOnlyKeepsAllocations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scheme func(testing.TB) *partition.Scheme
		layout string
	}{
		{"instinct-like", instinctLike, "CPX/NPS4@2*,CPX/NPS4@5"},
		{"tile-4", tiles, "wide@9*,quarter+codec@1"},
		{"core-6", cores, "c2@0*,c1@5*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.scheme(t)
			l := mustLayout(t, tc.layout)
			node := []partition.FleetCard{{Node: "node-a", Index: 0, Scheme: s, Layout: l}}
			m, err := partition.NewCounterModel([]partition.Card{{Index: 0, Scheme: s}})
			if err != nil {
				t.Fatal(err)
			}
			var held []string
			for _, in := range l {
				if in.InUse {
					n, _ := s.DeviceName(0, in.Profile, in.Start)
					held = append(held, n)
				}
			}
			pref, err := partition.Preference(node, partition.WithFitOnly())
			if err != nil {
				t.Fatal(err)
			}
			fit, err := m.Only(pref)
			if err != nil {
				t.Fatal(err)
			}
			if len(fit.Devices) >= len(m.Devices) {
				t.Errorf("fit-only lists %d of %d devices", len(fit.Devices), len(m.Devices))
			}
			want := allocatorFamily(t, s, m.Slices(testDriver, "node-a", "node-a", 1), deviceNames(m), held)
			got := allocatorFamily(t, s, fit.Slices(testDriver, "node-a", "node-a", 1), deviceNames(fit), held)
			if len(want) == 0 {
				t.Fatal("no allocation possible; the test proves nothing")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("allocations differ (-whole model +fit-only):\n%s", diff)
			}
		})
	}
}

// TestCardPools checks that CardPools cuts the preferred pools by card,
// in the scheme's pool names.
func TestCardPools(t *testing.T) {
	s := instinctLike(t)
	node := []partition.FleetCard{
		{Node: "n", Index: 0, Scheme: s, Layout: mustLayout(t, "DPX/NPS1@0*")},
		{Node: "n", Index: 1, Scheme: s},
	}
	cards, err := partition.ModelCards(node)
	if err != nil {
		t.Fatal(err)
	}
	m, err := partition.NewCounterModel(cards)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := m.CardPools("n", node, partition.WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range pools {
		for _, d := range p.Devices {
			got[p.Name] = append(got[p.Name], d.Name())
		}
		if len(p.CounterSets) != 1 {
			t.Errorf("pool %s: %d counter sets", p.Name, len(p.CounterSets))
		}
	}
	if diff := cmp.Diff([]string{"xcp-0-dpx-nps1-1", "xcp-0-dpx-nps1-0"}, got["n/xcp-00"]); diff != "" {
		t.Errorf("card 0 (-want +got):\n%s", diff)
	}
	if n := len(got["n/xcp-01"]); n != len(m.Devices)/2 {
		t.Errorf("card 1 lists %d devices, want all %d", n, len(m.Devices)/2)
	}
	if last := got["n/xcp-01"][len(got["n/xcp-01"])-1]; last != "xcp-1" {
		t.Errorf("card 1's whole device is not last: %s", last)
	}
	if _, err := m.CardPools("n", node[:1]); err == nil {
		t.Error("a node that lacks a card of the model: no error")
	}
}
