package engine

import (
	"fmt"
	"sort"
	"time"
)

// The exact search behind PlanFleet. PlanFleet's heuristic places
// requests largest first, one at a time, and repairs each card alone; on
// tight partitions (the requests just fill the fleet) that can leave a
// request out that a complete packing would place. When the heuristic
// leaves requests unplaced, PlanFleet runs this search, which finds the
// best value any plan can reach (compute units placed, then count) or
// proves the heuristic's value best, within a time budget.
//
// The search works on request kinds (canonical profile and pin) and on
// classes of interchangeable cards (one scheme, one set of in-use
// partitions, one set of kinds they may take). For every class it
// enumerates, once, the maximal patterns: the multisets of kinds that a
// completion of the in-use partitions can hold and that no other such
// multiset contains. A card takes a pattern cut down to what is still
// requested; taking maximal patterns cut down loses nothing, since any
// sub-multiset of a valid layout is valid (drop partitions) and a card that
// takes more of a kind leaves later cards less to do. The cards of a class
// are interchangeable, so they take patterns in non-decreasing pattern
// order and a card that takes nothing ends its class (symmetry breaking).
// Subproblems (class, cards left in it, first pattern allowed, remaining
// requests) are memoized with their exact value; a branch is cut when its
// value plus a bound on the rest (remaining compute against the remaining
// cards' capacity) cannot beat the best found in the same subproblem.

// DefaultSearchWork is the work (search nodes) PlanFleet's searches may
// do when WithWorkBudget does not say otherwise. Counting work, not time,
// makes a plan the same on a busy and an idle machine.
const DefaultSearchWork = 1_000_000

// Search reports PlanFleet's exact search.
type Search struct {
	// Ran is true when the search ran: the heuristic left requests
	// unplaced that some card offers, and the budget is positive.
	Ran bool `json:"ran"`
	// Optimal is true when no plan places more compute units, then more
	// requests, than this one: everything is placed, or the search
	// finished.
	Optimal bool `json:"optimal"`
	// Improved is true when the search placed more than the heuristic, so
	// the plan is the search's.
	Improved bool `json:"improved,omitempty"`
	// Nodes is the number of search nodes visited.
	Nodes int `json:"nodes,omitempty"`
	// Elapsed is the time the search took.
	Elapsed time.Duration `json:"elapsed,omitempty"`
	// Budget is the time limit of WithSearchBudget, 0 when none was set
	// (the default: the search is bounded by work only).
	Budget time.Duration `json:"budget"`
	// Work is the work budget (search nodes) the search was allowed
	// (WithWorkBudget, DefaultSearchWork).
	Work int `json:"work"`
	// Neighbourhood is the search nodes spent before the whole-fleet
	// search: the split by scheme, the exchange search and re-packing
	// pairs and triples of cards (included in Nodes).
	Neighbourhood int `json:"neighbourhood,omitempty"`
	// Note says why the search did not run or did not finish, if so.
	Note string `json:"note,omitempty"`
}

// xvec counts requests per kind.
type xvec [maxProfiles]uint16

// xkind is one kind of request: a canonical profile with a pin.
type xkind struct {
	name    string
	node    string
	card    int // -1: any index
	compute int
	mem     int   // memory units, the fewest of the schemes that offer it
	reqs    []int // requests of the kind, ascending
}

// xclass is a set of interchangeable cards.
type xclass struct {
	key     xclassKey
	members []int  // card indices, fleet order
	pats    []xvec // maximal patterns, best value first
	cap     int    // the most compute units one card of the class can take
	memCap  int    // the most memory units one card of the class can fill
	most    xvec   // the most requests of each kind one card can take
	feas    []xvec // every vector a card can take, when xsearch.feasible
}

type xclassKey struct {
	s     *Scheme
	fixed state
	prof  [maxProfiles]int8 // kind -> the scheme's profile index, -1 when the card may not take it
}

type xkey struct {
	c, k, m int16
	rem     xvec
}

type xentry struct {
	val    int64
	choice int16 // pattern index; -1: the class's remaining cards take nothing
}

type xsearch struct {
	kinds   []xkind
	classes []*xclass
	w       int64   // value = compute*w + count
	kval    []int64 // per kind, the value of one request
	suffix  []int   // compute capacity of classes c.. (all their cards)
	memSuf  []int   // memory capacity of classes c..
	mostSuf []xvec  // per kind, the most requests classes c.. can take
	valMem  int64   // a lower bound on value per memory unit of any kind
	memo    map[xkey]xentry
	seen    [][]xvec // per depth, cut-down patterns tried
	nodes   int
	lim     searchLimit
	aborted bool
	// feasible: patterns also keeps every feasible vector (xclass.feas).
	feasible bool
}

