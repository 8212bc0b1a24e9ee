package mig

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/partition/plan"
)

// restartableLayout parses a layout in which "~" marks an in-use,
// restartable instance ("1g.10gb@0~"), "*" an in-use one.
func restartableLayout(t testing.TB, s string) Layout {
	t.Helper()
	var marks []bool
	items := strings.Split(s, ",")
	for i, it := range items {
		r := strings.HasSuffix(strings.TrimSpace(it), "~")
		marks = append(marks, r)
		if r {
			items[i] = strings.TrimSuffix(strings.TrimSpace(it), "~") + "*"
		}
	}
	l := mustLayout(t, strings.Join(items, ","))
	if s == "" || s == "-" {
		return l
	}
	for i := range l {
		l[i].Restartable = marks[i]
	}
	return l
}

func defragFleet(t testing.TB, product string, layouts ...string) []FleetGPU {
	t.Helper()
	var f []FleetGPU
	for i, s := range layouts {
		f = append(f, FleetGPU{Node: "a", Index: i, Product: testProduct(product), Layout: restartableLayout(t, s)})
	}
	return f
}

func TestDefragment(t *testing.T) {
	gpu1 := 1
	tests := []struct {
		name      string
		fleet     []FleetGPU
		req       Request
		opts      []plan.DefragOption
		wantFound bool
		wantMoves []string
		wantTgt   string // node/gpu-i profile@start
		wantAfter []string
		reason    string // substring of Reason when not found
	}{
		{
			name:      "fits already: no moves",
			fleet:     defragFleet(t, "H100-80GB", "1g.10gb@6~"),
			req:       Request{Profile: "4g.40gb"},
			wantFound: true,
			wantTgt:   "a/gpu-0 4g.40gb@0",
			wantAfter: []string{"4g.40gb@0*,1g.10gb@6*"},
		},
		{
			name:      "one move: the 1g in the way goes to the other GPU's free slice",
			fleet:     defragFleet(t, "H100-80GB", "1g.10gb@0~,3g.40gb@4*", "4g.40gb@0*,2g.20gb@4*"),
			req:       Request{Profile: "4g.40gb"},
			wantFound: true,
			wantMoves: []string{"a/gpu-0 1g.10gb@0 -> a/gpu-1@6"},
			wantTgt:   "a/gpu-0 4g.40gb@0",
			wantAfter: []string{"4g.40gb@0*,3g.40gb@4*", "4g.40gb@0*,2g.20gb@4*,1g.10gb@6*"},
		},
		{
			name:      "scattered 1g at 0, 2, 4, 6: two move, to the other GPU",
			fleet:     defragFleet(t, "H100-80GB", "1g.10gb@0~,1g.10gb@2~,1g.10gb@4~,1g.10gb@6~", "4g.40gb@0*,1g.10gb@4*"),
			req:       Request{Profile: "4g.40gb"},
			wantFound: true,
			wantMoves: []string{"a/gpu-0 1g.10gb@0 -> a/gpu-0@5", "a/gpu-0 1g.10gb@2 -> a/gpu-1@5"},
			wantTgt:   "a/gpu-0 4g.40gb@0",
			wantAfter: []string{"4g.40gb@0*,1g.10gb@4*,1g.10gb@5*,1g.10gb@6*", "4g.40gb@0*,1g.10gb@4*,1g.10gb@5*"},
		},
		{
			name:   "scattered 1g, at most one move: none",
			fleet:  defragFleet(t, "H100-80GB", "1g.10gb@0~,1g.10gb@2~,1g.10gb@4~,1g.10gb@6~", "4g.40gb@0*,1g.10gb@4*"),
			req:    Request{Profile: "4g.40gb"},
			opts:   []plan.DefragOption{plan.WithMaxMoves(1)},
			reason: "no plan moves at most 1 restartable instances",
		},
		{
			name:   "the instance in the way is not restartable",
			fleet:  defragFleet(t, "H100-80GB", "1g.10gb@0*,1g.10gb@4*", "4g.40gb@0*,3g.40gb@4*"),
			req:    Request{Profile: "4g.40gb"},
			reason: "overlaps an instance that is not restartable",
		},
		{
			name:   "not enough compute anywhere",
			fleet:  defragFleet(t, "H100-80GB", "4g.40gb@0~,2g.20gb@4~", "7g.80gb@0~"),
			req:    Request{Profile: "3g.40gb"},
			reason: "the fleet has 1 free compute slices, 3g.40gb needs 3",
		},
		{
			name:      "pinned to GPU 1: moves there, not on the freer GPU 0",
			fleet:     defragFleet(t, "H100-80GB", "-", "1g.10gb@0~,3g.40gb@4*"),
			req:       Request{Profile: "4g.40gb", GPU: &gpu1},
			wantFound: true,
			wantMoves: []string{"a/gpu-1 1g.10gb@0 -> a/gpu-0@6"},
			wantTgt:   "a/gpu-1 4g.40gb@0",
			wantAfter: []string{"1g.10gb@6*", "4g.40gb@0*,3g.40gb@4*"},
		},
		{
			name:      "no overlap but one +me per GPU: the +me instance moves away",
			fleet:     defragFleet(t, "H100-80GB", "1g.10gb+me@0~,3g.40gb@4*", "4g.40gb@0*,2g.20gb@4*"),
			req:       Request{Profile: "1g.10gb+me", GPU: new(int)},
			wantFound: true,
			wantMoves: []string{"a/gpu-0 1g.10gb+me@0 -> a/gpu-1@6"},
			wantTgt:   "a/gpu-0 1g.10gb+me@0",
		},
		{
			name:   "profile the product lacks",
			fleet:  defragFleet(t, "H100-80GB", "-"),
			req:    Request{Profile: "4g.20gb"},
			reason: "no GPU the request may use offers profile 4g.20gb",
		},
		{
			name:      "a 1g that blocks the 3g moves within its own GPU, where it keeps a 1g large free",
			fleet:     defragFleet(t, "H100-80GB", "1g.10gb@1~,1g.10gb@5*"),
			req:       Request{Profile: "3g.40gb"},
			wantFound: true,
			wantMoves: []string{"a/gpu-0 1g.10gb@1 -> a/gpu-0@4"},
			wantTgt:   "a/gpu-0 3g.40gb@0",
			wantAfter: []string{"3g.40gb@0*,1g.10gb@4*,1g.10gb@5*"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Defragment(tc.fleet, tc.req, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if d.Found != tc.wantFound {
				t.Fatalf("Found = %v, want %v (reason %q, moves %v)", d.Found, tc.wantFound, d.Reason, d.Moves)
			}
			if !d.Complete {
				t.Errorf("Complete = false: %s", d.Reason)
			}
			if !d.Found {
				if !strings.Contains(d.Reason, tc.reason) {
					t.Errorf("Reason = %q, want it to contain %q", d.Reason, tc.reason)
				}
				return
			}
			var moves []string
			for _, m := range d.Moves {
				moves = append(moves, m.String())
			}
			if diff := cmp.Diff(tc.wantMoves, moves); diff != "" {
				t.Errorf("moves (-want +got):\n%s", diff)
			}
			if got := fmt.Sprintf("%s/gpu-%d %s@%d", d.Target.Node, d.Target.GPU, d.Target.Profile, d.Target.Start); got != tc.wantTgt {
				t.Errorf("target = %s, want %s", got, tc.wantTgt)
			}
			if tc.wantAfter != nil {
				var after []string
				for _, g := range d.After {
					after = append(after, g.Layout.String())
				}
				if diff := cmp.Diff(tc.wantAfter, after); diff != "" {
					t.Errorf("after (-want +got):\n%s", diff)
				}
			}
			checkDefrag(t, tc.fleet, tc.req, d)
		})
	}
}

func TestDefragmentErrors(t *testing.T) {
	fleet := defragFleet(t, "H100-80GB", "1g.10gb@0~")
	neg := -1
	for _, tc := range []struct {
		name string
		fl   []FleetGPU
		req  Request
		opts []plan.DefragOption
		want string
	}{
		{"bad profile", fleet, Request{Profile: "4g"}, nil, "parse profile name"},
		{"unknown node", fleet, Request{Profile: "4g.40gb", Node: "b"}, nil, `node "b" is not in the fleet`},
		{"negative gpu", fleet, Request{Profile: "4g.40gb", GPU: &neg}, nil, "gpu -1 is negative"},
		{"max moves", fleet, Request{Profile: "4g.40gb"}, []plan.DefragOption{plan.WithMaxMoves(9)}, "between 0 and 8"},
		{"work budget", fleet, Request{Profile: "4g.40gb"}, []plan.DefragOption{plan.WithWorkBudget(0)}, "must be positive"},
		{"invalid layout", defragFleet(t, "H100-80GB", "4g.40gb@0~,3g.40gb@0~"), Request{Profile: "1g.10gb"}, nil, "overlap"},
		{"nil product", []FleetGPU{{Node: "a"}}, Request{Profile: "1g.10gb"}, nil, "product is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Defragment(tc.fl, tc.req, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(tc.name, "layout") || strings.Contains(tc.name, "node") {
				if !errors.Is(err, ErrFleet) {
					t.Errorf("err = %v, want it to wrap ErrFleet", err)
				}
			}
		})
	}
}

