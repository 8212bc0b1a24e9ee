package engine_test

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

// randomFleet makes n cards, schemes round robin, each empty or holding
// a random valid layout in use (restartable with probability half), and
// up to maxReqs requests for random profiles of the schemes.
func randomFleet(t testing.TB, rng *rand.Rand, schemes []*partition.Scheme, n, maxReqs int) ([]partition.FleetCard, []partition.Request) {
	t.Helper()
	var fleet []partition.FleetCard
	for i := 0; i < n; i++ {
		s := schemes[i%len(schemes)]
		f := partition.FleetCard{Node: fmt.Sprintf("node-%d", i/2), Index: i % 2, Scheme: s}
		if rng.Intn(2) == 0 {
			ls, err := s.Layouts()
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range ls[rng.Intn(len(ls))] {
				in.InUse, in.Restartable = true, rng.Intn(2) == 0
				f.Layout = append(f.Layout, in)
			}
		}
		fleet = append(fleet, f)
	}
	var reqs []partition.Request
	for k := 1 + rng.Intn(maxReqs); k > 0; k-- {
		s := schemes[rng.Intn(len(schemes))]
		reqs = append(reqs, partition.Request{Profile: s.Profiles[rng.Intn(len(s.Profiles))].Name})
	}
	return fleet, reqs
}

// checkPlan checks a plan against its input: every card of After is
// valid, keeps its in-use partitions and holds exactly the assignments
// made to it; assignments serve their requests' profiles.
func checkPlan(t *testing.T, fleet []partition.FleetCard, reqs []partition.Request, plan *partition.Plan) {
	t.Helper()
	if len(plan.After) != len(fleet) {
		t.Fatalf("After has %d cards, fleet %d", len(plan.After), len(fleet))
	}
	placed := map[string]int{}
	for _, a := range plan.Assignments {
		pr, err := fleet[0].Scheme.Profile(reqs[a.Request].Profile)
		for _, f := range fleet {
			if f.Node == a.Node && f.Index == a.Card {
				pr, err = f.Scheme.Profile(reqs[a.Request].Profile)
			}
		}
		if err != nil || pr.Name != a.Profile {
			t.Fatalf("request %d (%s) got %s: %v", a.Request, reqs[a.Request].Profile, a.Profile, err)
		}
		placed[fmt.Sprintf("%s/%d %s@%d", a.Node, a.Card, a.Profile, a.Start)]++
	}
	for i, g := range plan.After {
		f := fleet[i]
		if g.Scheme != f.Scheme || g.Node != f.Node || g.Index != f.Index {
			t.Fatalf("After[%d] is not fleet[%d]", i, i)
		}
		if err := g.Scheme.Validate(g.Layout); err != nil {
			t.Fatalf("After[%d] %s: %v", i, g.Layout, err)
		}
		for _, in := range f.Layout {
			if in.InUse && !slices.ContainsFunc(g.Layout, func(x partition.Instance) bool { return x.Profile == in.Profile && x.Start == in.Start }) {
				t.Fatalf("After[%d] lost in-use %s", i, in)
			}
		}
		for _, in := range g.Layout {
			k := fmt.Sprintf("%s/%d %s@%d", g.Node, g.Index, in.Profile, in.Start)
			if placed[k] > 0 {
				placed[k]--
			} else if !slices.ContainsFunc(f.Layout, func(x partition.Instance) bool { return x.InUse && x.Profile == in.Profile && x.Start == in.Start }) {
				t.Fatalf("After[%d] holds %s, which is neither in use nor assigned", i, in)
			}
		}
	}
	for k, n := range placed {
		if n > 0 {
			t.Fatalf("assignment %s is not in After", k)
		}
	}
}

// TestPlanFleetAgainstOptimum checks PlanFleet against the exhaustive
// optimum on random small fleets of schemes unlike MIG, one scheme per
// fleet and two mixed.
func TestPlanFleetAgainstOptimum(t *testing.T) {
	in, ti, co := instinctLike(t), tiles(t), cores(t)
	rng := rand.New(rand.NewSource(3))
	kinds := [][]*partition.Scheme{{in}, {ti}, {co}, {in, ti}}
	for i := 0; i < 120; i++ {
		schemes := kinds[i%len(kinds)]
		fleet, reqs := randomFleet(t, rng, schemes, 1+rng.Intn(4), 12)
		plan, err := partition.PlanFleet(fleet, reqs)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, fleet, reqs, plan)
		opt, err := partition.Optimum(fleet, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.Value(); got != opt || !plan.Search.Optimal {
			t.Errorf("instance %d: plan %+v, optimum %+v, search %+v\nfleet %v\nrequests %v", i, got, opt, plan.Search, fleet, reqs)
		}
	}
}

// fragmented makes n cards of s, each with a random maximal layout less
// one random partition, all in use, two in three restartable, and a
// request for a random profile of s.
func fragmented(t testing.TB, rng *rand.Rand, s *partition.Scheme, n int) ([]partition.FleetCard, partition.Request) {
	t.Helper()
	ls, err := s.Layouts()
	if err != nil {
		t.Fatal(err)
	}
	var maximal []partition.Layout
	for _, l := range ls {
		if ok, _ := s.IsMaximal(l); ok && len(l) > 1 {
			maximal = append(maximal, l)
		}
	}
	var fleet []partition.FleetCard
	for i := 0; i < n; i++ {
		l := slices.Clone(maximal[rng.Intn(len(maximal))])
		drop := rng.Intn(len(l))
		l = append(l[:drop], l[drop+1:]...)
		for j := range l {
			l[j].InUse, l[j].Restartable = true, rng.Intn(3) > 0
		}
		fleet = append(fleet, partition.FleetCard{Node: "a", Index: i, Scheme: s, Layout: l})
	}
	return fleet, partition.Request{Profile: s.Profiles[rng.Intn(len(s.Profiles))].Name}
}

