package engine

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Request asks for one partition of a profile.
type Request struct {
	// ID names the request in plans; optional.
	ID string `json:"id,omitempty"`
	// Profile is the profile's name; only cards whose scheme has this
	// profile can take the request.
	Profile string `json:"profile"`
	// Node, when set, pins the request to that node.
	Node string `json:"node,omitempty"`
	// Card, when set, pins the request to that card index (on Node, or
	// on any node when Node is empty).
	Card *int `json:"card,omitempty"`
}

// OpKind is the kind of a plan operation.
type OpKind string

// Operation kinds.
const (
	OpDestroy OpKind = "destroy"
	OpCreate  OpKind = "create"
)

// Operation is one step of a plan: create or destroy one partition.
type Operation struct {
	Kind    OpKind `json:"kind"`
	Node    string `json:"node"`
	Card    int    `json:"card"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	// Request is the index of the request a create serves, -1 for destroys.
	Request int `json:"request"`
}

// String prints e.g. "create node-a/0 half@4 (request 2)": the node, the
// card's index, the profile and the placement.
func (o Operation) String() string {
	s := fmt.Sprintf("%-7s %s/%d %s@%d", o.Kind, o.Node, o.Card, o.Profile, o.Start)
	if o.Request >= 0 {
		s += " (request " + strconv.Itoa(o.Request) + ")"
	}
	return s
}

// Assignment says where a placed request goes.
type Assignment struct {
	Request int    `json:"request"`
	Node    string `json:"node"`
	Card    int    `json:"card"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	// Reused is true when an existing idle partition serves the request.
	Reused bool `json:"reused,omitempty"`
}

// Unplaced is a request the plan could not place.
type Unplaced struct {
	Request int    `json:"request"`
	Reason  string `json:"reason"`
}

// Plan is the planner's result. Applying Operations in order (destroys
// first, then creates) turns the fleet into After.
type Plan struct {
	Operations  []Operation  `json:"operations"`
	Assignments []Assignment `json:"assignments"`
	Unplaced    []Unplaced   `json:"unplaced,omitempty"`
	// After is the fleet once the plan is applied: in-use partitions plus
	// the placed requests' partitions (marked in use), in fleet order.
	After []FleetCard `json:"after"`
	// PlacedCompute is the compute units of the placed requests.
	PlacedCompute int `json:"placedCompute"`
	// FreeCards is the number of cards with no partition in After.
	FreeCards int `json:"freeCards"`
	// Search reports the exact search PlanFleet runs when its heuristic
	// leaves requests unplaced, and whether the plan is proven optimal.
	Search Search `json:"search"`
}

// ErrFleet is wrapped by errors about the fleet or request input.
var ErrFleet = errors.New("invalid planner input")

// pcard is the planner's working state of one card.
type pcard struct {
	fi       int
	s        *Scheme
	sc       *scorer
	fixed    state
	inUse    []int // slots of in-use partitions
	idle     []int // slots of idle partitions, ascending
	idleKey  string
	assigned [maxProfiles]uint8
	reqs     []int // assigned requests, in assignment order
}

type evalKey struct {
	s        *Scheme
	fixed    state
	idle     string
	assigned [maxProfiles]uint8
}

type evalResult struct {
	ok    bool
	score int
	ops   int
	used  uint64 // placed units used after
	slots []int  // chosen slots, one per assigned partition, by profile
}

// planner holds the caches of one planning run. Scores are memoized by
// each scheme (Scheme.sc), so nothing outlives the run but what the
// schemes themselves hold.
type planner struct {
	evals   map[evalKey]evalResult
	repairs map[repairKey][maxProfiles]uint8
	pidx    map[pidxKey]int
}

type pidxKey struct {
	s    *Scheme
	name string
}

func newPlanner() *planner {
	return &planner{
		evals:   map[evalKey]evalResult{},
		repairs: map[repairKey][maxProfiles]uint8{},
		pidx:    map[pidxKey]int{},
	}
}

// profile is s.profileIndex(name), remembered for the run: -1 when s
// has no such profile. (A miss builds an error; the repair asks each card
// about every unplaced request.)
func (pl *planner) profile(s *Scheme, name string) int {
	k := pidxKey{s, name}
	if i, ok := pl.pidx[k]; ok {
		return i
	}
	i, err := s.profileIndex(name)
	if err != nil {
		i = -1
	}
	pl.pidx[k] = i
	return i
}