// searchLimit bounds a search: by nodes always, by time when deadline is
// set (WithSearchBudget).
type searchLimit struct {
	nodes    int
	deadline time.Time
}

// exactResult is the search's outcome: per card, the requests it takes.
type exactResult struct {
	value    int64
	finished bool
	take     map[int][]int // card index -> requests
	nodes    int
	note     string
}

// exactPlan searches for the best assignment of requests to cards. It
// returns finished false when the budget ran out or the input is beyond
// what the search handles (note says which).
func exactPlan(cards []*pcard, fleet []FleetCard, requests []Request, lim searchLimit) exactResult {
	xs, demand, fail := newXSearch(cards, fleet, requests, lim, false)
	if fail != nil {
		return *fail
	}
	return xs.run(demand)
}

// newXSearch sets up the exact search: request kinds, classes of
// interchangeable cards and their maximal patterns (with feasible, every
// feasible vector too), and the demand. A non-nil result is the search's
// answer when it cannot run.
func newXSearch(
	cards []*pcard, fleet []FleetCard, requests []Request, lim searchLimit, feasible bool,
) (*xsearch, xvec, *exactResult) {
	xs := &xsearch{lim: lim, memo: map[xkey]xentry{}, w: int64(len(requests)) + 1, feasible: feasible}
	type kindKey struct {
		name, node string
		card       int
	}
	kindOf := map[kindKey]int{}
	for ri, r := range requests {
		pr, _ := resolve(fleet, r.Profile)
		k := kindKey{name: canonicalIn(fleet, r.Profile), node: r.Node, card: -1}
		if r.Card != nil {
			k.card = *r.Card
		}
		i, ok := kindOf[k]
		if !ok {
			i = len(xs.kinds)
			kindOf[k] = i
			xs.kinds = append(xs.kinds, xkind{name: k.name, node: k.node, card: k.card, compute: pr.Compute})
		}
		xs.kinds[i].reqs = append(xs.kinds[i].reqs, ri)
	}
	for _, k := range xs.kinds {
		xs.kval = append(xs.kval, int64(k.compute)*xs.w+1)
	}
	if len(xs.kinds) > maxProfiles {
		note := fmt.Sprintf("not run: %d kinds of request (profile and pin), the search handles %d",
			len(xs.kinds), maxProfiles)
		return nil, xvec{}, &exactResult{note: note}
	}
	for _, k := range xs.kinds {
		if len(k.reqs) > 0xffff {
			note := fmt.Sprintf("not run: %d requests of %s, the search handles %d",
				len(k.reqs), k.name, 0xffff)
			return nil, xvec{}, &exactResult{note: note}
		}
	}
	// Classes of interchangeable cards; partly used ones first, so that the
	// search fills them before it breaks free cards.
	byKey := map[xclassKey]*xclass{}
	for gi, g := range cards {
		key := xclassKey{s: g.s, fixed: g.fixed}
		any := false
		for ki, k := range xs.kinds {
			key.prof[ki] = -1
			if !pinOK(requests[k.reqs[0]], fleet[gi]) {
				continue
			}
			if pi, err := g.s.profileIndex(k.name); err == nil {
				key.prof[ki] = int8(pi)
				any = true
			}
		}
		if !any {
			continue
		}
		c := byKey[key]
		if c == nil {
			c = &xclass{key: key}
			byKey[key] = c
			xs.classes = append(xs.classes, c)
		}
		c.members = append(c.members, gi)
	}
	sort.SliceStable(xs.classes, func(a, b int) bool {
		return !xs.classes[a].key.fixed.empty() && xs.classes[b].key.fixed.empty()
	})
	var demand xvec
	for ki, k := range xs.kinds {
		for _, c := range xs.classes {
			if c.key.prof[ki] >= 0 {
				demand[ki] = uint16(len(k.reqs))
				break
			}
		}
	}
	for _, c := range xs.classes {
		if !xs.patterns(c, demand) {
			note := "budget exhausted while enumerating card patterns"
			return nil, xvec{}, &exactResult{nodes: xs.nodes, note: note}
		}
	}
	return xs, demand, nil
}

