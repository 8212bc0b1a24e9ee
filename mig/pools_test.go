package mig

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/alloc"
)

// TestPoolsMatchAllocator is TestCounterModelMatchesAllocator through
// device: the pools, published by device.Inventory, make the real
// allocator accept exactly the valid layouts, as Slices does.
func TestPoolsMatchAllocator(t *testing.T) {
	tests := []struct {
		name     string
		product  string
		profiles []string
		wantSets int
	}{
		{"A30 all", "A30-24GB", nil, 76},
		{"A100 classic", "A100-40GB", []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, 298},
		{"H100 default", "H100-80GB", DefaultProfiles(mustLookup(t, "H100-80GB")), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustLookup(t, tt.product)
			want := exactFamily(t, p, tt.profiles)
			if tt.wantSets != 0 && len(want) != tt.wantSets {
				t.Fatalf("exact family has %d sets, want %d", len(want), tt.wantSets)
			}
			if testing.Short() && len(want) > 1000 {
				t.Skip("large family in -short mode")
			}
			m, err := NewCounterModel([]GPU{{Index: 0, Product: p, Profiles: tt.profiles}})
			if err != nil {
				t.Fatal(err)
			}
			inv := &device.Inventory{Driver: testDriver, Pools: m.Pools("node-a")}
			if err := inv.Validate(); err != nil {
				t.Fatalf("pools do not validate: %v", err)
			}
			var names []string
			for _, pool := range inv.Pools {
				for _, d := range pool.Devices {
					names = append(names, d.Name())
				}
			}
			got := allocatorFamilyOf(t, inv.ResourceSlices("node-a"), names, nil, alloc.Features)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("allocator-accepted sets differ from valid layouts (-exact +allocator):\n%s", diff)
			}
		})
	}
}

// TestSlicesAreDeviceSplit: Slices and device's conversion of Pools give
// the same slices (devices, counter sets, order), for a reordered
// 8-GPU model that spans several slices.
func TestSlicesAreDeviceSplit(t *testing.T) {
	p := mustLookup(t, "H100-80GB")
	var gpus []GPU
	var fleet []FleetGPU
	for i := 0; i < 8; i++ {
		gpus = append(gpus, GPU{Index: i, Product: p, UUID: fmt.Sprintf("GPU-%d", i)})
		fleet = append(fleet, FleetGPU{Node: "node-a", Index: i, Product: p})
	}
	fleet[3].Layout = Layout{{Profile: "3g.40gb", Start: 4, InUse: true}}
	m, err := NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	pref, err := Preference(fleet)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = m.Reorder(pref); err != nil {
		t.Fatal(err)
	}
	inv := &device.Inventory{Driver: testDriver, Pools: m.Pools("node-a")}
	if err := inv.Validate(); err != nil {
		t.Fatalf("pools do not validate: %v", err)
	}
	fromDevice := inv.ResourceSlices("node-a")
	ours := m.Slices(testDriver, "node-a", "node-a", 1)
	if len(ours) != len(fromDevice) || len(ours) < 4 {
		t.Fatalf("Slices gives %d slices, device %d", len(ours), len(fromDevice))
	}
	for i := range ours {
		a, b := ours[i].Spec, fromDevice[i].Spec
		if !apiequality.Semantic.DeepEqual(a.Devices, b.Devices) || !apiequality.Semantic.DeepEqual(a.SharedCounters, b.SharedCounters) {
			t.Errorf("slice %d differs:\n%s", i, cmp.Diff(a, b))
		}
	}
	if got := inv.Pools[0].Devices[0].Name(); got != pref[0] {
		t.Errorf("first device %s, want the preferred %s", got, pref[0])
	}
}

// TestPoolsAreFreshCopies: a caller's changes to the pools do not reach
// the model.
func TestPoolsAreFreshCopies(t *testing.T) {
	m, err := NewCounterModel([]GPU{{Index: 0, Product: mustLookup(t, "A30-24GB")}})
	if err != nil {
		t.Fatal(err)
	}
	pools := m.Pools("n")
	pools[0].Devices[0].StringAttribute(AttrType, "changed")
	for k := range pools[0].CounterSets[0].Counters {
		delete(pools[0].CounterSets[0].Counters, k)
	}
	again := m.Pools("n")
	if got := again[0].Devices[0].String(); got == pools[0].Devices[0].String() {
		t.Errorf("model device changed through Pools: %s", got)
	}
	if len(m.CounterSets[0].Counters) == 0 {
		t.Error("model counters changed through Pools")
	}
}