// load turns the fleet into working cards, checking it.
func (pl *planner) load(fleet []FleetCard) ([]*pcard, error) {
	seen := map[string]int{}
	cards := make([]*pcard, len(fleet))
	for i, f := range fleet {
		id := f.Node + "/" + strconv.Itoa(f.Index)
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("%w: fleet[%d]: node %q card %d repeats fleet[%d]", ErrFleet, i, f.Node, f.Index, j)
		}
		seen[id] = i
		p := f.Scheme
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("%w: fleet[%d].scheme: %w", ErrFleet, i, err)
		}
		if _, err := p.stateOf(f.Layout); err != nil {
			return nil, fmt.Errorf("%w: fleet[%d].layout: %w", ErrFleet, i, err)
		}
		g := &pcard{fi: i, s: p, sc: p.sc}
		for _, in := range f.Layout {
			pi, _ := p.profileIndex(in.Profile)
			si := p.slotIndex(pi, in.Start)
			if in.InUse {
				g.inUse = append(g.inUse, si)
				p.add(&g.fixed, si)
			} else {
				g.idle = append(g.idle, si)
			}
		}
		sort.Ints(g.idle)
		for _, si := range g.idle {
			g.idleKey += string(rune(si + 1))
		}
		cards[i] = g
	}
	return cards, nil
}

func (g *pcard) key() evalKey {
	return evalKey{s: g.s, fixed: g.fixed, idle: g.idleKey, assigned: g.assigned}
}

// eval finds the best placement of the assigned multiset on a card: valid,
// highest fragmentation score, then fewest create/destroy operations.
func (pl *planner) eval(k evalKey) evalResult {
	if r, ok := pl.evals[k]; ok {
		return r
	}
	p := k.s
	sc := p.sc
	// Profiles to place, largest first (fewest placements, most pruning).
	var order []int
	for pi := range p.Profiles {
		for n := 0; n < int(k.assigned[pi]); n++ {
			order = append(order, pi)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return p.info[order[a]].size > p.info[order[b]].size
	})
	idle := map[int]bool{}
	for _, r := range k.idle {
		idle[int(r)-1] = true
	}
	best := evalResult{}
	st := k.fixed
	chosen := make([]int, len(order))
	var rec func(i, minSlot int)
	rec = func(i, minSlot int) {
		if i == len(order) {
			ops := 0
			reused := 0
			for _, si := range chosen {
				if idle[si] {
					reused++
				} else {
					ops++
				}
			}
			ops += len(idle) - reused
			s := sc.score(st)
			if !best.ok || s > best.score || (s == best.score && ops < best.ops) {
				best = evalResult{ok: true, score: s, ops: ops, used: st.used, slots: append([]int(nil), chosen...)}
			}
			return
		}
		pi := order[i]
		from := 0
		if i > 0 && order[i-1] == pi {
			from = minSlot + 1
		}
		for si := from; si < len(p.slots); si++ {
			if p.slots[si].prof != pi || !p.fits(&st, si) {
				continue
			}
			p.add(&st, si)
			chosen[i] = si
			rec(i+1, si)
			p.remove(&st, si)
		}
	}
	rec(0, 0)
	pl.evals[k] = best
	return best
}

// reqInfo is a request resolved against the fleet.
type reqInfo struct {
	i       int
	compute int
	mem     int64
	pinned  bool
}

// resolve finds a request's profile on the first card of the fleet
// whose scheme offers it; ok is false when none does. The fleet's schemes
// must be built.
func resolve(fleet []FleetCard, name string) (pr Profile, ok bool) {
	for _, f := range fleet {
		if pi, err := f.Scheme.profileIndex(name); err == nil {
			return f.Scheme.Profiles[pi], true
		}
	}
	return Profile{}, false
}

// canonicalIn is a request's profile name as the first scheme of the
// fleet that offers it spells it, or the name itself.
func canonicalIn(fleet []FleetCard, name string) string {
	if pr, ok := resolve(fleet, name); ok {
		return pr.Name
	}
	return name
}

// namesOf is the names of the fleet's first built scheme (its nouns
// phrase the fleet's messages), or the defaults.
func namesOf(fleet []FleetCard) Names {
	for _, f := range fleet {
		if f.Scheme.check() == nil {
			return f.Scheme.Names
		}
	}
	n, _ := Names{}.withDefaults(false, false)
	return n
}

