package engine

import "sort"

// The exchange search: PlanFleet's step after the split by scheme, when
// requests are still unplaced. With partitions in use, a tight fleet's
// free units end up scattered over a few cards in shapes the unplaced
// requests do not fit (two free 1g slots where a 2g is wanted), and
// fixing it takes a chain of changes over several cards, each trading
// what it holds for another multiset it can hold. The search works on
// request kinds and classes of interchangeable cards as the exact search
// does (one scheme, one in-use layout, one set of kinds they may take),
// and on each card's multiset of kinds: a change of one card is a delta
// vector (what it holds after, less what it holds now, after being any
// feasible completion of its in-use partitions), and a set of changes on
// distinct cards places requests, and loses none, exactly when its
// deltas add up to a vector between zero and the unplaced demand. Cards
// of one class that hold the same multiset offer the same deltas, so the
// deltas of one change are few once deduplicated by vector (about 500 on
// the 128-GPU MIG fills); sums of two are built once per round and the
// sums of three and four are looked up against them, which reaches
// chains of four cards at the cost of the pairs. A round takes every
// disjoint chain it finds: a try that failed fails again in the same
// round (cards are only taken, the demand only shrinks), so the round
// scans its tables once. Deltas, sums and look-ups count against the
// work budget, so the plan does not depend on the machine's speed.

// dvec is a change of kinds: per kind, requests gained (or lost).
type dvec [maxProfiles]int16

// exchange bounds: a one-card delta changes each kind by at most
// exchangeStep and at most exchangeL1 in all; a sum of two is kept for
// the lookups when it is within exchangeStep+1 of the demand per kind.
const (
	exchangeStep = 2
	exchangeL1   = 6
	// pairWork sums of two deltas count as one node of work: a sum is a
	// few additions and one map insert, a node of the exact search
	// enumerates placements.
	pairWork = 16
	// exchangeTarget is the most requests one chain looks to place.
	exchangeTarget = 4
)

// xtype is the cards of one class that hold one multiset of kinds.
type xtype struct {
	class   int
	holds   xvec
	members []int // card indices, fleet order
}

// xchange is one card type's change to a multiset.
type xchange struct {
	t  int
	to xvec
}

// exchange runs the exchange search on the assignment in place, within
// lim. It returns the unplaced requests and the work done.
func (pl *planner) exchange(
	cards []*pcard, fleet []FleetCard, requests []Request, unplaced []int, lim searchLimit,
) ([]int, int) {
	xs, _, fail := newXSearch(cards, fleet, requests, lim, true)
	if fail != nil {
		return unplaced, fail.nodes
	}
	kindOf := make([]int, len(requests))
	for i := range kindOf {
		kindOf[i] = -1
	}
	for ki, k := range xs.kinds {
		for _, ri := range k.reqs {
			kindOf[ri] = ki
		}
	}
	classOf := make([]int, len(cards))
	for i := range classOf {
		classOf[i] = -1
	}
	for c, cl := range xs.classes {
		for _, gi := range cl.members {
			classOf[gi] = c
		}
	}
	for len(unplaced) > 0 && !xs.aborted {
		var want xvec
		for _, ri := range unplaced {
			if ki := kindOf[ri]; ki >= 0 {
				want[ki]++
			}
		}
		if xs.value(want) == 0 {
			break
		}
		chains := xs.findChains(cards, classOf, kindOf, want)
		if len(chains) == 0 {
			break
		}
		for _, chain := range chains {
			unplaced = xs.apply(cards, requests, classOf, kindOf, unplaced, chain)
		}
	}
	return unplaced, xs.nodes
}

// holds is a card's assigned requests as a vector of kinds.
func holds(g *pcard, kindOf []int) xvec {
	var v xvec
	for _, ri := range g.reqs {
		if ki := kindOf[ri]; ki >= 0 {
			v[ki]++
		}
	}
	return v
}