// run searches for the best assignment of demand.
func (xs *xsearch) run(demand xvec) exactResult {
	xs.suffix = make([]int, len(xs.classes)+1)
	xs.memSuf = make([]int, len(xs.classes)+1)
	xs.mostSuf = make([]xvec, len(xs.classes)+1)
	for c := len(xs.classes) - 1; c >= 0; c-- {
		cl := xs.classes[c]
		n := len(cl.members)
		xs.suffix[c] = xs.suffix[c+1] + n*cl.cap
		xs.memSuf[c] = xs.memSuf[c+1] + n*cl.memCap
		for ki := range xs.kinds {
			xs.mostSuf[c][ki] = uint16(min(0xffff, int(xs.mostSuf[c+1][ki])+n*int(cl.most[ki])))
		}
	}
	xs.valMem = -1
	for _, k := range xs.kinds {
		if k.mem > 0 {
			if v := (int64(k.compute)*xs.w + 1) / int64(k.mem); xs.valMem < 0 || v < xs.valMem {
				xs.valMem = v
			}
		}
	}
	xs.valMem = max(xs.valMem, 0)
	if len(xs.classes) == 0 {
		return exactResult{finished: true, take: map[int][]int{}}
	}
	val := xs.solve(0, int16(len(xs.classes[0].members)), 0, demand, 0)
	if xs.aborted {
		return exactResult{nodes: xs.nodes, note: "budget exhausted; the heuristic's plan is kept"}
	}
	// Follow the memoized choices from the root.
	res := exactResult{value: val, finished: true, take: map[int][]int{}, nodes: xs.nodes}
	next := make([]int, len(xs.kinds)) // next request of each kind to hand out
	rem := demand
	for c := 0; c < len(xs.classes); c++ {
		cl := xs.classes[c]
		n := int16(len(cl.members))
		k, m := n, int16(0)
		for k > 0 {
			// A subproblem the search cut off by its bound has no entry:
			// its cards take nothing.
			e, ok := xs.memo[xkey{c: int16(c), k: k, m: m, rem: rem}]
			if !ok || e.choice < 0 {
				break
			}
			w := cut(cl.pats[e.choice], rem)
			gi := cl.members[n-k]
			for ki := range xs.kinds {
				for j := 0; j < int(w[ki]); j++ {
					res.take[gi] = append(res.take[gi], xs.kinds[ki].reqs[next[ki]])
					next[ki]++
				}
				rem[ki] -= w[ki]
			}
			k, m = k-1, 0
		}
	}
	return res
}

// patterns enumerates the maximal patterns of a class, within demand.
// It returns false when the budget ran out.
func (xs *xsearch) patterns(c *xclass, demand xvec) bool {
	p := c.key.s
	kindsOf := make([][]int, len(p.Profiles)) // profile -> kinds it serves
	for ki := range xs.kinds {
		if pi := c.key.prof[ki]; pi >= 0 {
			kindsOf[pi] = append(kindsOf[pi], ki)
		}
	}
	seen := map[xvec]bool{}
	var all []xvec
	var v xvec
	st := c.key.fixed
	var rec func(from int) bool
	rec = func(from int) bool {
		if xs.tick() {
			return false
		}
		if !seen[v] {
			seen[v] = true
			all = append(all, v)
		}
		for si := from; si < len(p.slots); si++ {
			ks := kindsOf[p.slots[si].prof]
			if len(ks) == 0 || !p.fits(&st, si) {
				continue
			}
			p.add(&st, si)
			for _, ki := range ks {
				if v[ki] >= demand[ki] {
					continue
				}
				v[ki]++
				ok := rec(si + 1)
				v[ki]--
				if !ok {
					return false
				}
			}
			p.remove(&st, si)
		}
		return true
	}
	if !rec(0) {
		return false
	}
	// Keep the maximal vectors: a vector can only be contained in one with
	// a larger total, so scan by total, descending.
	total := func(v xvec) int {
		n := 0
		for _, x := range v {
			n += int(x)
		}
		return n
	}
	if xs.feasible {
		c.feas = append([]xvec(nil), all...)
	}
	sort.Slice(all, func(a, b int) bool { return total(all[a]) > total(all[b]) })
	for _, v := range all {
		if total(v) == 0 {
			continue
		}
		dominated := false
		for _, u := range c.pats {
			if covers(u, v, len(xs.kinds)) {
				dominated = true
				break
			}
		}
		if !dominated {
			c.pats = append(c.pats, v)
		}
	}
	sort.SliceStable(c.pats, func(a, b int) bool {
		va, vb := xs.value(c.pats[a]), xs.value(c.pats[b])
		if va != vb {
			return va > vb
		}
		return lessVec(c.pats[a], c.pats[b])
	})
	for _, v := range c.pats {
		c.cap = max(c.cap, xs.compute(v))
		m := 0
		for ki, x := range v {
			if x > 0 {
				size := p.info[c.key.prof[ki]].size
				m += int(x) * size
				if k := &xs.kinds[ki]; k.mem == 0 || size < k.mem {
					k.mem = size
				}
			}
			c.most[ki] = max(c.most[ki], x)
		}
		c.memCap = max(c.memCap, m)
	}
	return true
}

