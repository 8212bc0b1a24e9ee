package engine

import (
	"sort"
	"strconv"
)

// Neighbourhood search: PlanFleet's step between the per-card repair and
// the exact search over the whole fleet. Past one node the whole-fleet
// search meets too many cards to finish, yet what the heuristic leaves out
// is nearly always a matter of two or three cards: one has the free units
// in the wrong places, another holds the partitions that would fit there.
// So for pairs, then triples, of cards (each with a card that has room),
// the exact search re-packs their requests together with the unplaced
// ones; whenever it places more, the new assignment is kept. cards in the
// same state with the same assignment are tried once. Every search node
// counts against the work budget, so the result does not depend on the
// machine's load.

// neighbourhood improves the assignment in place; it returns the
// unplaced requests, the work it did and whether it stopped on the
// budget.
func (pl *planner) neighbourhood(cards []*pcard, fleet []FleetCard, requests []Request, reqs []reqInfo, unplaced []int, budget int) ([]int, int, bool) {
	work := 0
	val := func(rs []int) int64 {
		w := int64(len(requests)) + 1
		var v int64
		for _, ri := range rs {
			v += int64(reqs[ri].compute)*w + 1
		}
		return v
	}
	type gkey struct {
		k    evalKey
		pins string
	}
	keyOf := func(gi int) gkey {
		f := fleet[gi]
		return gkey{k: cards[gi].key(), pins: f.Node + "/" + strconv.Itoa(f.Index)}
	}
	for size := 2; size <= 3 && len(unplaced) > 0; size++ {
		for pass := 0; pass < 8 && len(unplaced) > 0; pass++ {
			improved := false
			// cards with room, then every card, deduplicated by state.
			var room, all []int
			seenRoom, seenAll := map[evalKey]bool{}, map[evalKey]int{}
			pinned := false
			for _, ri := range unplaced {
				pinned = pinned || reqs[ri].pinned
			}
			for gi, g := range cards {
				k := g.key()
				r := pl.eval(k)
				compute, memory := int(g.fixed.compute), int(g.fixed.memory)
				for pi, n := range g.assigned {
					if pi < len(g.s.Profiles) {
						compute += int(n) * g.s.Profiles[pi].Compute
						memory += int(n) * g.s.Profiles[pi].Memory
					}
				}
				hasRoom := g.s.freeUnits(r.used) > 0 ||
					(!g.s.Compute.Placed && compute < g.s.Compute.Count) ||
					(!g.s.Memory.Placed && memory < g.s.Memory.Count)
				// Pinned requests make equal cards differ; without pins, a
				// set needs at most size cards of one state.
				if !pinned && seenAll[k] >= size {
					continue
				}
				seenAll[k]++
				all = append(all, gi)
				if hasRoom && (pinned || !seenRoom[k]) {
					seenRoom[k] = true
					room = append(room, gi)
				}
			}
			tried := map[[4]gkey]bool{}
			var try func(set []int, from int) bool
			try = func(set []int, from int) bool {
				if len(set) == size {
					var ks [4]gkey
					for i, gi := range set {
						ks[i] = keyOf(gi)
						if !pinned {
							ks[i].pins = ""
						}
					}
					sort.Slice(ks[:len(set)], func(a, b int) bool { return lessGKey(ks[a].k, ks[b].k, ks[a].pins, ks[b].pins) })
					if tried[ks] {
						return true
					}
					tried[ks] = true
					var ok bool
					var n int
					unplaced, n, ok = pl.repack(cards, fleet, requests, set, unplaced, val, budget-work)
					work += n
					improved = improved || ok
					return work < budget && len(unplaced) > 0
				}
				for i := from; i < len(all); i++ {
					if containsInt(set, all[i]) {
						continue
					}
					if !try(append(set, all[i]), i+1) {
						return false
					}
				}
				return true
			}
			for _, a := range room {
				if !try([]int{a}, 0) {
					break
				}
			}
			if work >= budget {
				return unplaced, work, true
			}
			if !improved {
				break
			}
		}
	}
	return unplaced, work, false
}