// findChains looks for changes on at most four distinct cards whose
// deltas add up to the most valuable vector between zero and want (at
// most exchangeTarget requests), and again, on other cards, for what is
// still wanted, while it finds one. It returns the chains, each the card
// changes (card index, multiset after).
func (xs *xsearch) findChains(cards []*pcard, classOf, kindOf []int, want xvec) [][]cardChange {
	nk := len(xs.kinds)
	// Card types, fleet order.
	type tkey struct {
		c     int
		holds xvec
	}
	var types []xtype
	tindex := map[tkey]int{}
	for gi, g := range cards {
		c := classOf[gi]
		if c < 0 {
			continue
		}
		k := tkey{c, holds(g, kindOf)}
		t, ok := tindex[k]
		if !ok {
			t = len(types)
			tindex[k] = t
			types = append(types, xtype{class: c, holds: k.holds})
		}
		types[t].members = append(types[t].members, gi)
	}
	// One-card deltas, deduplicated by vector; each keeps the first few
	// changes that give it.
	const perDelta = 4
	var deltas []dvec
	by := map[dvec][]xchange{}
	for ti, t := range types {
		for _, b := range xs.classes[t.class].feas {
			if xs.tick() {
				return nil
			}
			var d dvec
			l1, ok := 0, true
			for ki := 0; ki < nk; ki++ {
				d[ki] = int16(b[ki]) - int16(t.holds[ki])
				a := int(d[ki])
				if a < 0 {
					a = -a
				}
				if a > exchangeStep {
					ok = false
					break
				}
				l1 += a
			}
			if !ok || l1 == 0 || l1 > exchangeL1 {
				continue
			}
			l, seen := by[d]
			if !seen {
				deltas = append(deltas, d)
			}
			if len(l) < perDelta {
				by[d] = append(l, xchange{t: ti, to: b})
			}
		}
	}
	// The targets: every vector between zero and want, most valuable
	// first.
	targets := []dvec{{}}
	l1 := func(d dvec) int {
		n := 0
		for ki := 0; ki < nk; ki++ {
			n += int(d[ki])
		}
		return n
	}
	for ki := 0; ki < nk; ki++ {
		var next []dvec
		for _, t := range targets {
			for n := 0; n <= int(want[ki]) && l1(t)+n <= exchangeTarget; n++ {
				u := t
				u[ki] = int16(n)
				next = append(next, u)
			}
		}
		targets = next
	}
	targets = targets[1:] // the zero vector comes first
	dval := func(d dvec) int64 {
		var v int64
		for ki := 0; ki < nk; ki++ {
			v += int64(d[ki]) * xs.kval[ki]
		}
		return v
	}
	sort.SliceStable(targets, func(a, b int) bool { return dval(targets[a]) > dval(targets[b]) })
	// pick turns deltas into changes on distinct cards, or nil.
	taken := map[int]int{} // per type, members given a change already
	pick := func(ds ...dvec) []cardChange {
		used := map[int]int{}
		for t, n := range taken {
			used[t] = n
		}
		var out []cardChange
		var rec func(i int) bool
		rec = func(i int) bool {
			if i == len(ds) {
				return true
			}
			for _, ch := range by[ds[i]] {
				if used[ch.t] >= len(types[ch.t].members) {
					continue
				}
				gi := types[ch.t].members[used[ch.t]]
				used[ch.t]++
				out = append(out, cardChange{card: gi, to: ch.to})
				if rec(i + 1) {
					return true
				}
				out = out[:len(out)-1]
				used[ch.t]--
			}
			return false
		}
		if rec(0) {
			for t, n := range used {
				taken[t] = n
			}
			return out
		}
		return nil
	}
	sub := func(a, b dvec) dvec {
		for ki := 0; ki < nk; ki++ {
			a[ki] -= b[ki]
		}
		return a
	}
	// The sums of two deltas, kept for chains of three and four, are
	// built when a chain of one or two does not do.
	type pair struct{ a, b int }
	var pairs map[dvec]pair
	var sums []dvec
	buildPairs := func() bool {
		pairs = map[dvec]pair{}
		for i := range deltas {
			for j := i; j < len(deltas); j++ {
				if (j-i)%pairWork == 0 && xs.tick() {
					return false
				}
				var s dvec
				ok := true
				for ki := 0; ki < nk; ki++ {
					s[ki] = deltas[i][ki] + deltas[j][ki]
					if s[ki] < -exchangeStep-1 || s[ki] > int16(want[ki])+exchangeStep+1 {
						ok = false
						break
					}
				}
				if !ok {
					continue
				}
				if _, seen := pairs[s]; !seen {
					pairs[s] = pair{i, j}
					sums = append(sums, s)
				}
			}
		}
		return true
	}
	// find returns a chain for the first target it reaches, chains of one
	// card first, then two, three and four, and that target. A try that
	// failed fails again later (cards are only taken, want only shrinks),
	// so each call resumes where the last one stopped: the tables of a
	// round are scanned once.
	fits := func(t dvec) bool {
		for ki := 0; ki < nk; ki++ {
			if t[ki] > int16(want[ki]) {
				return false
			}
		}
		return true
	}
	lvl, ti, di := 0, 0, 0
	find := func() ([]cardChange, dvec) {
		for ; lvl < 4; lvl, ti, di = lvl+1, 0, 0 {
			if lvl >= 2 && pairs == nil && !buildPairs() {
				return nil, dvec{}
			}
			n := 1
			switch lvl {
			case 1:
				n = len(deltas)
			case 2, 3:
				n = len(sums)
			}
			for ; ti < len(targets); ti, di = ti+1, 0 {
				t := targets[ti]
				if !fits(t) {
					continue
				}
				for ; di < n; di++ {
					if di%pairWork == 0 && xs.tick() {
						return nil, dvec{}
					}
					var ch []cardChange
					switch lvl {
					case 0:
						if _, ok := by[t]; ok {
							ch = pick(t)
						}
					case 1:
						d := deltas[di]
						if _, ok := by[sub(t, d)]; ok {
							ch = pick(d, sub(t, d))
						}
					case 2:
						r := sub(t, sums[di])
						if _, ok := by[r]; ok {
							p := pairs[sums[di]]
							ch = pick(deltas[p.a], deltas[p.b], r)
						}
					case 3:
						if q, ok := pairs[sub(t, sums[di])]; ok {
							p := pairs[sums[di]]
							ch = pick(deltas[p.a], deltas[p.b], deltas[q.a], deltas[q.b])
						}
					}
					if ch != nil {
						return ch, t
					}
				}
			}
		}
		return nil, dvec{}
	}
	var chains [][]cardChange
	for {
		ch, t := find()
		if ch == nil {
			break
		}
		chains = append(chains, ch)
		for ki := 0; ki < nk; ki++ {
			want[ki] -= uint16(t[ki])
		}
	}
	return chains
}

