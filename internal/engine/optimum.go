package engine

import (
	"fmt"
	"sort"
)

// Limits of Optimum: beyond them exhaustive search is not cheap.
const (
	OptimumMaxCards    = 8
	OptimumMaxRequests = 30
)

// Value is the planner's objective: compute units placed, then count.
type Value struct {
	Compute int `json:"compute"`
	Count   int `json:"count"`
}

// Less orders values by compute, then count.
func (v Value) Less(w Value) bool {
	return v.Compute < w.Compute || (v.Compute == w.Compute && v.Count < w.Count)
}

// Value returns the plan's objective value.
func (p *Plan) Value() Value { return Value{Compute: p.PlacedCompute, Count: len(p.Assignments)} }

// Optimum computes, exhaustively, the best value any plan can reach on a
// small fleet (at most OptimumMaxCards cards and OptimumMaxRequests
// requests, none pinned): for every card it enumerates every valid
// completion of its in-use partitions, then searches every combination.
// It is the yardstick for PlanFleet in tests and benchmarks.
func Optimum(fleet []FleetCard, requests []Request) (Value, error) {
	if len(fleet) > OptimumMaxCards || len(requests) > OptimumMaxRequests {
		return Value{}, fmt.Errorf("optimum: %w: %d %s and %d requests exceed the limits %d and %d", ErrFleet, len(fleet), plural(namesOf(fleet).Card), len(requests), OptimumMaxCards, OptimumMaxRequests)
	}
	pl := newPlanner()
	cards, err := pl.load(fleet)
	if err != nil {
		return Value{}, fmt.Errorf("optimum: %w", err)
	}
	// Demand per distinct canonical profile name.
	var names []string
	idx := map[string]int{}
	var demand [maxProfiles]uint8
	var compute []int
	for i, r := range requests {
		if r.Node != "" || r.Card != nil {
			return Value{}, fmt.Errorf("optimum: %w: requests[%d] is pinned; Optimum handles unpinned requests only", ErrFleet, i)
		}
		if r.Profile == "" {
			return Value{}, fmt.Errorf("optimum: %w: requests[%d].profile is empty", ErrFleet, i)
		}
		n := canonicalIn(fleet, r.Profile)
		pr, _ := resolve(fleet, r.Profile)
		j, ok := idx[n]
		if !ok {
			if len(names) == maxProfiles {
				return Value{}, fmt.Errorf("optimum: %w: more than %d distinct profiles", ErrFleet, maxProfiles)
			}
			j = len(names)
			idx[n] = j
			names = append(names, n)
			compute = append(compute, pr.Compute)
		}
		demand[j]++
	}
	// Per card: the distinct demand vectors its completions can serve.
	vecs := make([][][maxProfiles]uint8, len(cards))
	for gi, g := range cards {
		p := g.s
		toName := make([]int, len(p.Profiles))
		for pi, pr := range p.Profiles {
			j, ok := idx[pr.Name]
			toName[pi] = -1
			if ok {
				toName[pi] = j
			}
		}
		seen := map[[maxProfiles]uint8]bool{}
		var v [maxProfiles]uint8
		st := g.fixed
		var rec func(from int)
		rec = func(from int) {
			if !seen[v] {
				seen[v] = true
				vecs[gi] = append(vecs[gi], v)
			}
			for si := from; si < len(p.slots); si++ {
				j := toName[p.slots[si].prof]
				if j < 0 || v[j] >= demand[j] || !p.fits(&st, si) {
					continue
				}
				p.add(&st, si)
				v[j]++
				rec(si + 1)
				v[j]--
				p.remove(&st, si)
			}
		}
		rec(0)
		// Try big vectors first so that the bound prunes early.
		sort.Slice(vecs[gi], func(a, b int) bool { return vecValue(vecs[gi][a], compute) > vecValue(vecs[gi][b], compute) })
	}
	type mkey struct {
		g   int
		rem [maxProfiles]uint8
	}
	memo := map[mkey]int{}
	var best func(g int, rem [maxProfiles]uint8) int
	best = func(g int, rem [maxProfiles]uint8) int {
		if g == len(cards) {
			return 0
		}
		k := mkey{g, rem}
		if v, ok := memo[k]; ok {
			return v
		}
		out := 0
		remVal := vecValue(rem, compute)
		for _, v := range vecs[g] {
			ok := true
			var next [maxProfiles]uint8
			for j := range names {
				if v[j] > rem[j] {
					ok = false
					break
				}
				next[j] = rem[j] - v[j]
			}
			if !ok {
				continue
			}
			if val := vecValue(v, compute) + best(g+1, next); val > out {
				out = val
				if out == remVal {
					break // everything left is placed: cannot do better
				}
			}
		}
		memo[k] = out
		return out
	}
	v := best(0, demand)
	return Value{Compute: v / 64, Count: v % 64}, nil
}

// vecValue encodes (compute, count) as compute*64+count.
func vecValue(v [maxProfiles]uint8, compute []int) int {
	val := 0
	for j, c := range compute {
		val += int(v[j]) * (c*64 + 1)
	}
	return val
}