func lessGKey(a, b evalKey, pa, pb string) bool {
	if a.s != b.s {
		return a.s.Name < b.s.Name || (a.s.Name == b.s.Name && pa < pb)
	}
	if a.fixed != b.fixed {
		return lessState(a.fixed, b.fixed)
	}
	if a.assigned != b.assigned {
		for i := range a.assigned {
			if a.assigned[i] != b.assigned[i] {
				return a.assigned[i] < b.assigned[i]
			}
		}
	}
	if a.idle != b.idle {
		return a.idle < b.idle
	}
	return pa < pb
}

func lessState(a, b state) bool {
	if a.used != b.used {
		return a.used < b.used
	}
	for i := range a.counts {
		if a.counts[i] != b.counts[i] {
			return a.counts[i] < b.counts[i]
		}
	}
	if a.extra != b.extra {
		for i := range a.extra {
			if a.extra[i] != b.extra[i] {
				return a.extra[i] < b.extra[i]
			}
		}
	}
	if a.compute != b.compute {
		return a.compute < b.compute
	}
	if a.memory != b.memory {
		return a.memory < b.memory
	}
	if a.n != b.n {
		return a.n < b.n
	}
	if a.mode != b.mode {
		return a.mode < b.mode
	}
	return a.moded < b.moded
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// repack runs the exact search on the cards of set with their requests
// and the unplaced ones; when it places more, it takes the new
// assignment. It returns the unplaced requests, the work and whether it
// improved.
func (pl *planner) repack(cards []*pcard, fleet []FleetCard, requests []Request, set []int, unplaced []int, val func([]int) int64, budget int) ([]int, int, bool) {
	var mine []int
	for _, gi := range set {
		mine = append(mine, cards[gi].reqs...)
	}
	cur := val(mine)
	var cand []int
	for _, ri := range unplaced {
		for _, gi := range set {
			if pinOK(requests[ri], fleet[gi]) {
				if _, err := cards[gi].s.profileIndex(requests[ri].Profile); err == nil {
					cand = append(cand, ri)
					break
				}
			}
		}
	}
	if len(cand) == 0 {
		return unplaced, 0, false
	}
	all := append(append([]int(nil), mine...), cand...)
	subReq := make([]Request, len(all))
	for i, ri := range all {
		subReq[i] = requests[ri]
	}
	subCards := make([]*pcard, len(set))
	subFleet := make([]FleetCard, len(set))
	for i, gi := range set {
		subCards[i] = cards[gi]
		subFleet[i] = fleet[gi]
	}
	res := exactPlan(subCards, subFleet, subReq, searchLimit{nodes: budget})
	if !res.finished {
		return unplaced, res.nodes, false
	}
	var got []int
	newAssigned := make([][maxProfiles]uint8, len(set))
	for i, gi := range set {
		for _, si := range res.take[i] {
			got = append(got, all[si])
			pi, _ := cards[gi].s.profileIndex(subReq[si].Profile)
			newAssigned[i][pi]++
		}
	}
	switch v := val(got); {
	case v < cur:
		return unplaced, res.nodes, false
	case v == cur:
		// As much placed: keep the new packing only when it leaves the
		// free space in better shape (the planner's score), which can
		// open room for an unplaced request in a later try.
		before, after := 0, 0
		for i, gi := range set {
			g := cards[gi]
			before += pl.eval(g.key()).score
			k := g.key()
			k.assigned = newAssigned[i]
			after += pl.eval(k).score
		}
		if after <= before {
			return unplaced, res.nodes, false
		}
	}
	placed := map[int]bool{}
	for i, gi := range set {
		g := cards[gi]
		g.assigned = [maxProfiles]uint8{}
		g.reqs = g.reqs[:0:0]
		for _, si := range res.take[i] {
			ri := all[si]
			pi, _ := g.s.profileIndex(requests[ri].Profile)
			g.assigned[pi]++
			g.reqs = append(g.reqs, ri)
			placed[ri] = true
		}
	}
	var rest []int
	for _, ri := range unplaced {
		if !placed[ri] {
			rest = append(rest, ri)
		}
	}
	for _, ri := range mine {
		if !placed[ri] {
			rest = append(rest, ri)
		}
	}
	sort.Ints(rest)
	return rest, res.nodes, true
}

// byScheme plans a fleet of two schemes that share one profile name
// (H100-80GB and A100-40GB share "1g.10gb", a 1g on one and a 1g large
// on the other) scheme by scheme: the requests only one scheme
// offers go to its cards, and the shared ones are split. One scheme's
// cards that can take x of the shared requests beside their own can take
// fewer, so a binary search finds the most the first scheme takes, and
// the second takes the rest. Before that search, the split in the middle
// of what the compute and memory units left on each side allow is tried
// (on an exact fill they fix it). Each half is a one-scheme plan, which the
// neighbourhood search completes far more often than a search over both.
// It returns, per card, the requests it takes, and ok when every request
// is placed; pinned requests, other schemes and more shared names are
// left to the other searches (ok false).
func byScheme(fleet []FleetCard, requests []Request, work int) (take map[int][]int, nodes int, ok bool) {
	var schemes []*Scheme
	for _, f := range fleet {
		if !containsScheme(schemes, f.Scheme) {
			schemes = append(schemes, f.Scheme)
		}
	}
	if len(schemes) != 2 {
		return nil, 0, false
	}
	var own [2][]int
	var shared []int
	type offer struct{ e0, e1 error }
	offers := map[string]offer{} // by name: a miss builds an error
	for ri, r := range requests {
		if r.Node != "" || r.Card != nil {
			return nil, 0, false
		}
		o, ok := offers[r.Profile]
		if !ok {
			_, o.e0 = schemes[0].profileIndex(r.Profile)
			_, o.e1 = schemes[1].profileIndex(r.Profile)
			offers[r.Profile] = o
		}
		e0, e1 := o.e0, o.e1
		switch {
		case e0 == nil && e1 == nil:
			if len(shared) > 0 && canonicalIn(fleet, requests[shared[0]].Profile) != canonicalIn(fleet, r.Profile) {
				return nil, 0, false
			}
			shared = append(shared, ri)
		case e0 == nil:
			own[0] = append(own[0], ri)
		case e1 == nil:
			own[1] = append(own[1], ri)
		default:
			return nil, 0, false
		}
	}
	var sub [2][]int // fleet indices per scheme
	for gi, f := range fleet {
		if f.Scheme == schemes[0] {
			sub[0] = append(sub[0], gi)
		} else {
			sub[1] = append(sub[1], gi)
		}
	}
	// Each half plan may spend a share of the work: two binary searches
	// over n shared requests and the final pair make about 2*log2(n)+4.
	steps := 4
	for n := len(shared) + 1; n > 1; n /= 2 {
		steps += 2
	}
	share := max(work/steps, 1)
	solve := func(side int, extra []int, budget int) (*Plan, []int, bool) {
		if nodes >= work {
			return nil, nil, false
		}
		rs := append(append([]int(nil), own[side]...), extra...)
		// Cheap necessary conditions first: compute and memory units.
		pr := schemes[side]
		needC, needM, haveC, haveM := 0, 0, 0, 0
		for _, ri := range rs {
			pi, _ := pr.profileIndex(requests[ri].Profile)
			needC += pr.Profiles[pi].Compute
			needM += pr.Profiles[pi].Memory
		}
		for _, gi := range sub[side] {
			st, _ := pr.stateOf(inUse(fleet[gi].Layout))
			haveC += pr.Compute.Count - pr.computeUsed(&st)
			haveM += pr.Memory.Count - pr.memoryUsed(&st)
		}
		if needC > haveC || needM > haveM {
			return nil, nil, false
		}
		sf := make([]FleetCard, len(sub[side]))
		for i, gi := range sub[side] {
			sf[i] = fleet[gi]
		}
		sr := make([]Request, len(rs))
		for i, ri := range rs {
			sr[i] = requests[ri]
		}
		p, err := PlanFleet(sf, sr, WithWorkBudget(min(budget, work-nodes)))
		if err != nil {
			return nil, nil, false
		}
		nodes += p.Search.Nodes
		return p, rs, len(p.Unplaced) == 0
	}
	// The most shared requests each scheme takes beside its own (at
	// least that many: a half plan that runs out of work counts as
	// failed); then the split that leaves both the same slack, which
	// makes both halves easier than the tightest split.
	most := func(side int) int {
		lo, hi := -1, len(shared)
		for lo < hi && nodes < work {
			mid := (lo + hi + 1) / 2
			if _, _, done := solve(side, shared[:max(mid, 0)], share); done {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo
	}
	collect := func(p0 *Plan, rs0 []int, p1 *Plan, rs1 []int) map[int][]int {
		take := map[int][]int{}
		for side, pr := range []struct {
			p  *Plan
			rs []int
		}{{p0, rs0}, {p1, rs1}} {
			for _, a := range pr.p.Assignments {
				gi := -1
				for _, g := range sub[side] {
					if fleet[g].Node == a.Node && fleet[g].Index == a.Card {
						gi = g
						break
					}
				}
				take[gi] = append(take[gi], pr.rs[a.Request])
			}
		}
		return take
	}
	// The compute and memory units each scheme's cards have left beside
	// their own requests bound the split: on a tight fleet (an exact fill)
	// they fix it. The split in the middle of the bounds is tried first,
	// each half with half the work; only when it fails do the probes run.
	if len(shared) > 0 {
		lo, hi := 0, len(shared)
		for side := range 2 {
			pr := schemes[side]
			pi, _ := pr.profileIndex(requests[shared[0]].Profile)
			c, m := pr.Profiles[pi].Compute, pr.Profiles[pi].Memory
			haveC, haveM := 0, 0
			for _, gi := range sub[side] {
				st, _ := pr.stateOf(inUse(fleet[gi].Layout))
				haveC += pr.Compute.Count - pr.computeUsed(&st)
				haveM += pr.Memory.Count - pr.memoryUsed(&st)
			}
			for _, ri := range own[side] {
				pj, _ := pr.profileIndex(requests[ri].Profile)
				haveC -= pr.Profiles[pj].Compute
				haveM -= pr.Profiles[pj].Memory
			}
			most := len(shared)
			if c > 0 {
				most = min(most, max(haveC, -1)/c)
			}
			if m > 0 {
				most = min(most, max(haveM, -1)/m)
			}
			if haveC < 0 || haveM < 0 {
				most = -1
			}
			if side == 0 {
				hi = min(hi, most)
			} else {
				lo = max(lo, len(shared)-most)
			}
		}
		if lo > hi {
			return nil, nodes, false
		}
		x := (lo + hi) / 2
		if p1, rs1, done := solve(1, shared[x:], max((work-nodes)/2, 1)); done {
			if p0, rs0, done := solve(0, shared[:x], work); done {
				return collect(p0, rs0, p1, rs1), nodes, true
			}
		}
	}
	m0 := most(0)
	if m0 < 0 {
		return nil, nodes, false
	}
	m1 := most(1)
	if m1 < 0 {
		return nil, nodes, false
	}
	// When the probes found too little room, scheme 0 takes the rest
	// anyway: a probe gives up on its share of the work, the final plan
	// has all the work left.
	x := len(shared) - m1
	if m0+m1 >= len(shared) {
		x += (m0 + m1 - len(shared)) / 2
	}
	other, otherReqs, done := solve(1, shared[x:], work)
	if !done {
		return nil, nodes, false
	}
	best, bestReqs, done := solve(0, shared[:x], work)
	if !done {
		return nil, nodes, false
	}
	take = collect(best, bestReqs, other, otherReqs)
	return take, nodes, true
}

func containsScheme(ps []*Scheme, p *Scheme) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// inUse returns the layout's in-use partitions.
func inUse(l Layout) Layout {
	var out Layout
	for _, in := range l {
		if in.InUse {
			out = append(out, in)
		}
	}
	return out
}