// cardChange is one card's multiset of kinds after a chain.
type cardChange struct {
	card int
	to   xvec
}

// apply carries a chain out: the changed cards give back their requests,
// then each takes, kind by kind, what its new multiset says from those
// and the unplaced ones (lowest index first). It returns the requests
// still unplaced.
func (xs *xsearch) apply(
	cards []*pcard, requests []Request, classOf, kindOf, unplaced []int, chain []cardChange,
) []int {
	pool := make([][]int, len(xs.kinds))
	var rest []int
	for _, ri := range unplaced {
		if ki := kindOf[ri]; ki >= 0 {
			pool[ki] = append(pool[ki], ri)
		} else {
			rest = append(rest, ri)
		}
	}
	for _, ch := range chain {
		for _, ri := range cards[ch.card].reqs {
			pool[kindOf[ri]] = append(pool[kindOf[ri]], ri)
		}
	}
	for ki := range pool {
		sort.Ints(pool[ki])
	}
	for _, ch := range chain {
		g := cards[ch.card]
		cl := xs.classes[classOf[ch.card]]
		g.reqs = nil
		g.assigned = [maxProfiles]uint8{}
		for ki := range xs.kinds {
			for n := 0; n < int(ch.to[ki]); n++ {
				g.reqs = append(g.reqs, pool[ki][0])
				pool[ki] = pool[ki][1:]
				g.assigned[cl.key.prof[ki]]++
			}
		}
	}
	for ki := range pool {
		rest = append(rest, pool[ki]...)
	}
	sort.Ints(rest)
	return rest
}
