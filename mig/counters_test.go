package mig

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/alloc"
)

const testDriver = "gpu.drakit.io"

// selectorFor is a CEL selector that matches exactly the named device.
func selectorFor(a *alloc.Allocator, name string) string {
	ref, err := ParseDeviceName(name)
	if err != nil {
		panic(err)
	}
	if ref.Profile == "" {
		return fmt.Sprintf(`%s == "gpu" && %s == %d`, a.Attr(AttrType), a.Attr(AttrIndex), ref.GPU)
	}
	return fmt.Sprintf(`%s == "mig" && %s == %d && %s == %q && %s == %d`, a.Attr(AttrType), a.Attr(AttrIndex), ref.GPU, a.Attr(AttrProfile), ref.Profile, a.Attr(AttrPlacementStart), ref.Start)
}

// allocatorFamily enumerates, with the real allocator, every set of
// devices it accepts when they are requested one at a time in model order:
// for each accepted set S and each later device d, one claim asks for d
// with S already allocated. Because counter consumption only grows, this
// is the whole family of accepted sets.
func allocatorFamily(t *testing.T, m CounterModel, features structured.Features) []string {
	names := make([]string, len(m.Devices))
	for i, d := range m.Devices {
		names[i] = d.Name
	}
	return allocatorFamilyOf(t, m.Slices(testDriver, "node-a", "node-a", 1), names, nil, features)
}

// allocatorFamilyOf is allocatorFamily over given slices of node-a whose
// devices, in order, are names, with the devices held already allocated
// (they are not part of the sets).
func allocatorFamilyOf(t *testing.T, slices []*resourceapi.ResourceSlice, names, held []string, features structured.Features) []string {
	t.Helper()
	a := alloc.New(testDriver, features)
	sels := make([]string, len(names))
	for i, n := range names {
		sels[i] = selectorFor(a, n)
	}
	family, err := a.Family(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, slices, names, sels, held)
	if err != nil {
		t.Fatal(err)
	}
	return family
}

func key(names []string) string {
	c := append([]string(nil), names...)
	sort.Strings(c)
	return strings.Join(c, " ")
}

// exactFamily is the exact enumeration as device-name sets, plus the full GPU.
func exactFamily(t *testing.T, p *Product, profiles []string) []string {
	ls, err := p.Layouts(profiles...)
	if err != nil {
		t.Fatal(err)
	}
	family := []string{DeviceRef{GPU: 0}.String()}
	for _, l := range ls {
		var names []string
		for _, in := range l {
			names = append(names, DeviceRef{GPU: 0, Profile: in.Profile, Start: in.Start}.String())
		}
		family = append(family, key(names))
	}
	sort.Strings(family)
	return family
}

// TestCounterModelMatchesAllocator is the proof that the counter model is
// exact: the real structured allocator accepts exactly the valid layouts.
func TestCounterModelMatchesAllocator(t *testing.T) {
	tests := []struct {
		name     string
		product  string
		profiles []string
		features structured.Features
		wantSets int // valid non-empty layouts + the full GPU
	}{
		{"A100 classic", "A100-40GB", []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, alloc.Features, 298},
		{"A100 six", "A100-40GB", []string{"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, alloc.Features, 723},
		{"H100 six", "H100-80GB", []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}, alloc.Features, 723},
		{"H100 all with +me", "H100-80GB", nil, alloc.Features, 2319},
		{"A30 all", "A30-24GB", nil, alloc.Features, 76},
		{"A30 all, stable allocator", "A30-24GB", nil, alloc.StableFeatures, 76},
		{"A100 classic, stable allocator", "A100-40GB", []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, alloc.StableFeatures, 298},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if testing.Short() && tt.wantSets > 1000 {
				t.Skip("large family in -short mode")
			}
			p := mustLookup(t, tt.product)
			m, err := NewCounterModel([]GPU{{Index: 0, Product: p, Profiles: tt.profiles}})
			if err != nil {
				t.Fatal(err)
			}
			want := exactFamily(t, p, tt.profiles)
			if len(want) != tt.wantSets {
				t.Fatalf("exact family has %d sets, want %d", len(want), tt.wantSets)
			}
			got := allocatorFamily(t, m, tt.features)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("allocator-accepted sets differ from valid layouts (-exact +allocator):\n%s", diff)
			}
		})
	}
}

