package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drakit/drakit/internal/alloc"
	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

const testDriver = "accel.example.com"

// selectorFor is a CEL selector that matches exactly the named device of
// scheme s, by the attributes the scheme publishes.
func selectorFor(t testing.TB, a *alloc.Allocator, s *partition.Scheme, name string) string {
	t.Helper()
	ref, err := s.ParseDeviceName(name)
	if err != nil {
		t.Fatal(err)
	}
	n := s.Names
	if ref.Profile == "" {
		return fmt.Sprintf(`%s == %q && %s == %d`, a.Attr(n.TypeAttribute), n.CardType, a.Attr(n.IndexAttribute), ref.Card)
	}
	sel := fmt.Sprintf(`%s == %q && %s == %d && %s == %q`, a.Attr(n.TypeAttribute), n.PartitionType, a.Attr(n.IndexAttribute), ref.Card, a.Attr(n.ProfileAttribute), ref.Profile)
	pr, err := s.Profile(ref.Profile)
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range pr.Placements {
		if pl.Start != ref.Start {
			continue
		}
		if s.Memory.Placed && pr.Memory > 0 {
			sel += fmt.Sprintf(` && %s == %d`, a.Attr(n.MemoryStartAttribute), pl.Memory)
		}
		if s.Compute.Placed {
			sel += fmt.Sprintf(` && %s == %d`, a.Attr(n.ComputeStartAttribute), pl.Compute)
		}
	}
	return sel
}

// allocatorFamily enumerates, with the real allocator, every set of
// devices it accepts when they are requested one at a time in the given
// order, with the devices held already allocated (alloc.Family).
func allocatorFamily(t *testing.T, s *partition.Scheme, slices []*resourceapi.ResourceSlice, names, held []string) []string {
	t.Helper()
	a := alloc.New(testDriver, alloc.Features)
	sels := make([]string, len(names))
	for i, n := range names {
		sels[i] = selectorFor(t, a, s, n)
	}
	family, err := a.Family(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, slices, names, sels, held)
	if err != nil {
		t.Fatal(err)
	}
	return family
}

func contains(l []string, s string) bool { return slices.Contains(l, s) }

func key(names []string) string {
	c := slices.Clone(names)
	sort.Strings(c)
	return strings.Join(c, " ")
}

func deviceNames(m partition.CounterModel) []string {
	out := make([]string, len(m.Devices))
	for i, d := range m.Devices {
		out[i] = d.Name
	}
	return out
}

// exactFamily is the scheme's valid layouts on card 0 as device-name
// sets, plus the whole card.
func exactFamily(t *testing.T, s *partition.Scheme, profiles []string) []string {
	t.Helper()
	ls, err := s.Layouts(profiles...)
	if err != nil {
		t.Fatal(err)
	}
	family := []string{s.CardDeviceName(0)}
	for _, l := range ls {
		var names []string
		for _, in := range l {
			n, err := s.DeviceName(0, in.Profile, in.Start)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		family = append(family, key(names))
	}
	sort.Strings(family)
	return family
}

// TestCounterModelMatchesAllocator is the proof that the counter model is
// exact for schemes unlike MIG: the real structured allocator accepts
// exactly the valid layouts. instinct-like keeps each card in one mode
// with the mode counters (a CPX/NPS1 partition beside a CPX/NPS4 one, on
// other dies, is refused); tile-4 places compute and memory apart and
// has an extra; core-6 counts memory and limits partitions per card.
func TestCounterModelMatchesAllocator(t *testing.T) {
	for _, tc := range []struct {
		name     string
		scheme   func(testing.TB) *partition.Scheme
		profiles []string
		wantSets int // valid non-empty layouts + the whole card
	}{
		{"instinct-like", instinctLike, nil, 530},
		{"instinct-like without CPX", instinctLike, []string{"SPX/NPS1", "DPX/NPS1", "QPX/NPS1"}, 20},
		{"tile-4", tiles, nil, 0},
		{"core-6", cores, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.scheme(t)
			m, err := partition.NewCounterModel([]partition.Card{{Index: 0, Scheme: s, Profiles: tc.profiles}})
			if err != nil {
				t.Fatal(err)
			}
			want := exactFamily(t, s, tc.profiles)
			if tc.wantSets > 0 && len(want) != tc.wantSets {
				t.Fatalf("exact family has %d sets, want %d", len(want), tc.wantSets)
			}
			if len(want) < 20 {
				t.Fatalf("exact family has %d sets: too few to prove anything", len(want))
			}
			got := allocatorFamily(t, s, m.Slices(testDriver, "node-a", "node-a", 1), deviceNames(m), nil)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("allocator-accepted sets differ from valid layouts (-exact +allocator):\n%s", diff)
			}
			t.Logf("%d sets", len(got))
		})
	}
}