// PlanFleet computes a deterministic plan that places as many of the
// requests as it can, measured first in compute units and then in count,
// on the fleet: it never touches an in-use partition; idle partitions are
// reused when one has the requested profile at a placement the plan
// chooses, and destroyed otherwise (the result holds only in-use
// partitions and placed requests). Requests are placed largest first
// (compute units, then memory bytes), except that when some request's
// profile takes an extra (Profile.Extras, a media engine say) those go
// first, each only onto a card that still has the extra free, and plain
// largest first is tried too when that leaves requests out (the plan
// that places more is kept); each goes to the card and placement
// that lose the least fragmentation score (see Scheme.Score and
// FreeCardBonus), so whole cards stay free and free space stays in large
// aligned blocks; ties go to fewer operations, then fleet order. The
// placements of one card are chosen exactly, by enumeration, and a
// repair pass trades each card's requests and the unplaced ones for the
// best set the card can hold, so a one-card fleet always gets an optimal
// plan. A request's profile is looked up by name in each card's scheme
// (Scheme.Canonical applies); one that no card offers stays unplaced.
//
// When the heuristic leaves requests unplaced, four searches follow,
// all bounded by one work budget (WithWorkBudget, DefaultSearchWork:
// search nodes counted, so the plan is the same on a busy and an idle
// machine; WithSearchBudget adds a time limit): on a fleet of two
// schemes that share one profile name and no pins, a plan per scheme
// with the shared requests split between them; an exchange search (at
// most three quarters of the budget left) that changes what up to four
// cards hold, each to another multiset its in-use partitions leave room
// for, so that unplaced requests fit and nothing placed is lost; a
// neighbourhood search that re-packs pairs and triples of cards with the
// unplaced requests exactly; then an exact search over the whole fleet (branch and bound
// over per-card maximal patterns, interchangeable cards taken as one
// class, memoized). Plan.Search reports them. When the budget runs out
// first, Plan.Search says so (Optimal false). Options other than
// WithSearchBudget and WithWorkBudget do not apply to PlanFleet and are
// ignored. PlanFleet is safe for concurrent use.
func PlanFleet(fleet []FleetCard, requests []Request, opts ...Option) (*Plan, error) {
	o := options{work: DefaultSearchWork}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
	}
	searchOff := o.budgetSet && o.budget == 0
	pl := newPlanner()
	cards, err := pl.load(fleet)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	nodes := map[string]bool{}
	for _, f := range fleet {
		nodes[f.Node] = true
	}
	reqs := make([]reqInfo, len(requests))
	for i, r := range requests {
		if r.Profile == "" {
			return nil, fmt.Errorf("plan: %w: requests[%d].profile is empty", ErrFleet, i)
		}
		if r.Node != "" && !nodes[r.Node] {
			return nil, fmt.Errorf("plan: %w: requests[%d].node %q is not in the fleet", ErrFleet, i, r.Node)
		}
		if r.Card != nil && *r.Card < 0 {
			return nil, fmt.Errorf("plan: %w: requests[%d].card %d is negative", ErrFleet, i, *r.Card)
		}
		pr, _ := resolve(fleet, r.Profile)
		reqs[i] = reqInfo{i: i, compute: pr.Compute, mem: pr.MemoryBytes, pinned: r.Node != "" || r.Card != nil}
	}
	order := append([]reqInfo(nil), reqs...)
	sort.SliceStable(order, func(a, b int) bool {
		x, y := order[a], order[b]
		if x.compute != y.compute {
			return x.compute > y.compute
		}
		if x.mem != y.mem {
			return x.mem > y.mem
		}
		if x.pinned != y.pinned {
			return x.pinned
		}
		return x.i < y.i
	})

	profIdx := map[*Scheme]map[string]int{}
	for _, g := range cards {
		if profIdx[g.s] == nil {
			m := map[string]int{}
			for _, r := range requests {
				if pi, err := g.s.profileIndex(r.Profile); err == nil {
					m[r.Profile] = pi
				}
			}
			profIdx[g.s] = m
		}
	}
	// The requests whose profile takes an extra (a media engine) on the
	// scheme that resolves it.
	var extras []reqInfo
	for _, r := range order {
		if pr, ok := resolve(fleet, requests[r.i].Profile); ok && len(pr.Extras) > 0 {
			extras = append(extras, r)
		}
	}
	var unplaced []int
	if len(extras) == 0 {
		unplaced = pl.greedy(cards, fleet, requests, order, profIdx)
		unplaced = pl.repairAll(cards, fleet, requests, unplaced)
	} else {
		// Extras first: a card holds few partitions with an extra, so
		// those requests go first, each onto a card that still has the
		// extra, and the rest fill around them, largest first. When that
		// leaves requests out, plain largest first is tried as well and
		// the better of the two kept (compute units, then count).
		isExtra := make([]bool, len(requests))
		for _, r := range extras {
			isExtra[r.i] = true
		}
		first := append([]reqInfo(nil), extras...)
		for _, r := range order {
			if !isExtra[r.i] {
				first = append(first, r)
			}
		}
		unplaced = pl.greedy(cards, fleet, requests, first, profIdx)
		unplaced = pl.repairAll(cards, fleet, requests, unplaced)
		if len(unplaced) > 0 {
			type saved struct {
				assigned [maxProfiles]uint8
				reqs     []int
			}
			keep := make([]saved, len(cards))
			for gi, g := range cards {
				keep[gi] = saved{g.assigned, append([]int(nil), g.reqs...)}
			}
			v1 := valueOf(reqs, unplaced)
			alt := pl.greedy(cards, fleet, requests, order, profIdx)
			alt = pl.repairAll(cards, fleet, requests, alt)
			if v2 := valueOf(reqs, alt); v1.Less(v2) {
				unplaced = alt
			} else {
				for gi, g := range cards {
					g.assigned, g.reqs = keep[gi].assigned, keep[gi].reqs
				}
			}
		}
	}
	search := Search{Budget: o.budget, Work: o.work, Optimal: len(unplaced) == 0}
	if len(unplaced) > 0 && !searchOff {
		start := time.Now()
		lim := searchLimit{nodes: o.work}
		if o.budget > 0 {
			lim.deadline = start.Add(o.budget)
		}
		var spent int
		var out bool
		if take, n, ok := byScheme(fleet, requests, o.work); ok {
			for gi, g := range cards {
				g.assigned = [maxProfiles]uint8{}
				g.reqs = take[gi]
				for _, ri := range g.reqs {
					pi, _ := g.s.profileIndex(requests[ri].Profile)
					g.assigned[pi]++
				}
			}
			unplaced, spent = nil, n
		} else {
			spent = n
		}
		if len(unplaced) > 0 && spent < o.work {
			var more int
			xl := searchLimit{nodes: (o.work - spent) * 3 / 4, deadline: lim.deadline}
			unplaced, more = pl.exchange(cards, fleet, requests, unplaced, xl)
			spent += more
		}
		if len(unplaced) > 0 && spent < o.work {
			var more int
			unplaced, more, out = pl.neighbourhood(cards, fleet, requests, reqs, unplaced, o.work-spent)
			spent += more
		}
		search.Neighbourhood = spent
		switch {
		case len(unplaced) == 0:
			search.Ran, search.Optimal, search.Improved = true, true, true
			search.Nodes = spent
		case out:
			search.Ran, search.Nodes = true, spent
			search.Note = "work budget spent in the neighbourhood search; its plan is kept"
		default:
			// The whole-fleet search costs far more per node than the
			// neighbourhood's small ones: it gets at most a hundredth of
			// the budget, so that a fleet where nothing more fits is not
			// searched for long.
			lim.nodes = min(o.work-spent, max(o.work/100, 1))
			var s Search
			unplaced, s = pl.exact(cards, fleet, requests, reqs, unplaced, lim)
			s.Nodes += spent
			s.Neighbourhood = spent
			s.Budget, s.Work = o.budget, o.work
			search = s
		}
		search.Elapsed = time.Since(start)
	}
	sort.Ints(unplaced)
	var up []Unplaced
	nn := namesOf(fleet)
	for _, ri := range unplaced {
		r := requests[ri]
		reason := "no " + nn.Card + " has room for " + r.Profile + " without touching in-use " + plural(nn.Partition)
		offered := false
		for gi, g := range cards {
			if _, ok := profIdx[g.s][r.Profile]; ok && pinOK(r, fleet[gi]) {
				offered = true
				break
			}
		}
		if !offered {
			reason = "no " + nn.Card + " the request may use offers profile " + r.Profile
		}
		up = append(up, Unplaced{Request: ri, Reason: reason})
	}
	plan := pl.build(fleet, requests, cards, up)
	plan.Search = search
	return plan, nil
}

