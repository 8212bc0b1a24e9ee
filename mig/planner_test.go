package mig

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/alloc"
)

// planCmp compares plans: products by identity, search time ignored.
var planCmp = cmp.Options{
	cmp.Comparer(func(a, b *Product) bool { return a == b }),
	cmpopts.IgnoreFields(Search{}, "Elapsed"),
}

func mustLayout(t testing.TB, s string) Layout {
	t.Helper()
	l, err := ParseLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestPlanFleet(t *testing.T) {
	one := 1
	tests := []struct {
		name       string
		fleet      []FleetGPU
		requests   []Request
		wantOps    []string
		wantAfter  []string
		wantUnplac []int
	}{
		{
			name:      "4g and 3g share one GPU, second GPU stays free",
			fleet:     []FleetGPU{{Node: "a", Index: 0, Product: testProduct("H100-80GB")}, {Node: "a", Index: 1, Product: testProduct("H100-80GB")}},
			requests:  []Request{{Profile: "3g.40gb"}, {Profile: "4g.40gb"}},
			wantOps:   []string{"create  a/gpu-0 4g.40gb@0 (request 1)", "create  a/gpu-0 3g.40gb@4 (request 0)"},
			wantAfter: []string{"4g.40gb@0*,3g.40gb@4*", "-"},
		},
		{
			name:      "1g goes where it blocks no 4g; in-use instance untouched",
			fleet:     []FleetGPU{{Node: "a", Index: 0, Product: testProduct("H100-80GB"), Layout: Layout{{Profile: "4g.40gb", Start: 0, InUse: true}}}},
			requests:  []Request{{Profile: "1g.10gb"}},
			wantOps:   []string{"create  a/gpu-0 1g.10gb@6 (request 0)"},
			wantAfter: []string{"4g.40gb@0*,1g.10gb@6*"},
		},
		{
			name:      "idle instance reused, other idle destroyed",
			fleet:     []FleetGPU{{Node: "a", Index: 0, Product: testProduct("A100-40GB"), Layout: Layout{{Profile: "3g.20gb", Start: 4}, {Profile: "1g.5gb", Start: 0}}}},
			requests:  []Request{{Profile: "3g.20gb"}},
			wantOps:   []string{"destroy a/gpu-0 1g.5gb@0"},
			wantAfter: []string{"3g.20gb@4*"},
		},
		{
			name:       "in-use 1g blocks 7g; 7g unplaced",
			fleet:      []FleetGPU{{Node: "a", Index: 0, Product: testProduct("H100-80GB"), Layout: Layout{{Profile: "1g.10gb", Start: 6, InUse: true}}}},
			requests:   []Request{{Profile: "7g.80gb"}, {Profile: "2g.20gb"}},
			wantOps:    []string{"create  a/gpu-0 2g.20gb@4 (request 1)"},
			wantAfter:  []string{"2g.20gb@4*,1g.10gb@6*"},
			wantUnplac: []int{0},
		},
		{
			name:      "pinned to a GPU",
			fleet:     []FleetGPU{{Node: "a", Index: 0, Product: testProduct("H100-80GB")}, {Node: "a", Index: 1, Product: testProduct("H100-80GB")}},
			requests:  []Request{{Profile: "1g.10gb", GPU: &one}},
			wantOps:   []string{"create  a/gpu-1 1g.10gb@6 (request 0)"},
			wantAfter: []string{"-", "1g.10gb@6*"},
		},
		{
			name:       "per GPU exact: 4g+3g beats 7g by count",
			fleet:      []FleetGPU{{Node: "a", Index: 0, Product: testProduct("H100-80GB")}},
			requests:   []Request{{Profile: "7g.80gb"}, {Profile: "4g.40gb"}, {Profile: "3g.40gb"}},
			wantOps:    []string{"create  a/gpu-0 4g.40gb@0 (request 1)", "create  a/gpu-0 3g.40gb@4 (request 2)"},
			wantAfter:  []string{"4g.40gb@0*,3g.40gb@4*"},
			wantUnplac: []int{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlanFleet(tt.fleet, tt.requests)
			if err != nil {
				t.Fatal(err)
			}
			var ops, after []string
			for _, o := range plan.Operations {
				ops = append(ops, o.String())
			}
			for _, g := range plan.After {
				after = append(after, g.Layout.String())
			}
			var unpl []int
			for _, u := range plan.Unplaced {
				unpl = append(unpl, u.Request)
			}
			if diff := cmp.Diff(tt.wantOps, ops); diff != "" {
				t.Errorf("operations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantAfter, after); diff != "" {
				t.Errorf("after (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantUnplac, unpl); diff != "" {
				t.Errorf("unplaced (-want +got):\n%s", diff)
			}
			checkPlan(t, tt.fleet, tt.requests, plan)
		})
	}
}

func TestPlanFleetErrors(t *testing.T) {
	h := FleetGPU{Node: "a", Index: 0, Product: testProduct("H100-80GB")}
	tests := []struct {
		name  string
		fleet []FleetGPU
		reqs  []Request
		want  string
	}{
		{"nil product", []FleetGPU{{Node: "a"}}, nil, "fleet[0].product"},
		{"product not built", []FleetGPU{{Node: "a", Product: &Product{Name: "T4"}}}, nil, "fleet[0].product"},
		{"invalid layout", []FleetGPU{{Node: "a", Product: testProduct("H100-80GB"), Layout: Layout{{Profile: "3g.40gb", Start: 2}}}}, nil, "fleet[0].layout"},
		{"duplicate GPU", []FleetGPU{h, h}, nil, "fleet[1]"},
		{"bad profile", []FleetGPU{h}, []Request{{Profile: "3g"}}, "requests[0].profile"},
		{"unknown node", []FleetGPU{h}, []Request{{Profile: "3g.40gb", Node: "b"}}, "requests[0].node"},
	}
	for _, tt := range tests {
		_, err := PlanFleet(tt.fleet, tt.reqs)
		if !errors.Is(err, ErrFleet) || !contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want ErrFleet naming %q", tt.name, err, tt.want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0))
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// checkPlan asserts the plan's invariants: valid result, in-use instances
// kept, operations turn the fleet into After, each request placed once
// with its profile and pin.
func checkPlan(t *testing.T, fleet []FleetGPU, reqs []Request, plan *Plan) {
	t.Helper()
	type gk struct {
		node string
		gpu  int
	}
	cur := map[gk]map[Instance]bool{}
	for _, f := range fleet {
		m := map[Instance]bool{}
		for _, in := range f.Layout {
			m[Instance{Profile: in.Profile, Start: in.Start}] = in.InUse
		}
		cur[gk{f.Node, f.Index}] = m
	}
	sawCreate := false
	for _, o := range plan.Operations {
		m := cur[gk{o.Node, o.GPU}]
		in := Instance{Profile: o.Profile, Start: o.Start}
		switch o.Kind {
		case OpDestroy:
			if sawCreate {
				t.Errorf("destroy after a create: %v", o)
			}
			inUse, ok := m[in]
			if !ok || inUse {
				t.Errorf("%v destroys a missing or in-use instance", o)
			}
			delete(m, in)
		case OpCreate:
			sawCreate = true
			if _, ok := m[in]; ok {
				t.Errorf("%v creates an existing instance", o)
			}
			m[in] = true
		}
	}
	for i, g := range plan.After {
		f := fleet[i]
		p := f.Product
		if err := p.Validate(g.Layout); err != nil {
			t.Errorf("after[%d] invalid: %v", i, err)
		}
		m := cur[gk{f.Node, f.Index}]
		if len(m) != len(g.Layout) {
			t.Errorf("after[%d] = %s, but operations give %d instances", i, g.Layout, len(m))
		}
		for _, in := range g.Layout {
			if _, ok := m[Instance{Profile: in.Profile, Start: in.Start}]; !ok {
				t.Errorf("after[%d] has %v that operations do not produce", i, in)
			}
		}
		for _, in := range f.Layout {
			if !in.InUse {
				continue
			}
			found := false
			for _, a := range g.Layout {
				found = found || (a.Profile == in.Profile && a.Start == in.Start)
			}
			if !found {
				t.Errorf("after[%d] lost in-use %v", i, in)
			}
		}
	}
	seen := map[int]bool{}
	for _, a := range plan.Assignments {
		if seen[a.Request] {
			t.Errorf("request %d assigned twice", a.Request)
		}
		seen[a.Request] = true
		r := reqs[a.Request]
		if pn, _ := ParseProfileName(r.Profile); pn.String() != a.Profile {
			t.Errorf("request %d (%s) got %s", a.Request, r.Profile, a.Profile)
		}
		if !pinOK(r, FleetGPU{Node: a.Node, Index: a.GPU}) {
			t.Errorf("request %d pinned to %q/%v placed on %s/%d", a.Request, r.Node, r.GPU, a.Node, a.GPU)
		}
	}
	for _, u := range plan.Unplaced {
		if seen[u.Request] {
			t.Errorf("request %d both placed and unplaced", u.Request)
		}
		seen[u.Request] = true
	}
	if len(seen) != len(reqs) {
		t.Errorf("%d of %d requests accounted for", len(seen), len(reqs))
	}
}

// RandomInstance makes a random small planning instance: n GPUs of the
// product with random in-use layouts and up to m random requests.
func randomInstance(rng *rand.Rand, product string, n, m int) ([]FleetGPU, []Request) {
	p, _ := Lookup(product)
	layouts, _ := p.Layouts()
	var fleet []FleetGPU
	for i := 0; i < n; i++ {
		f := FleetGPU{Node: "node-" + fmt.Sprint(i/4), Index: i % 4, Product: p}
		if rng.Intn(2) == 0 {
			l := layouts[rng.Intn(len(layouts))]
			for _, in := range l {
				if rng.Intn(2) == 0 {
					in.InUse = rng.Intn(3) > 0
					f.Layout = append(f.Layout, in)
				}
			}
		}
		fleet = append(fleet, f)
	}
	var reqs []Request
	names := p.ProfileNames()
	for j := 0; j < 1+rng.Intn(m); j++ {
		reqs = append(reqs, Request{Profile: names[rng.Intn(len(names))]})
	}
	return fleet, reqs
}

func TestPlanFleetAgainstOptimum(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	gaps := map[int]int{}
	for i := 0; i < 150; i++ {
		product := []string{"H100-80GB", "A100-40GB", "A30-24GB"}[i%3]
		n := 1 + rng.Intn(4)
		fleet, reqs := randomInstance(rng, product, n, 16)
		plan, err := PlanFleet(fleet, reqs, WithSearchBudget(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, fleet, reqs, plan)
		again, _ := PlanFleet(fleet, reqs, WithSearchBudget(time.Minute))
		if diff := cmp.Diff(plan, again, planCmp); diff != "" {
			t.Fatalf("plan not deterministic:\n%s", diff)
		}
		opt, err := Optimum(fleet, reqs)
		if err != nil {
			t.Fatal(err)
		}
		got := plan.Value()
		if opt.Less(got) {
			t.Fatalf("instance %d: plan %+v beats the optimum %+v: optimum is wrong", i, got, opt)
		}
		// The exact search makes every plan optimal.
		if got != opt || !plan.Search.Optimal {
			t.Errorf("instance %d (%d GPUs, %s): plan %+v, optimum %+v, search %+v\nfleet %v\nrequests %v", i, n, product, got, opt, plan.Search, fleet, reqs)
		}
		gaps[opt.Compute-got.Compute]++
	}
	var ks []int
	for k := range gaps {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for _, k := range ks {
		t.Logf("gap %d compute slices: %d instances", k, gaps[k])
	}
}

// TestPreferenceDrivesAllocator shows the online mode with the real
// allocator: publishing slices in the planner's order makes the
// allocator pick the planner's placement, where static order picks
// another.
func TestPreferenceDrivesAllocator(t *testing.T) {
	ctx := context.Background()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	a := alloc.New(testDriver, alloc.Features)
	fleet := []FleetGPU{
		{Node: "a", Index: 0, Product: testProduct("H100-80GB"), Layout: mustLayout(t, "4g.40gb@0*")},
		{Node: "a", Index: 1, Product: testProduct("H100-80GB")},
	}
	gpus, err := ModelGPUs(fleet)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	allocated := sets.New[structured.DeviceID]()
	for _, f := range fleet {
		for _, in := range f.Layout {
			allocated.Insert(structured.MakeDeviceID(testDriver, "a", DeviceRef{GPU: f.Index, Profile: in.Profile, Start: in.Start}.String()))
		}
	}
	sel := fmt.Sprintf(`%s == "mig" && %s == "1g.10gb"`, a.Attr(AttrType), a.Attr(AttrProfile))
	static, err := a.One(ctx, node, m.Slices(testDriver, "a", "a", 1), allocated, sel)
	if err != nil {
		t.Fatal(err)
	}
	if static != "gpu-0-1g-10gb-4" {
		t.Errorf("static order: allocator chose %s, want gpu-0-1g-10gb-4", static)
	}
	names, err := Preference(fleet)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(m.Devices) {
		t.Fatalf("preference names %d devices, model has %d", len(names), len(m.Devices))
	}
	ordered, err := m.Reorder(names)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.One(ctx, node, ordered.Slices(testDriver, "a", "a", 2), allocated, sel)
	if err != nil {
		t.Fatal(err)
	}
	// The planner keeps 3g@4 possible on GPU 0 and GPU 1 whole.
	if got != "gpu-0-1g-10gb-6" {
		t.Errorf("planner order: allocator chose %s, want gpu-0-1g-10gb-6", got)
	}
	// And it is the first fitting 1g.10gb device of the preference.
	for _, n := range names {
		if r, _ := ParseDeviceName(n); r.Profile == "1g.10gb" {
			if n != got {
				t.Errorf("first 1g.10gb in preference is %s, allocator chose %s", n, got)
			}
			break
		}
	}
}

// TestFreeGPUBonusDominates checks the scoring contract: on every product,
// placing any instance on a free GPU loses more score than any placement
// on any partly used GPU, so free GPUs are broken last.
func TestFreeGPUBonusDominates(t *testing.T) {
	for _, p := range Products() {
		var slots []Instance // every profile x placement
		for _, pr := range p.Profiles {
			for _, s := range pr.Starts {
				slots = append(slots, Instance{Profile: pr.Name, Start: s})
			}
		}
		empty := layoutScore(t, p, nil)
		minEmptyLoss := -1
		for _, in := range slots {
			if l := empty - layoutScore(t, p, Layout{in}); minEmptyLoss < 0 || l < minEmptyLoss {
				minEmptyLoss = l
			}
		}
		layouts, err := p.Layouts()
		if err != nil {
			t.Fatal(err)
		}
		maxPartialLoss := 0
		for _, l := range layouts {
			before := layoutScore(t, p, l)
			for _, in := range slots {
				after := append(append(Layout(nil), l...), in)
				if p.Validate(after) == nil {
					maxPartialLoss = max(maxPartialLoss, before-layoutScore(t, p, after))
				}
			}
		}
		if maxPartialLoss >= minEmptyLoss {
			t.Errorf("%s: a partly used GPU can lose %d, a free GPU only %d", p.Name, maxPartialLoss, minEmptyLoss)
		}
	}
}

// TestPreferenceIsAllocatorChoice checks on random node states that the
// real allocator, over slices in the preference order, picks for every
// profile the first device of that profile that fits, which is the
// least-loss placement the planner computes.
func TestPreferenceIsAllocatorChoice(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(11))
	a := alloc.New(testDriver, alloc.Features)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	p := mustLookup(t, "A100-80GB")
	layouts, _ := p.Layouts()
	for iter := 0; iter < 15; iter++ {
		var fleet []FleetGPU
		allocated := sets.New[structured.DeviceID]()
		for i := 0; i < 4; i++ {
			f := FleetGPU{Node: "a", Index: i, Product: p}
			if rng.Intn(4) > 0 {
				f.Layout = append(Layout(nil), layouts[rng.Intn(len(layouts))]...)
			}
			for _, in := range f.Layout {
				allocated.Insert(structured.MakeDeviceID(testDriver, "a", DeviceRef{GPU: i, Profile: in.Profile, Start: in.Start}.String()))
			}
			fleet = append(fleet, f)
		}
		gpus, _ := ModelGPUs(fleet)
		m, err := NewCounterModel(gpus)
		if err != nil {
			t.Fatal(err)
		}
		names, err := Preference(fleet)
		if err != nil {
			t.Fatal(err)
		}
		ordered, err := m.Reorder(names)
		if err != nil {
			t.Fatal(err)
		}
		slices := ordered.Slices(testDriver, "a", "a", int64(iter+1))
		for _, prof := range p.ProfileNames() {
			// The planner's choice: the least loss over all fitting slots.
			want, bestLoss, bestRunning, bestFree := "", 0, 0, 0
			pr, _ := p.Profile(prof)
			for gi, g := range fleet {
				st := g.Layout
				for _, start := range pr.Starts {
					after := append(append(Layout(nil), st...), Instance{Profile: prof, Start: start})
					if p.Validate(after) != nil {
						continue
					}
					loss := layoutScore(t, p, st) - layoutScore(t, p, after)
					free := p.MemorySlices
					for _, in := range after {
						q, _ := p.Profile(in.Profile)
						free -= q.MemorySlices
					}
					running := len(fleet[gi].Layout)
					if want == "" || loss < bestLoss || (loss == bestLoss && running > bestRunning) ||
						(loss == bestLoss && running == bestRunning && free < bestFree) {
						want, bestLoss, bestRunning, bestFree = DeviceRef{GPU: gi, Profile: prof, Start: start}.String(), loss, running, free
					}
				}
			}
			sel := fmt.Sprintf(`%s == "mig" && %s == %q`, a.Attr(AttrType), a.Attr(AttrProfile), prof)
			got, err := a.One(ctx, node, slices, allocated, sel)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("state %d, %s: allocator chose %q, planner wants %q (layouts %v)", iter, prof, got, want, fleet)
			}
		}
	}
}

// TestConcurrentPlanning runs planners side by side (they share the
// per-product score memo); run with -race.
func TestConcurrentPlanning(t *testing.T) {
	fleet, reqs := benchFleet(16, 12, 5)
	want, err := PlanFleet(fleet, reqs)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			got, err := PlanFleet(fleet, reqs)
			if err == nil && !cmp.Equal(want, got, planCmp) {
				err = fmt.Errorf("concurrent plan differs")
			}
			if err == nil {
				_, err = Preference(fleet[:8])
			}
			errs <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestPreferenceTieBreakMostInstances: among placements of equal loss and
// equal free space, the GPU running the most instances comes first (it is
// the last to drain).
func TestPreferenceTieBreakMostInstances(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	fleet := []FleetGPU{
		{Node: "a", Index: 0, Product: h, Layout: mustLayout(t, "3g.40gb@0*")},
		{Node: "a", Index: 1, Product: h, Layout: mustLayout(t, "1g.10gb@0*,1g.10gb@1*,2g.20gb@2*")},
	}
	names, err := Preference(fleet)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if r, _ := ParseDeviceName(n); r.Profile == "1g.10gb" {
			if r.GPU != 1 {
				t.Errorf("first 1g.10gb placement is %s, want one on gpu-1 (three instances, gpu-0 has one)", n)
			}
			break
		}
	}
}
