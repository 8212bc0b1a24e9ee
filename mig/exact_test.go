package mig

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fullCorpus returns every multiset of up to maxReqs requests of the given
// profiles that fills n empty GPUs of p exactly: the sums of n per-GPU
// layouts that use all compute slices. Each is feasible by construction
// (its GPUs' layouts are a complete packing), independently of any
// planner.
func fullCorpus(t *testing.T, p *Product, names []string, n, maxReqs int) [][]int {
	t.Helper()
	idx := map[string]int{}
	for i, name := range names {
		idx[name] = i
	}
	seen := map[[maxProfiles]int]bool{}
	var comps [][maxProfiles]int
	for _, l := range fullLayouts(p, names) {
		var v [maxProfiles]int
		for _, in := range l {
			v[idx[in.Profile]]++
		}
		if !seen[v] {
			seen[v] = true
			comps = append(comps, v)
		}
	}
	corpus := map[[maxProfiles]int]bool{}
	var order [][maxProfiles]int
	var sum [maxProfiles]int
	count := 0
	var rec func(from, left int)
	rec = func(from, left int) {
		if count > maxReqs {
			return
		}
		if left == 0 {
			if !corpus[sum] {
				corpus[sum] = true
				order = append(order, sum)
			}
			return
		}
		for i := from; i < len(comps); i++ {
			for j := range names {
				sum[j] += comps[i][j]
				count += comps[i][j]
			}
			rec(i, left-1)
			for j := range names {
				sum[j] -= comps[i][j]
				count -= comps[i][j]
			}
		}
	}
	rec(0, n)
	out := make([][]int, len(order))
	for i, v := range order {
		out[i] = v[:len(names)]
	}
	return out
}

func requestsOf(names []string, counts []int) []Request {
	var reqs []Request
	for j, c := range counts {
		for k := 0; k < c; k++ {
			reqs = append(reqs, Request{Profile: names[j]})
		}
	}
	return reqs
}

func emptyFleet(p *Product, n int) []FleetGPU {
	fleet := make([]FleetGPU, n)
	for i := range fleet {
		fleet[i] = FleetGPU{Node: "n", Index: i, Product: p}
	}
	return fleet
}