// greedy clears the cards' assignments and places the requests in the
// given order, each onto the card and placement that lose the least
// fragmentation score (see PlanFleet). It returns the unplaced requests in
// the order they were tried.
func (pl *planner) greedy(cards []*pcard, fleet []FleetCard, requests []Request, order []reqInfo, profIdx map[*Scheme]map[string]int) []int {
	for _, g := range cards {
		g.assigned = [maxProfiles]uint8{}
		g.reqs = nil
	}
	// Group cards with equal keys so that a request evaluates each distinct
	// card state once; a group's cards are in fleet order and a group caches
	// its candidate per profile (a key's evaluation never changes).
	groups := map[evalKey]*group{}
	var glist []*group
	cardGroup := make([]*group, len(cards))
	join := func(gi int) {
		k := cards[gi].key()
		gr := groups[k]
		if gr == nil {
			gr = &group{key: k}
			groups[k] = gr
			glist = append(glist, gr)
		}
		gr.members = insertInt(gr.members, gi)
		cardGroup[gi] = gr
	}
	for gi := range cards {
		join(gi)
	}
	var unplaced []int
	for _, r := range order {
		req := requests[r.i]
		var best *candidate
		bestCard := -1
		consider := func(gr *group, gi int) {
			pi, ok := profIdx[cards[gi].s][req.Profile]
			if !ok || !extrasHost(cards[gi], pi) {
				return
			}
			c := pl.candidate(gr, pi)
			if !c.ok {
				return
			}
			if best == nil || c.delta > best.delta ||
				(c.delta == best.delta && c.free < best.free) ||
				(c.delta == best.delta && c.free == best.free && c.dops < best.dops) ||
				(c.delta == best.delta && c.free == best.free && c.dops == best.dops && gi < bestCard) {
				best, bestCard = c, gi
			}
		}
		if r.pinned {
			for gi := range cards {
				if pinOK(req, fleet[gi]) {
					consider(cardGroup[gi], gi)
				}
			}
		} else {
			live := glist[:0]
			for _, gr := range glist {
				if len(gr.members) > 0 {
					live = append(live, gr)
					consider(gr, gr.members[0])
				}
			}
			glist = live
		}
		if best == nil {
			unplaced = append(unplaced, r.i)
			continue
		}
		g := cards[bestCard]
		old := cardGroup[bestCard]
		old.members = removeInt(old.members, bestCard)
		if len(old.members) == 0 {
			delete(groups, old.key)
		}
		g.assigned[profIdx[g.s][req.Profile]]++
		g.reqs = append(g.reqs, r.i)
		join(bestCard)
	}
	return unplaced
}