func TestCounterModelLimitsAndNames(t *testing.T) {
	var gpus []GPU
	for i := 0; i < 8; i++ {
		gpus = append(gpus, GPU{Index: i, Product: mustLookup(t, "H100-80GB"), UUID: fmt.Sprintf("GPU-%d", i)})
	}
	m, err := NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(m.Devices), 8*26; got != want {
		t.Errorf("%d devices, want %d", got, want)
	}
	slices := m.Slices(testDriver, "node-a", "node-a", 3)
	var kinds []string
	for _, s := range slices {
		if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
			t.Errorf("slice name %q: %v", s.Name, errs)
		}
		if len(s.Spec.Devices) > 64 || len(s.Spec.SharedCounters) > 8 || (len(s.Spec.Devices) > 0) == (len(s.Spec.SharedCounters) > 0) {
			t.Errorf("slice %s: %d devices, %d counter sets", s.Name, len(s.Spec.Devices), len(s.Spec.SharedCounters))
		}
		if s.Spec.Pool.ResourceSliceCount != int64(len(slices)) || s.Spec.NodeName == nil {
			t.Errorf("slice %s: count %d, nodeName %v", s.Name, s.Spec.Pool.ResourceSliceCount, s.Spec.NodeName)
		}
		kinds = append(kinds, s.Name)
		for _, cs := range s.Spec.SharedCounters {
			if len(cs.Counters) > 32 {
				t.Errorf("counter set %s has %d counters", cs.Name, len(cs.Counters))
			}
			for n := range cs.Counters {
				if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
					t.Errorf("counter %q: %v", n, errs)
				}
			}
		}
		for _, d := range s.Spec.Devices {
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				t.Errorf("device %q: %v", d.Name, errs)
			}
			ref, err := ParseDeviceName(d.Name)
			if err != nil || ref.String() != d.Name {
				t.Errorf("device %q does not round-trip: %v %v", d.Name, ref, err)
			}
			if n := len(d.Attributes) + len(d.Capacity); n > 32 {
				t.Errorf("device %s has %d attributes+capacities", d.Name, n)
			}
		}
	}
	want := []string{"node-a-counters-000", "node-a-devices-000", "node-a-devices-001", "node-a-devices-002", "node-a-devices-003"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("slices (-want +got):\n%s", diff)
	}
}

func TestParseDeviceName(t *testing.T) {
	tests := []struct {
		in   string
		want DeviceRef
		err  bool
	}{
		{"gpu-3", DeviceRef{GPU: 3}, false},
		{"gpu-0-3g-40gb-4", DeviceRef{GPU: 0, Profile: "3g.40gb", Start: 4}, false},
		{"gpu-12-1g-10gb-me-6", DeviceRef{GPU: 12, Profile: "1g.10gb+me", Start: 6}, false},
		{"gpu-x", DeviceRef{}, true},
		{"nic-0", DeviceRef{}, true},
	}
	for _, tt := range tests {
		got, err := ParseDeviceName(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseDeviceName(%q) = %v, %v", tt.in, got, err)
		}
	}
}

// TestCounterModelProofDetectsBrokenModel shows the proof can fail: without
// the media-extensions counter the allocator accepts two +me instances.
func TestCounterModelProofDetectsBrokenModel(t *testing.T) {
	p := mustLookup(t, "A30-24GB")
	m, err := NewCounterModel([]GPU{{Index: 0, Product: p}})
	if err != nil {
		t.Fatal(err)
	}
	delete(m.CounterSets[0].Counters, CounterMediaExtensions)
	for _, d := range m.Devices {
		delete(d.ConsumesCounters[0].Counters, CounterMediaExtensions)
	}
	got := allocatorFamily(t, m, alloc.Features)
	want := exactFamily(t, p, nil)
	if cmp.Equal(want, got) {
		t.Fatal("broken model accepted exactly the valid layouts; the proof cannot detect errors")
	}
	if !containsKey(got, "gpu-0-1g-6gb-me-0 gpu-0-2g-12gb-me-2") {
		t.Errorf("broken model should accept two +me instances; accepted %d sets", len(got))
	}
}

func containsKey(family []string, k string) bool {
	i := sort.SearchStrings(family, k)
	return i < len(family) && family[i] == k
}