// TestDefragmentIsMinimal checks Defragment on random fleets of
// instinct-like and tile-4 cards against a brute force: the fewest
// restartable partitions whose removal lets the optimum place them and
// the request.
func TestDefragmentIsMinimal(t *testing.T) {
	in, ti := instinctLike(t), tiles(t)
	rng := rand.New(rand.NewSource(9))
	found, moved := 0, 0
	for i := 0; i < 400; i++ {
		s := []*partition.Scheme{in, ti}[i%2]
		fleet, req := fragmented(t, rng, s, 2+rng.Intn(2))
		d, err := partition.Defragment(fleet, req, partition.WithMaxMoves(2))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Complete {
			t.Fatalf("instance %d: search did not complete: %s", i, d.Reason)
		}
		type mov struct{ card, at int }
		var movable []mov
		for ci, f := range fleet {
			for j, x := range f.Layout {
				if x.Restartable {
					movable = append(movable, mov{ci, j})
				}
			}
		}
		fits := func(set []mov) bool {
			rest := slices.Clone(fleet)
			rs := []partition.Request{{Profile: req.Profile}}
			for ci := range rest {
				var l partition.Layout
				for j, x := range fleet[ci].Layout {
					if slices.Contains(set, mov{ci, j}) {
						rs = append(rs, partition.Request{Profile: x.Profile})
						continue
					}
					l = append(l, x)
				}
				rest[ci].Layout = l
			}
			v, err := partition.Optimum(rest, rs)
			if err != nil {
				t.Fatal(err)
			}
			return v.Count == len(rs)
		}
		least := -1
		for k := 0; k <= 2 && least < 0; k++ {
			var rec func(from int, set []mov) bool
			rec = func(from int, set []mov) bool {
				if len(set) == k {
					return fits(set)
				}
				for j := from; j < len(movable); j++ {
					if rec(j+1, append(set, movable[j])) {
						return true
					}
				}
				return false
			}
			if rec(0, nil) {
				least = k
			}
		}
		switch {
		case least < 0 && d.Found:
			t.Fatalf("instance %d: Defragment moves %v, but no set of at most 2 works\nfleet %v\nrequest %s", i, d.Moves, fleet, req.Profile)
		case least >= 0 && !d.Found:
			t.Fatalf("instance %d: %d moves would do, Defragment found none (%s)\nfleet %v\nrequest %s", i, least, d.Reason, fleet, req.Profile)
		case least >= 0 && len(d.Moves) != least:
			t.Fatalf("instance %d: Defragment moves %d, %d would do", i, len(d.Moves), least)
		}
		if d.Found {
			found++
			if len(d.Moves) > 0 {
				moved++
			}
			for ci, g := range d.After {
				if err := g.Scheme.Validate(g.Layout); err != nil {
					t.Fatalf("instance %d: After[%d] %s: %v", i, ci, g.Layout, err)
				}
			}
		}
	}
	t.Logf("%d of 400 found a plan, %d of them with moves", found, moved)
	if moved < 40 {
		t.Errorf("only %d of 400 instances needed moves; the test proves little", moved)
	}
}

// TestDefragmentModes: a DPX partition fits on neither card, both in CPX
// mode; moving the two restartable CPX partitions of card 0 to card 1
// frees card 0 for it.
func TestDefragmentModes(t *testing.T) {
	s := instinctLike(t)
	fleet := []partition.FleetCard{
		{Node: "a", Index: 0, Scheme: s, Layout: partition.Layout{
			{Profile: "CPX/NPS1", Start: 0, InUse: true, Restartable: true},
			{Profile: "CPX/NPS1", Start: 5, InUse: true, Restartable: true}}},
		{Node: "a", Index: 1, Scheme: s, Layout: mustLayout(t, "CPX/NPS1@0*")},
	}
	d, err := partition.Defragment(fleet, partition.Request{Profile: "DPX/NPS1"}, partition.WithMaxMoves(1))
	if err != nil {
		t.Fatal(err)
	}
	if d.Found || !d.Complete || d.Reason != "no plan moves at most 1 restartable partitions" {
		t.Fatalf("one move: found %v, complete %v, reason %q", d.Found, d.Complete, d.Reason)
	}
	d, err = partition.Defragment(fleet, partition.Request{Profile: "DPX/NPS1"})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Found || len(d.Moves) != 2 || d.Target.Card != 0 {
		t.Fatalf("found %v, moves %v, target %+v: want two moves and card 0", d.Found, d.Moves, d.Target)
	}
	for _, m := range d.Moves {
		if m.Card != 0 || m.ToCard != 1 {
			t.Errorf("move %s: want card 0 to card 1", m)
		}
	}
	if got := d.After[1].Layout.String(); got != "CPX/NPS1@0*,CPX/NPS1@1*,CPX/NPS1@2*" {
		t.Errorf("card 1 after: %s", got)
	}
}