// repairAll runs the repair pass: per card, exactly, trade its requests
// and the unplaced ones for the best set it can hold; repeat while
// something improves. It returns the requests still unplaced.
func (pl *planner) repairAll(cards []*pcard, fleet []FleetCard, requests []Request, unplaced []int) []int {
	for pass := 0; pass < 3 && len(unplaced) > 0; pass++ {
		improved := false
		for gi, g := range cards {
			var ok bool
			unplaced, ok = pl.repair(g, fleet[gi], requests, unplaced)
			improved = improved || ok
		}
		if !improved {
			break
		}
	}
	return unplaced
}

// valueOf is the objective value of placing every request but the
// unplaced ones.
func valueOf(reqs []reqInfo, unplaced []int) Value {
	out := make(map[int]bool, len(unplaced))
	for _, ri := range unplaced {
		out[ri] = true
	}
	var v Value
	for _, r := range reqs {
		if !out[r.i] {
			v.Compute += r.compute
			v.Count++
		}
	}
	return v
}

// extrasHost reports whether card g, with what it holds and is assigned,
// still has room for the extras of profile pi (a card whose scheme can
// host the extra and whose extra is not all taken).
func extrasHost(g *pcard, pi int) bool {
	in := &g.s.info[pi]
	if !in.hasExtra {
		return true
	}
	used := g.fixed.extra
	for q, n := range g.assigned {
		if n > 0 && g.s.info[q].hasExtra {
			for e, v := range g.s.info[q].extra {
				used[e] += v * n
			}
		}
	}
	for e, v := range in.extra {
		if int(used[e])+int(v) > int(g.s.extraCap[e]) {
			return false
		}
	}
	return true
}