// TestModeCountersAreNeeded shows the proof can fail: without the mode
// counters the allocator mixes modes on one card (a DPX partition on
// dies 0-3 beside a QPX one on dies 4-5).
func TestModeCountersAreNeeded(t *testing.T) {
	s := instinctLike(t)
	profiles := []string{"DPX/NPS1", "QPX/NPS1"}
	m, err := partition.NewCounterModel([]partition.Card{{Index: 0, Scheme: s, Profiles: profiles}})
	if err != nil {
		t.Fatal(err)
	}
	locks := 0
	for n := range m.CounterSets[0].Counters {
		if strings.HasPrefix(n, s.Names.ModeCounter) {
			delete(m.CounterSets[0].Counters, n)
			locks++
		}
	}
	for _, d := range m.Devices {
		for n := range d.ConsumesCounters[0].Counters {
			if strings.HasPrefix(n, s.Names.ModeCounter) {
				delete(d.ConsumesCounters[0].Counters, n)
			}
		}
	}
	if locks != 8 {
		t.Fatalf("%d mode counters, want one per XCD", locks)
	}
	got := allocatorFamily(t, s, m.Slices(testDriver, "node-a", "node-a", 1), deviceNames(m), nil)
	if cmp.Equal(exactFamily(t, s, profiles), got) {
		t.Fatal("model without mode counters accepted exactly the valid layouts; the proof cannot detect errors")
	}
	mixed := key([]string{"xcp-0-dpx-nps1-0", "xcp-0-qpx-nps1-2"})
	if !slices.Contains(got, mixed) {
		t.Errorf("model without mode counters should accept %s; accepted %d sets", mixed, len(got))
	}
}

// TestCounterModelNames checks that every name is the vendor's and within
// the API's rules.
func TestCounterModelNames(t *testing.T) {
	ti, in := tiles(t), instinctLike(t)
	m, err := partition.NewCounterModel([]partition.Card{{Index: 0, Scheme: ti, UUID: "ACC-0"}, {Index: 3, Scheme: in}})
	if err != nil {
		t.Fatal(err)
	}
	var sets []string
	for _, cs := range m.CounterSets {
		sets = append(sets, cs.Name)
		if len(cs.Counters) > 32 {
			t.Errorf("counter set %s: %d counters", cs.Name, len(cs.Counters))
		}
		for n := range cs.Counters {
			if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
				t.Errorf("counter %q: %v", n, errs)
			}
		}
	}
	if diff := cmp.Diff([]string{"acc-0-res", "xcp-3-counters"}, sets); diff != "" {
		t.Errorf("counter sets (-want +got):\n%s", diff)
	}
	wantCounters := []string{"bank-0", "bank-1", "bank-2", "bank-3", "codec", "instances-3", "tile-0", "tile-1", "tile-2", "tile-3"}
	var got []string
	for n := range m.CounterSets[0].Counters {
		got = append(got, n)
	}
	sort.Strings(got)
	if diff := cmp.Diff(wantCounters, got); diff != "" {
		t.Errorf("tile-4 counters (-want +got):\n%s", diff)
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range m.Devices {
		byName[d.Name] = d
		if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
			t.Errorf("device %q: %v", d.Name, errs)
		}
		if strings.Contains(d.Name, "gpu") || strings.Contains(d.Name, "mig") {
			t.Errorf("device %q has NVIDIA's words", d.Name)
		}
	}
	q, ok := byName["acc-0-quarter-codec-3"]
	if !ok {
		t.Fatalf("no device acc-0-quarter-codec-3 among %v", deviceNames(m))
	}
	attrs := map[string]string{}
	for n, a := range q.Attributes {
		switch {
		case a.StringValue != nil:
			attrs[string(n)] = *a.StringValue
		case a.IntValue != nil:
			attrs[string(n)] = fmt.Sprint(*a.IntValue)
		}
	}
	wantAttrs := map[string]string{"kind": "slice", "accelerator": "0", "model": "tile-4", "uuid": "ACC-0", "shape": "quarter+codec",
		"memoryStart": "0", "computeStart": "3"}
	if diff := cmp.Diff(wantAttrs, attrs); diff != "" {
		t.Errorf("attributes of acc-0-quarter-codec-3 (-want +got):\n%s", diff)
	}
	if c, ok := q.Capacity["codecs"]; !ok || c.Value.Value() != 1 {
		t.Errorf("capacity codecs = %v", q.Capacity)
	}
	if _, ok := q.ConsumesCounters[0].Counters["codec"]; !ok {
		t.Errorf("quarter+codec does not take the codec: %v", q.ConsumesCounters[0].Counters)
	}
	for name, want := range map[string]partition.DeviceRef{
		"acc-0":                  {Card: 0},
		"acc-0-wide-10":          {Card: 0, Profile: "wide", Start: 10},
		"acc-12-quarter-codec-3": {Card: 12, Profile: "quarter+codec", Start: 3},
	} {
		ref, err := ti.ParseDeviceName(name)
		if err != nil || ref != want {
			t.Errorf("ParseDeviceName(%q) = %+v, %v; want %+v", name, ref, err, want)
		}
	}
	for _, bad := range []string{"acc-x", "gpu-0", "acc-0-wide-5", "acc-01", "acc-0-"} {
		if _, err := ti.ParseDeviceName(bad); err == nil {
			t.Errorf("ParseDeviceName(%q) succeeded", bad)
		}
	}
	if _, err := in.ParseDeviceName("xcp-3-cpx-nps4-7"); err != nil {
		t.Error(err)
	}
}