// tick counts a search node and reports whether the budget is spent.
func (xs *xsearch) tick() bool {
	xs.nodes++
	if xs.nodes > xs.lim.nodes || (xs.nodes&1023 == 0 && !xs.lim.deadline.IsZero() && time.Now().After(xs.lim.deadline)) {
		xs.aborted = true
	}
	return xs.aborted
}

// covers reports whether u holds v, comparing the first n kinds.
func covers(u, v xvec, n int) bool {
	for i := range n {
		if v[i] > u[i] {
			return false
		}
	}
	return true
}

func lessVec(a, b xvec) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return false
}

func cut(v, rem xvec) xvec {
	for i := range v { // all kinds: the unused ones are zero in both
		v[i] = min(v[i], rem[i])
	}
	return v
}

func (xs *xsearch) compute(v xvec) int {
	n := 0
	for ki, k := range xs.kinds {
		n += int(v[ki]) * k.compute
	}
	return n
}

func (xs *xsearch) value(v xvec) int64 {
	var n int64
	for ki, kv := range xs.kval {
		n += int64(v[ki]) * kv
	}
	return n
}

// bound is an upper bound on the value the cards from class c (k of its
// cards left) on can add with rem still requested: at most the capacity's
// compute units, no more of a kind than the cards can hold of it, and
// what exceeds the memory units is lost at the least value per slice.
func (xs *xsearch) bound(c int, k int16, rem xvec) int64 {
	cl := xs.classes[c]
	capC := xs.suffix[c+1] + int(k)*cl.cap
	capM := xs.memSuf[c+1] + int(k)*cl.memCap
	var n, comp, mem int64
	for ki, x := range rem {
		if x == 0 {
			continue
		}
		most := int(xs.mostSuf[c+1][ki]) + int(k)*int(cl.most[ki])
		y := int64(min(int(x), most))
		n += y
		comp += y * int64(xs.kinds[ki].compute)
		mem += y * int64(xs.kinds[ki].mem)
	}
	b := min(int64(capC), comp)*xs.w + n
	if over := mem - int64(capM); over > 0 {
		b = min(b, xs.value(rem)-over*xs.valMem)
	}
	return b
}

// solve returns the best value the cards from class c on can add, with k
// cards of class c left, patterns from m on, rem still requested; depth is
// the number of cards decided so far.
func (xs *xsearch) solve(c int, k, m int16, rem xvec, depth int) int64 {
	for k == 0 {
		c++
		if c == len(xs.classes) {
			return 0
		}
		k, m = int16(len(xs.classes[c].members)), 0
	}
	key := xkey{c: int16(c), k: k, m: m, rem: rem}
	if e, ok := xs.memo[key]; ok {
		return e.val
	}
	if xs.tick() {
		return 0
	}
	remVal := xs.value(rem)
	if remVal == 0 {
		xs.memo[key] = xentry{choice: -1}
		return 0
	}
	cl := xs.classes[c]
	for len(xs.seen) <= depth {
		xs.seen = append(xs.seen, nil)
	}
	best := xentry{choice: -1}
	for i := 0; i < len(cl.pats) && best.val < remVal; i++ {
		// A cut-down pattern that one tried before covers is no better:
		// taking more never hurts (see above).
		w := cut(cl.pats[i], rem)
		dominated := false
		for _, u := range xs.seen[depth] {
			if covers(u, w, len(xs.kinds)) {
				dominated = true
				break
			}
		}
		if dominated {
			continue
		}
		xs.seen[depth] = append(xs.seen[depth], w)
		vw := xs.value(w)
		if vw == 0 {
			continue
		}
		var next xvec
		for j := range rem {
			next[j] = rem[j] - w[j]
		}
		if vw+xs.bound(c, k-1, next) <= best.val {
			continue
		}
		v := vw + xs.solve(c, k-1, 0, next, depth+1)
		if xs.aborted {
			return 0
		}
		if v > best.val {
			best = xentry{val: v, choice: int16(i)}
		}
	}
	xs.seen[depth] = xs.seen[depth][:0]
	// The class's remaining cards take nothing.
	if best.val < remVal && c+1 < len(xs.classes) && xs.bound(c+1, int16(len(xs.classes[c+1].members)), rem) > best.val {
		v := xs.solve(c+1, int16(len(xs.classes[c+1].members)), 0, rem, depth+int(k))
		if xs.aborted {
			return 0
		}
		if v > best.val {
			best = xentry{val: v, choice: -1}
		}
	}
	xs.memo[key] = best
	return best.val
}