// exact runs the exact search after the heuristic and, when it places
// more, replaces the heuristic's assignment. It returns the unplaced
// requests and the search report.
func (pl *planner) exact(cards []*pcard, fleet []FleetCard, requests []Request, reqs []reqInfo, unplaced []int, lim searchLimit) ([]int, Search) {
	res := exactPlan(cards, fleet, requests, lim)
	s := Search{Ran: true, Nodes: res.nodes, Note: res.note, Optimal: res.finished}
	if !res.finished {
		return unplaced, s
	}
	w := int64(len(requests)) + 1
	var heur int64
	for _, g := range cards {
		for _, ri := range g.reqs {
			heur += int64(reqs[ri].compute)*w + 1
		}
	}
	if res.value <= heur {
		return unplaced, s
	}
	s.Improved = true
	placed := make([]bool, len(requests))
	for gi, g := range cards {
		g.assigned = [maxProfiles]uint8{}
		g.reqs = append([]int(nil), res.take[gi]...)
		for _, ri := range g.reqs {
			pi, _ := g.s.profileIndex(requests[ri].Profile)
			g.assigned[pi]++
			placed[ri] = true
		}
	}
	unplaced = unplaced[:0]
	for ri, ok := range placed {
		if !ok {
			unplaced = append(unplaced, ri)
		}
	}
	return unplaced, s
}

func pinOK(r Request, f FleetCard) bool {
	return (r.Node == "" || f.Node == r.Node) && (r.Card == nil || f.Index == *r.Card)
}

type repairKey struct {
	s     *Scheme
	fixed state
	avail [maxProfiles]uint8
}

// repair replaces the requests assigned to g by the best multiset, by
// value, that g's completions can serve from its own and the unplaced
// requests. It returns the new unplaced list and whether g improved.
func (pl *planner) repair(g *pcard, f FleetCard, requests []Request, unplaced []int) ([]int, bool) {
	p := g.s
	avail := g.assigned
	var cand [maxProfiles][]int // profile -> unplaced requests that fit g
	any := false
	for _, ri := range unplaced {
		r := requests[ri]
		if !pinOK(r, f) {
			continue
		}
		pi := pl.profile(p, r.Profile)
		if pi < 0 || avail[pi] == 255 {
			continue
		}
		avail[pi]++
		cand[pi] = append(cand[pi], ri)
		any = true
	}
	if !any {
		return unplaced, false
	}
	val := func(v [maxProfiles]uint8) int {
		x := 0
		for pi := range p.Profiles {
			x += int(v[pi]) * (p.Profiles[pi].Compute*64 + 1)
		}
		return x
	}
	cur := val(g.assigned)
	rk := repairKey{s: p, fixed: g.fixed, avail: avail}
	best, ok := pl.repairs[rk]
	if !ok {
		var v [maxProfiles]uint8
		st := g.fixed
		bestVal := -1
		var bestScore int
		var rec func(from int)
		rec = func(from int) {
			if x := val(v); x >= bestVal {
				k := evalKey{s: p, fixed: g.fixed, idle: g.idleKey, assigned: v}
				res := pl.eval(k)
				if x > bestVal || res.score > bestScore {
					bestVal, bestScore, best = x, res.score, v
				}
			}
			for si := from; si < len(p.slots); si++ {
				pi := p.slots[si].prof
				if v[pi] >= avail[pi] || !p.fits(&st, si) {
					continue
				}
				p.add(&st, si)
				v[pi]++
				rec(si + 1)
				v[pi]--
				p.remove(&st, si)
			}
		}
		rec(0)
		pl.repairs[rk] = best
	}
	if val(best) <= cur {
		return unplaced, false
	}
	// Keep already assigned requests first, then take unplaced ones by index.
	var keep, drop []int
	have := [maxProfiles]uint8{}
	for _, ri := range g.reqs {
		pi := pl.profile(p, requests[ri].Profile)
		if have[pi] < best[pi] {
			have[pi]++
			keep = append(keep, ri)
		} else {
			drop = append(drop, ri)
		}
	}
	taken := map[int]bool{}
	// Profiles in index order: g.reqs' order reaches the neighbourhood
	// search's request kinds, and so its work count.
	for pi, l := range cand {
		for _, ri := range l {
			if have[pi] >= best[pi] {
				break
			}
			have[pi]++
			keep = append(keep, ri)
			taken[ri] = true
		}
	}
	var rest []int
	for _, ri := range unplaced {
		if !taken[ri] {
			rest = append(rest, ri)
		}
	}
	rest = append(rest, drop...)
	sort.Ints(rest)
	g.reqs = keep
	g.assigned = best
	return rest, true
}