// TestPlanFleetCompleteOnFullCorpus: on 8 empty H100-80GB GPUs, PlanFleet
// places every request of every multiset of up to 30 requests of the six
// plain profiles that fills the fleet exactly (7,251 multisets, each
// feasible by construction). Its heuristic alone fails on about a third
// of them. With -short, every fifth multiset.
func TestPlanFleetCompleteOnFullCorpus(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	names := []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	corpus := fullCorpus(t, h, names, 8, OptimumMaxRequests)
	if len(corpus) != 7251 {
		t.Fatalf("corpus has %d multisets, want 7251", len(corpus))
	}
	fleet := emptyFleet(h, 8)
	step := 1
	if testing.Short() {
		step = 5
	}
	searched, improved := 0, 0
	var slowest time.Duration
	for i := 0; i < len(corpus); i += step {
		reqs := requestsOf(names, corpus[i])
		plan, err := PlanFleet(fleet, reqs, WithSearchBudget(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Unplaced) > 0 || !plan.Search.Optimal {
			t.Errorf("%v: %d of %d requests unplaced (search %+v)", corpus[i], len(plan.Unplaced), len(reqs), plan.Search)
			continue
		}
		if plan.Search.Ran {
			searched++
			slowest = max(slowest, plan.Search.Elapsed)
		}
		if plan.Search.Improved {
			improved++
		}
	}
	t.Logf("%d multisets checked; exact search ran on %d and completed the heuristic's plan on %d; slowest search %s", (len(corpus)+step-1)/step, searched, improved, slowest)
}

// TestPlanFleetIssueExample is the tight instance of issue 15: 56 of 56
// compute slices on 8 H100s, where the heuristic alone places 55.
func TestPlanFleetIssueExample(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	names := []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	reqs := requestsOf(names, []int{10, 6, 5, 3, 1})
	fleet := emptyFleet(h, 8)
	opt, err := Optimum(fleet, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if opt != (Value{Compute: 56, Count: 25}) {
		t.Fatalf("optimum %+v, want everything (56 compute, 25 requests)", opt)
	}
	heur, err := PlanFleet(fleet, reqs, WithSearchBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	if heur.Search.Ran || len(heur.Unplaced) == 0 || heur.Search.Optimal {
		t.Errorf("heuristic alone: %d unplaced, search %+v; want requests unplaced, no search, not optimal", len(heur.Unplaced), heur.Search)
	}
	plan, err := PlanFleet(fleet, reqs)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, fleet, reqs, plan)
	if plan.Value() != opt || !plan.Search.Ran || !plan.Search.Improved || !plan.Search.Optimal || plan.Search.Work != DefaultSearchWork || plan.Search.Budget != 0 {
		t.Errorf("plan value %+v (optimum %+v), search %+v", plan.Value(), opt, plan.Search)
	}
}

// TestPlanFleetFullWithInUseAndPins: random fleets with in-use instances
// whose requests are the rest of a random maximal layout of every GPU,
// some pinned to the GPU (or node) they came from: a complete plan exists
// and PlanFleet finds it.
func TestPlanFleetFullWithInUseAndPins(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, name := range []string{"H100-80GB", "A30-24GB"} {
		p := mustLookup(t, name)
		all, _ := p.Layouts()
		var maximal []Layout
		for _, l := range all {
			if ok, _ := p.IsMaximal(l); ok {
				maximal = append(maximal, l)
			}
		}
		for iter := 0; iter < 150; iter++ {
			n := 1 + rng.Intn(8)
			pins := iter%4 == 0
			var fleet []FleetGPU
			var reqs []Request
			for i := 0; i < n; i++ {
				f := FleetGPU{Node: fmt.Sprintf("node-%d", i/3), Index: i % 3, Product: p}
				for _, in := range maximal[rng.Intn(len(maximal))] {
					switch x := rng.Intn(24); {
					case x < 3:
						in.InUse = true
						f.Layout = append(f.Layout, in)
					case x == 3 && pins:
						idx := f.Index
						reqs = append(reqs, Request{Profile: in.Profile, Node: f.Node, GPU: &idx})
					case x == 4 && pins:
						reqs = append(reqs, Request{Profile: in.Profile, Node: f.Node})
					default:
						reqs = append(reqs, Request{Profile: in.Profile})
					}
				}
				fleet = append(fleet, f)
			}
			rng.Shuffle(len(reqs), func(a, b int) { reqs[a], reqs[b] = reqs[b], reqs[a] })
			plan, err := PlanFleet(fleet, reqs, WithSearchBudget(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if plan.Search.Elapsed > 100*time.Millisecond {
				t.Logf("SLOW %s %d %+v", name, iter, plan.Search)
			}
			checkPlan(t, fleet, reqs, plan)
			if len(plan.Unplaced) > 0 {
				t.Errorf("%s instance %d: %d of %d requests unplaced, search %+v\nfleet %v\nrequests %v", name, iter, len(plan.Unplaced), len(reqs), plan.Search, fleet, reqs)
			}
		}
	}
}

func TestSearchBudgetOption(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	if _, err := PlanFleet(emptyFleet(h, 1), nil, WithSearchBudget(-time.Second)); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative budget: error %v, want one saying negative", err)
	}
	// Everything placed: optimal without a search.
	plan, err := PlanFleet(emptyFleet(h, 1), []Request{{Profile: "3g.40gb"}})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Search.Ran || !plan.Search.Optimal {
		t.Errorf("complete plan: search %+v, want not run and optimal", plan.Search)
	}
	// A profile no GPU offers: the search proves at once that nothing
	// better exists.
	plan, err = PlanFleet(emptyFleet(h, 1), []Request{{Profile: "3g.40gb"}, {Profile: "2g.12gb"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Unplaced) != 1 || !plan.Search.Optimal || plan.Search.Improved {
		t.Errorf("unoffered profile: %d unplaced, search %+v; want 1, optimal, not improved", len(plan.Unplaced), plan.Search)
	}
}

// TestPlanFleetNVMLProduct plans on a product built from what NVML
// reports, under a name the catalog does not know: no name lookup stands
// between a real GPU and the planner.
func TestPlanFleetNVMLProduct(t *testing.T) {
	info := NVMLInfo{ProductName: "NVIDIA Future GPU", Profiles: []NVMLProfileInfo{
		{ID: 19, Name: "MIG 1g.12gb", SliceCount: 1, InstanceCount: 4, MemorySizeMB: 12000, Placements: []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}}},
		{ID: 14, Name: "MIG 2g.24gb", SliceCount: 2, InstanceCount: 2, MemorySizeMB: 24000, Placements: []Placement{{0, 2}, {2, 2}}},
		{ID: 5, Name: "MIG 4g.48gb", SliceCount: 4, InstanceCount: 1, MemorySizeMB: 48000, Placements: []Placement{{0, 4}}},
	}}
	p, err := FromNVML(info)
	if err != nil {
		t.Fatal(err)
	}
	fleet := []FleetGPU{{Node: "a", Index: 0, Product: p, Layout: Layout{{Profile: "2g.24gb", Start: 0, InUse: true}}}, {Node: "a", Index: 1, Product: p}}
	reqs := []Request{{Profile: "1g.12gb"}, {Profile: "4g.48gb"}}
	plan, err := PlanFleet(fleet, reqs)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, fleet, reqs, plan)
	var after []string
	for _, g := range plan.After {
		after = append(after, g.Layout.String())
	}
	if diff := cmp.Diff([]string{"2g.24gb@0*,1g.12gb@2*", "4g.48gb@0*"}, after); diff != "" {
		t.Errorf("after (-want +got):\n%s", diff)
	}
	names, err := Preference(fleet)
	if err != nil {
		t.Fatal(err)
	}
	// Full GPUs first (only GPU 1 is free), then 1g.12gb on the used GPU.
	if names[0] != "gpu-1" || names[2] != "gpu-0-1g-12gb-2" {
		t.Errorf("preference %v, want gpu-1 first and gpu-0-1g-12gb-2 first of the instances", names)
	}
}

func TestFleetGPUJSON(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	nvml, err := FromNVML(NVMLInfo{ProductName: "NVIDIA Future GPU", Profiles: []NVMLProfileInfo{
		{ID: 0, Name: "MIG 4g.48gb", SliceCount: 4, InstanceCount: 1, MemorySizeMB: 48000, Placements: []Placement{{0, 4}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	in := []FleetGPU{
		{Node: "a", Index: 0, Product: h, Layout: Layout{{Profile: "3g.40gb", Start: 4, InUse: true}}},
		{Node: "a", Index: 1, Product: nvml},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"product":"H100-80GB"`) || !strings.Contains(string(b), `"product":{"name":"NVIDIA Future GPU"`) {
		t.Errorf("JSON %s: want the catalog product by name and the NVML one as an object", b)
	}
	var out []FleetGPU
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out[0].Product != h {
		t.Errorf("catalog product decoded as %p, want the catalog's %p", out[0].Product, h)
	}
	if diff := cmp.Diff(nvml.Profiles, out[1].Product.Profiles); diff != "" || out[1].Product.Name != nvml.Name || out[1].Layout != nil || out[0].Layout.String() != "3g.40gb@4*" {
		t.Errorf("round trip differs: %+v (profiles -want +got):\n%s", out, diff)
	}
	if _, err := PlanFleet(out, []Request{{Profile: "4g.48gb"}}); err != nil {
		t.Errorf("plan on decoded fleet: %v", err)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"node":"a","index":0}`, "product is missing"},
		{`{"node":"a","index":0,"product":"Tesla T4"}`, "unknown MIG product"},
		{`{"node":"a","index":0,"product":"H100-80GB","color":"red"}`, "unknown field"},
		{`{"node":"a","index":0,"product":{"name":"x","memorySlices":0,"computeSlices":7}}`, "memorySlices 0"},
	} {
		var f FleetGPU
		err := json.Unmarshal([]byte(tc.in), &f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decode %s: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
	var notBuilt FleetGPU
	if _, err := PlanFleet([]FleetGPU{notBuilt}, nil); !errors.Is(err, ErrProductNotBuilt) {
		t.Errorf("plan with a nil product: error %v, want ErrProductNotBuilt", err)
	}
}

// randomFill makes n empty GPUs, products round robin, and the requests
// of one random layout per GPU that uses all its compute slices (plain
// profiles): a complete packing exists by construction.
func randomFill(rng *rand.Rand, ps []*Product, n int) ([]FleetGPU, []Request) {
	full := map[*Product][]Layout{}
	for _, p := range ps {
		var plain []string
		for _, pr := range p.Profiles {
			if !pr.MediaExtensions {
				plain = append(plain, pr.Name)
			}
		}
		full[p] = fullLayouts(p, plain)
	}
	var fleet []FleetGPU
	var reqs []Request
	for i := 0; i < n; i++ {
		p := ps[i%len(ps)]
		for _, in := range full[p][rng.Intn(len(full[p]))] {
			reqs = append(reqs, Request{Profile: in.Profile})
		}
		fleet = append(fleet, FleetGPU{Node: fmt.Sprintf("node-%d", i/8), Index: i % 8, Product: p})
	}
	rng.Shuffle(len(reqs), func(a, b int) { reqs[a], reqs[b] = reqs[b], reqs[a] })
	return fleet, reqs
}

// TestPlanFleetCompleteBeyondOneNode: exact fills of 16, 32 and 64 empty
// GPUs, H100-80GB alone and H100-80GB with A100-40GB (which share the
// name 1g.10gb: a 1g on one, a 1g large on the other), are placed
// completely within the default work budget, 50 random fills per row
// (10 with -short). Before the neighbourhood search and the split by
// product, 2-16 of 40 per row from 32 GPUs on were left incomplete.
func TestPlanFleetCompleteBeyondOneNode(t *testing.T) {
	h, a := mustLookup(t, "H100-80GB"), mustLookup(t, "A100-40GB")
	runs := 50
	if testing.Short() {
		runs = 10
	}
	for _, n := range []int{16, 32, 64} {
		for _, ps := range [][]*Product{{h}, {h, a}} {
			name := fmt.Sprintf("%d GPUs of %d products", n, len(ps))
			rng := rand.New(rand.NewSource(int64(n * len(ps))))
			maxNodes := 0
			for i := 0; i < runs; i++ {
				fleet, reqs := randomFill(rng, ps, n)
				plan, err := PlanFleet(fleet, reqs)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, fleet, reqs, plan)
				if len(plan.Unplaced) > 0 {
					t.Errorf("%s, fill %d: %d of %d requests unplaced, search %+v", name, i, len(plan.Unplaced), len(reqs), plan.Search)
				}
				maxNodes = max(maxNodes, plan.Search.Nodes)
			}
			t.Logf("%s: %d fills placed completely, most work %d of %d", name, runs, maxNodes, DefaultSearchWork)
		}
	}
}

// TestPlanFleetIssue26Example is issue 26's instance: 64 empty H100s
// where the search of the time, after 102,400 nodes, left a 1g.10gb out.
// It is placed completely, and the plan is the same on every run (the
// budget counts work, not time).
func TestPlanFleetIssue26Example(t *testing.T) {
	h := mustLookup(t, "H100-80GB")
	names := []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	reqs := requestsOf(names, []int{148, 33, 37, 30, 7, 7})
	fleet := emptyFleet(h, 64)
	for i := range fleet {
		fleet[i].Node, fleet[i].Index = fmt.Sprintf("node-%d", i/8), i%8
	}
	plan, err := PlanFleet(fleet, reqs)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, fleet, reqs, plan)
	if len(plan.Unplaced) > 0 {
		t.Fatalf("%d requests unplaced, search %+v", len(plan.Unplaced), plan.Search)
	}
	again, err := PlanFleet(fleet, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plan, again, planCmp); diff != "" {
		t.Errorf("two runs differ:\n%s", diff)
	}
}