// TestPreferenceWithProfiles: with a reduced advertised set, Preference
// needs WithProfiles for Reorder to accept its names, and then names
// exactly the model's devices.
func TestPreferenceWithProfiles(t *testing.T) {
	p := mustLookup(t, "H100-80GB")
	noME := func(p *Product) []string {
		var out []string
		for _, pr := range p.Profiles {
			if !pr.MediaExtensions {
				out = append(out, pr.Name)
			}
		}
		return out
	}
	fleet := []FleetGPU{{Node: "n", Index: 0, Product: p}, {Node: "n", Index: 1, Product: p, Layout: Layout{{Profile: "1g.10gb", Start: 0, InUse: true}}}}
	m, err := NewCounterModel([]GPU{{Index: 0, Product: p, Profiles: noME(p)}, {Index: 1, Product: p, Profiles: noME(p)}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := Preference(fleet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reorder(all); err == nil {
		t.Fatal("Reorder accepted the all-profiles preference on a model without +me")
	}
	pref, err := Preference(fleet, WithProfiles(noME))
	if err != nil {
		t.Fatal(err)
	}
	if len(pref) != len(m.Devices) {
		t.Fatalf("preference names %d devices, model has %d", len(pref), len(m.Devices))
	}
	r, err := m.Reorder(pref)
	if err != nil {
		t.Fatal(err)
	}
	// The reduced order is the full order without the +me devices.
	var want []string
	for _, n := range all {
		if ref, _ := ParseDeviceName(n); ref.Profile == "" || !mustProfile(t, p, ref.Profile).MediaExtensions {
			want = append(want, n)
		}
	}
	var got []string
	for _, d := range r.Devices {
		got = append(got, d.Name)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reduced order (-want +got):\n%s", diff)
	}
	if _, err := Preference(fleet, WithProfiles(func(*Product) []string { return []string{"9g.1gb"} })); !errors.Is(err, ErrUnknownProfile) {
		t.Errorf("unknown profile: err %v, want ErrUnknownProfile", err)
	}
	if _, err := Preference(fleet, WithProfiles(nil)); err == nil {
		t.Error("WithProfiles(nil) accepted")
	}
}

func mustProfile(t *testing.T, p *Product, name string) Profile {
	t.Helper()
	pr, err := p.Profile(name)
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

// TestFitOnlyKeepsAllocations: publishing only Preference(WithFitOnly())
// lets the real allocator make exactly the allocations the whole model
// allows, beside in-use instances and around an idle one, with fewer
// devices.
func TestFitOnlyKeepsAllocations(t *testing.T) {
	for _, tc := range []struct {
		product string
		layout  Layout
	}{
		{"H100-80GB", Layout{{Profile: "3g.40gb", Start: 0, InUse: true}, {Profile: "1g.10gb", Start: 4}, {Profile: "1g.10gb+me", Start: 6, InUse: true}}},
		{"A30-24GB", Layout{{Profile: "1g.6gb", Start: 1, InUse: true}}},
	} {
		t.Run(tc.product, func(t *testing.T) {
			p := mustLookup(t, tc.product)
			node := []FleetGPU{{Node: "node-a", Index: 0, Product: p, Layout: tc.layout}}
			m, err := NewCounterModel([]GPU{{Index: 0, Product: p}})
			if err != nil {
				t.Fatal(err)
			}
			var held []string
			for _, in := range tc.layout {
				if in.InUse {
					held = append(held, DeviceRef{Profile: in.Profile, Start: in.Start}.String())
				}
			}
			pref, err := Preference(node, WithFitOnly())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range held {
				if !slices.Contains(pref, h) {
					t.Errorf("in-use device %s left out", h)
				}
			}
			fit, err := m.Only(pref)
			if err != nil {
				t.Fatal(err)
			}
			if len(fit.Devices) >= len(m.Devices) {
				t.Errorf("fit-only lists %d of %d devices", len(fit.Devices), len(m.Devices))
			}
			names := func(m CounterModel) []string {
				var out []string
				for _, d := range m.Devices {
					out = append(out, d.Name)
				}
				return out
			}
			want := allocatorFamilyOf(t, m.Slices(testDriver, "node-a", "node-a", 1), names(m), held, alloc.Features)
			got := allocatorFamilyOf(t, fit.Slices(testDriver, "node-a", "node-a", 1), names(fit), held, alloc.Features)
			if len(want) == 0 {
				t.Fatal("no allocation possible; the test proves nothing")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("allocations differ (-whole model +fit-only):\n%s", diff)
			}
		})
	}
}

// TestPreferredPools: one call gives the pools of the planner's fit-only
// order for any advertised set, the same as Preference with WithProfiles
// and Only; a node that is not the model's is an error.
func TestPreferredPools(t *testing.T) {
	p := mustLookup(t, "H100-80GB")
	var gpus []GPU
	var node []FleetGPU
	for i := 0; i < 4; i++ {
		gpus = append(gpus, GPU{Index: i, Product: p, Profiles: DefaultProfiles(p)})
		node = append(node, FleetGPU{Node: "n", Index: i, Product: p})
	}
	node[1].Layout = Layout{{Profile: "3g.40gb", Start: 0, InUse: true}, {Profile: "2g.20gb", Start: 4, InUse: true}}
	m, err := NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.PreferredPools("n", node, WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	pref, err := Preference(node, WithProfiles(DefaultProfiles), WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.Only(pref)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Devices) != len(want.Devices) || len(want.Devices) >= len(m.Devices) {
		t.Fatalf("got %d pools, %d devices; want %d of %d devices", len(got), len(got[0].Devices), len(want.Devices), len(m.Devices))
	}
	for i, d := range got[0].Devices {
		if d.Name() != want.Devices[i].Name {
			t.Errorf("device %d: %s, want %s", i, d.Name(), want.Devices[i].Name)
		}
	}
	h200 := mustLookup(t, "H200-141GB")
	for name, bad := range map[string][]FleetGPU{
		"missing GPU":   node[:3],
		"unknown GPU":   append(append([]FleetGPU(nil), node...), FleetGPU{Node: "n", Index: 9, Product: p}),
		"other product": {node[0], node[1], node[2], {Node: "n", Index: 3, Product: h200}},
	} {
		if _, err := m.PreferredPools("n", bad, WithFitOnly()); !errors.Is(err, ErrFleet) {
			t.Errorf("%s: err %v, want ErrFleet", name, err)
		}
	}
}

// TestFitOnlyIsAFilter: WithFitOnly leaves devices out of Preference's
// order and changes nothing else, whatever the first GPU runs.
func TestFitOnlyIsAFilter(t *testing.T) {
	p := mustLookup(t, "H100-80GB")
	node := []FleetGPU{
		{Node: "n", Index: 0, Product: p, Layout: Layout{{Profile: "4g.40gb", Start: 0, InUse: true}, {Profile: "3g.40gb", Start: 4, InUse: true}}},
		{Node: "n", Index: 1, Product: p, Layout: Layout{{Profile: "1g.10gb", Start: 2, InUse: true}, {Profile: "2g.20gb", Start: 4}}},
		{Node: "n", Index: 2, Product: p},
	}
	all, err := Preference(node)
	if err != nil {
		t.Fatal(err)
	}
	fit, err := Preference(node, WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	for _, n := range fit {
		keep[n] = true
	}
	var want []string
	for _, n := range all {
		if keep[n] {
			want = append(want, n)
		}
	}
	if diff := cmp.Diff(want, fit); diff != "" {
		t.Errorf("fit-only order is not the full order filtered (-filtered +fit-only):\n%s", diff)
	}
	if len(fit) >= len(all) {
		t.Errorf("fit-only lists %d of %d devices", len(fit), len(all))
	}
}

// TestFitOnlySamePicks: on random busy nodes, the real allocator picks the
// same device for a one-device claim of every profile from the fit-only
// slices as from all devices in Preference's order.
func TestFitOnlySamePicks(t *testing.T) {
	ctx := context.Background()
	a := alloc.New(testDriver, alloc.Features)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	rng := rand.New(rand.NewSource(7))
	for _, product := range []string{"H100-80GB", "A30-24GB"} {
		p := mustLookup(t, product)
		for iter := 0; iter < 15; iter++ {
			var gpus []GPU
			var fleet []FleetGPU
			for g := 0; g < 2; g++ {
				gpus = append(gpus, GPU{Index: g, Product: p})
				f := FleetGPU{Node: "node-a", Index: g, Product: p}
				for try := 0; try < 6; try++ {
					pr := p.Profiles[rng.Intn(len(p.Profiles))]
					in := Instance{Profile: pr.Name, Start: pr.Starts[rng.Intn(len(pr.Starts))], InUse: rng.Intn(4) > 0}
					if p.Validate(append(slices.Clone(f.Layout), in)) == nil {
						f.Layout = append(f.Layout, in)
					}
				}
				fleet = append(fleet, f)
			}
			m, err := NewCounterModel(gpus)
			if err != nil {
				t.Fatal(err)
			}
			all, err := Preference(fleet)
			if err != nil {
				t.Fatal(err)
			}
			fit, err := Preference(fleet, WithFitOnly())
			if err != nil {
				t.Fatal(err)
			}
			mAll, err := m.Reorder(all)
			if err != nil {
				t.Fatal(err)
			}
			mFit, err := m.Only(fit)
			if err != nil {
				t.Fatal(err)
			}
			held := sets.New[structured.DeviceID]()
			for _, f := range fleet {
				for _, in := range f.Layout {
					if in.InUse {
						held.Insert(structured.MakeDeviceID(testDriver, "node-a", DeviceRef{GPU: f.Index, Profile: in.Profile, Start: in.Start}.String()))
					}
				}
			}
			sAll, sFit := mAll.Slices(testDriver, "node-a", "node-a", 1), mFit.Slices(testDriver, "node-a", "node-a", 1)
			for _, pr := range p.Profiles {
				sel := fmt.Sprintf(`%s == "mig" && %s == %q`, a.Attr(AttrType), a.Attr(AttrProfile), pr.Name)
				want, err := a.One(ctx, node, sAll, held, sel)
				if err != nil {
					t.Fatal(err)
				}
				got, err := a.One(ctx, node, sFit, held, sel)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%s %v: %s picks %q from the fit-only slices, %q from all", product, fleet, pr.Name, got, want)
				}
			}
		}
	}
}

// TestGPUPools: GPUPools is PreferredPools cut by GPU: every device and
// counter set once, in its GPU's pool, in PreferredPools' order; pools
// in GPU order by name.
func TestGPUPools(t *testing.T) {
	p := mustLookup(t, "H100-80GB")
	var gpus []GPU
	var node []FleetGPU
	for _, i := range []int{3, 0, 11, 2} { // any order, two-digit index
		gpus = append(gpus, GPU{Index: i, Product: p, Profiles: DefaultProfiles(p)})
		node = append(node, FleetGPU{Node: "n", Index: i, Product: p})
	}
	node[0].Layout = Layout{{Profile: "3g.40gb", Start: 0, InUse: true}, {Profile: "2g.20gb", Start: 4, InUse: true}}
	m, err := NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	one, err := m.PreferredPools("n", node, WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.GPUPools("n", node, WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pl := range got {
		names = append(names, pl.Name)
	}
	if want := []string{"n/gpu-00", "n/gpu-02", "n/gpu-03", "n/gpu-11"}; !slices.Equal(names, want) {
		t.Fatalf("pools %v, want %v", names, want)
	}
	for _, pl := range got {
		var gpu int
		fmt.Sscanf(pl.Name, "n/gpu-%d", &gpu)
		if len(pl.CounterSets) != 1 || pl.CounterSets[0].Name != CounterSetName(gpu) {
			t.Errorf("pool %s: counter sets %v", pl.Name, pl.CounterSets)
		}
		var want []string
		for _, d := range one[0].Devices {
			if ref, _ := ParseDeviceName(d.Name()); ref.GPU == gpu {
				want = append(want, d.Name())
			}
		}
		var have []string
		for _, d := range pl.Devices {
			have = append(have, d.Name())
		}
		if !slices.Equal(have, want) {
			t.Errorf("pool %s: devices %v, want %v", pl.Name, have, want)
		}
	}
	if _, err := m.GPUPools("n", node[:3], WithFitOnly()); !errors.Is(err, ErrFleet) {
		t.Errorf("a missing GPU: err %v, want ErrFleet", err)
	}
}