func TestDefragmentBudget(t *testing.T) {
	fleet := defragFleet(t, "H100-80GB", "1g.10gb@0~,1g.10gb@2~,1g.10gb@4~,1g.10gb@6~", "4g.40gb@0*,1g.10gb@4*")
	d, err := Defragment(fleet, Request{Profile: "4g.40gb"}, plan.WithWorkBudget(3))
	if err != nil {
		t.Fatal(err)
	}
	if d.Found || d.Complete || !strings.Contains(d.Reason, "gave up: work budget 3") {
		t.Fatalf("got Found %v Complete %v Reason %q, want a search that gives up", d.Found, d.Complete, d.Reason)
	}
	full, err := Defragment(fleet, Request{Profile: "4g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	// The same budget gives the same plan: work, not time, bounds it.
	again, err := Defragment(fleet, Request{Profile: "4g.40gb"}, plan.WithWorkBudget(full.Work))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(full, again, cmp.Comparer(func(a, b *Product) bool { return a == b }), cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Budget" }, cmp.Ignore())); diff != "" {
		t.Errorf("plan with budget = its work differs (-full +again):\n%s", diff)
	}
}

// checkDefrag checks a plan against the rules, independently of the
// search: every GPU of After is valid, the moves are restartable in-use
// instances, at most MaxMoves, and After is the fleet with them moved
// and the request added.
func checkDefrag(t testing.TB, fleet []FleetGPU, req Request, d *Defrag) {
	t.Helper()
	if !d.Found {
		return
	}
	if len(d.Moves) > d.MaxMoves {
		t.Fatalf("%d moves, at most %d allowed", len(d.Moves), d.MaxMoves)
	}
	if len(d.After) != len(fleet) {
		t.Fatalf("After has %d GPUs, fleet %d", len(d.After), len(fleet))
	}
	want := map[string]int{} // node/gpu/profile@start -> count, in-use instances expected in After
	key := func(node string, gpu int, prof string, start int) string {
		return fmt.Sprintf("%s/%d/%s@%d", node, gpu, prof, start)
	}
	for _, f := range fleet {
		for _, in := range f.Layout {
			if in.InUse {
				want[key(f.Node, f.Index, in.Profile, in.Start)]++
			}
		}
	}
	for _, m := range d.Moves {
		k := key(m.Node, m.GPU, m.Profile, m.Start)
		if want[k] == 0 {
			t.Fatalf("move %s: no such in-use instance", m)
		}
		restartable := false
		for _, f := range fleet {
			for _, in := range f.Layout {
				if f.Node == m.Node && f.Index == m.GPU && in.Profile == m.Profile && in.Start == m.Start {
					restartable = in.Restartable
				}
			}
		}
		if !restartable {
			t.Fatalf("move %s: instance is not restartable", m)
		}
		want[k]--
		want[key(m.ToNode, m.ToGPU, m.Profile, m.ToStart)]++
	}
	pn, _ := ParseProfileName(req.Profile)
	if d.Target.Profile != pn.String() || !pinOK(req, FleetGPU{Node: d.Target.Node, Index: d.Target.GPU}) {
		t.Fatalf("target %+v does not serve request %+v", d.Target, req)
	}
	want[key(d.Target.Node, d.Target.GPU, d.Target.Profile, d.Target.Start)]++
	got := map[string]int{}
	score := 0
	for i, g := range d.After {
		if g.Node != fleet[i].Node || g.Index != fleet[i].Index || g.Product != fleet[i].Product {
			t.Fatalf("After[%d] is %s/%d, fleet %s/%d", i, g.Node, g.Index, fleet[i].Node, fleet[i].Index)
		}
		if err := g.Product.Validate(g.Layout); err != nil {
			t.Fatalf("After[%d] %s: %v", i, g.Layout, err)
		}
		var used Layout
		for _, in := range g.Layout {
			if in.InUse {
				got[key(g.Node, g.Index, in.Profile, in.Start)]++
				used = append(used, in)
			}
		}
		score += layoutScore(t, g.Product, used)
	}
	for k, n := range want {
		if n == 0 {
			delete(want, k)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("in-use instances of After (-want +got):\n%s", diff)
	}
	if score != d.Score {
		t.Fatalf("Score = %d, After scores %d", d.Score, score)
	}
}

// feasibleAfter reports, by Optimum's exhaustive search (independent of
// Defragment's), whether the request and the instances of set all fit on
// the fleet with the set's instances taken out.
func feasibleAfter(t testing.TB, fleet []FleetGPU, req Request, set [][2]int) bool {
	t.Helper()
	out := map[[2]int]bool{}
	for _, s := range set {
		out[s] = true
	}
	reqs := []Request{{Profile: req.Profile}}
	var f2 []FleetGPU
	for gi, f := range fleet {
		nf := FleetGPU{Node: f.Node, Index: f.Index, Product: f.Product}
		for ii, in := range f.Layout {
			if !in.InUse {
				continue
			}
			if out[[2]int{gi, ii}] {
				reqs = append(reqs, Request{Profile: in.Profile})
				continue
			}
			nf.Layout = append(nf.Layout, in)
		}
		f2 = append(f2, nf)
	}
	v, err := Optimum(f2, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return v.Count == len(reqs)
}

// TestDefragmentProperty checks Defragment on random fleets against the
// rules (checkDefrag) and against an exhaustive search: a plan of t moves
// exists exactly when no set of fewer restartable instances would do, and
// when none is found no set of at most MaxMoves would do.
func TestDefragmentProperty(t *testing.T) {
	runs := 400
	if testing.Short() {
		runs = 80
	}
	moves := map[int]int{}
	for seed := int64(0); seed < int64(runs); seed++ {
		if d := defragProperty(t, seed); d.Found {
			moves[len(d.Moves)]++
		} else {
			moves[-1]++
		}
	}
	t.Logf("plans by number of moves (-1: none): %v", moves)
	if moves[2] == 0 || moves[1] == 0 {
		t.Errorf("the random fleets need no plan of one or two moves (%v): the test checks too little", moves)
	}
}

// FuzzDefragment is TestDefragmentProperty on fuzzed seeds.
func FuzzDefragment(f *testing.F) {
	for _, s := range []int64{1, 7, 42} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed int64) { defragProperty(t, seed) })
}

// defragProperty makes a random, mostly full fleet of up to three GPUs
// whose in-use instances are mostly restartable, asks for a random
// profile (large ones more often) and checks Defragment's answer.
func defragProperty(t *testing.T, seed int64) *Defrag {
	rng := rand.New(rand.NewSource(seed))
	products := []string{"H100-80GB", "A100-40GB", "A30-24GB"}
	p := testProduct(products[rng.Intn(len(products))])
	var plain []string
	for _, pr := range p.Profiles {
		if !pr.MediaExtensions {
			plain = append(plain, pr.Name)
		}
	}
	all, _ := p.Layouts()
	var layouts []Layout
	for _, l := range all {
		if ok, _ := p.IsMaximal(l, plain...); ok {
			layouts = append(layouts, l)
		}
	}
	n := 1 + rng.Intn(3)
	var fleet []FleetGPU
	var movable [][2]int
	for gi := 0; gi < n; gi++ {
		f := FleetGPU{Node: fmt.Sprintf("n%d", gi/2), Index: gi % 2, Product: p}
		for _, in := range layouts[rng.Intn(len(layouts))] {
			if rng.Intn(3) == 0 {
				continue
			}
			in.InUse = rng.Intn(8) > 0
			in.Restartable = in.InUse && rng.Intn(5) > 0
			if in.Restartable {
				movable = append(movable, [2]int{gi, len(f.Layout)})
			}
			f.Layout = append(f.Layout, in)
		}
		fleet = append(fleet, f)
	}
	req := Request{Profile: p.Profiles[rng.Intn(len(p.Profiles))].Name}
	if rng.Intn(2) == 0 {
		req.Profile = plain[len(plain)-1-rng.Intn(3)]
	}
	k := rng.Intn(4)
	d, err := Defragment(fleet, req, plan.WithMaxMoves(k))
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if !d.Complete {
		t.Fatalf("seed %d: search did not complete on %d GPUs: %s", seed, n, d.Reason)
	}
	checkDefrag(t, fleet, req, d)
	limit := k
	if d.Found {
		limit = len(d.Moves) - 1
		var set [][2]int
		for _, m := range d.Moves {
			for gi, f := range fleet {
				for ii, in := range f.Layout {
					if f.Node == m.Node && f.Index == m.GPU && in.Profile == m.Profile && in.Start == m.Start {
						set = append(set, [2]int{gi, ii})
					}
				}
			}
		}
		if !feasibleAfter(t, fleet, req, set) {
			t.Fatalf("seed %d: the exhaustive search finds moving %v infeasible", seed, d.Moves)
		}
	}
	// No smaller set (or, when none was found, no set within k) works.
	var rec func(from int, set [][2]int)
	rec = func(from int, set [][2]int) {
		if feasibleAfter(t, fleet, req, set) {
			t.Fatalf("seed %d: moving %v (%d instances) would do; Defragment found %v (found %v, reason %q)", seed, set, len(set), d.Moves, d.Found, d.Reason)
		}
		if len(set) == limit {
			return
		}
		for i := from; i < len(movable); i++ {
			rec(i+1, append(set, movable[i]))
		}
	}
	if limit >= 0 {
		rec(0, nil)
	}
	return d
}

func TestDefragmentDeterministic(t *testing.T) {
	fleet := defragFleet(t, "H100-80GB", "1g.10gb@0~,1g.10gb@2~,1g.10gb@4~,1g.10gb@6~", "2g.20gb@0~,1g.10gb@3~,3g.40gb@4*", "1g.10gb@1~,2g.20gb@2~,1g.10gb@5~")
	first, err := Defragment(fleet, Request{Profile: "7g.80gb"}, plan.WithMaxMoves(3))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		again, _ := Defragment(fleet, Request{Profile: "7g.80gb"}, plan.WithMaxMoves(3))
		if diff := cmp.Diff(first, again, cmp.Comparer(func(a, b *Product) bool { return a == b })); diff != "" {
			t.Fatalf("run %d differs:\n%s", i, diff)
		}
	}
}