// group is the cards that share one evaluation key.
type group struct {
	key     evalKey
	members []int
	cands   [maxProfiles]*candidate
}

// candidate is what adding one partition of a profile to a group's
// cards does: feasible, score change, placed units left free, operations
// added.
type candidate struct {
	ok                bool
	delta, free, dops int
}

func (pl *planner) candidate(gr *group, pi int) *candidate {
	if c := gr.cands[pi]; c != nil {
		return c
	}
	cur := pl.eval(gr.key)
	k := gr.key
	k.assigned[pi]++
	res := pl.eval(k)
	c := &candidate{ok: res.ok}
	if res.ok {
		c.delta = res.score - cur.score
		c.dops = res.ops - cur.ops
		c.free = k.s.freeUnits(res.used)
	}
	gr.cands[pi] = c
	return c
}

func removeInt(s []int, v int) []int {
	i := sort.SearchInts(s, v)
	if i < len(s) && s[i] == v {
		return append(s[:i:i], s[i+1:]...)
	}
	return s
}

func insertInt(s []int, v int) []int {
	i := sort.SearchInts(s, v)
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// build turns the per-card assignments into operations and the result.
func (pl *planner) build(fleet []FleetCard, requests []Request, cards []*pcard, unplaced []Unplaced) *Plan {
	plan := &Plan{Unplaced: unplaced}
	var creates []Operation
	for gi, g := range cards {
		f := fleet[gi]
		res := pl.eval(g.key())
		// res.slots follow the eval order (largest profile first, slots
		// ascending within a profile); hand them to requests in the same
		// profile order, requests by index.
		byProf := map[int][]int{}
		for _, ri := range g.reqs {
			pi, _ := g.s.profileIndex(requests[ri].Profile)
			byProf[pi] = append(byProf[pi], ri)
		}
		for _, l := range byProf {
			sort.Ints(l)
		}
		target := map[int]int{} // slot -> request
		for _, si := range res.slots {
			pi := g.s.slots[si].prof
			target[si] = byProf[pi][0]
			byProf[pi] = byProf[pi][1:]
		}
		idle := map[int]bool{}
		for _, si := range g.idle {
			idle[si] = true
			if _, keep := target[si]; !keep {
				sl := g.s.slots[si]
				plan.Operations = append(plan.Operations, Operation{Kind: OpDestroy, Node: f.Node, Card: f.Index, Profile: g.s.Profiles[sl.prof].Name, Start: sl.start, Request: -1})
			}
		}
		after := FleetCard{Node: f.Node, Index: f.Index, Scheme: f.Scheme}
		for _, si := range g.inUse {
			sl := g.s.slots[si]
			after.Layout = append(after.Layout, Instance{Profile: g.s.Profiles[sl.prof].Name, Start: sl.start, InUse: true})
		}
		slots := make([]int, 0, len(target))
		for si := range target {
			slots = append(slots, si)
		}
		sort.Slice(slots, func(a, b int) bool { return g.s.slots[slots[a]].start < g.s.slots[slots[b]].start })
		for _, si := range slots {
			sl := g.s.slots[si]
			name := g.s.Profiles[sl.prof].Name
			ri := target[si]
			after.Layout = append(after.Layout, Instance{Profile: name, Start: sl.start, InUse: true})
			plan.Assignments = append(plan.Assignments, Assignment{Request: ri, Node: f.Node, Card: f.Index, Profile: name, Start: sl.start, Reused: idle[si]})
			plan.PlacedCompute += g.s.Profiles[sl.prof].Compute
			if !idle[si] {
				creates = append(creates, Operation{Kind: OpCreate, Node: f.Node, Card: f.Index, Profile: name, Start: sl.start, Request: ri})
			}
		}
		after.Layout = after.Layout.Sorted()
		if len(after.Layout) == 0 {
			plan.FreeCards++
		}
		plan.After = append(plan.After, after)
	}
	plan.Operations = append(plan.Operations, creates...)
	sort.Slice(plan.Assignments, func(a, b int) bool { return plan.Assignments[a].Request < plan.Assignments[b].Request })
	return plan
}
