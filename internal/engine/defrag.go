package engine

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The defragmenter. A request that fits nowhere although the fleet has
// the free compute and memory for it is blocked by fragmentation: the
// free slices are scattered over placements the profile cannot use.
// Defragment finds the fewest restartable partitions to move so that the
// request and the moved partitions all fit.
//
// The search is exact. In any plan the request lands on some placement
// (a target), and every in-use partition that overlaps the target must
// move, so a plan of t moves is a target whose overlapping partitions are
// all restartable, plus t minus their number other restartable
// partitions (which make room for the moved ones, or free a profile's
// count). For t = 0, 1, ... k, every such set is tried: its partitions
// and the request are assigned to cards by depth-first search, each card's
// placements chosen exactly by the planner's per-card enumeration, cards
// in one state that the set leaves alone tried once. The first t with a
// plan is the fewest moves; among its plans the one with the highest
// fragmentation score of the result wins (the planner's score, summed
// over the cards), ties to the first found (targets by card then start,
// other partitions from the target's card, then its node, then the rest,
// each in fleet order). The work (sets tried plus search nodes) is
// counted and bounded, so a result does not depend on how busy the
// machine is.

// DefaultMaxMoves is the most partitions Defragment moves when
// WithMaxMoves does not say otherwise.
const DefaultMaxMoves = 2

// DefaultDefragWork is Defragment's work budget when WithWorkBudget does
// not say otherwise: sets of partitions tried plus search nodes. One node
// of 8 cards with up to three moves stays far below it (the tests check
// that every search of the bench's streams completes).
const DefaultDefragWork = 2_000_000

// Move is one partition a defragmentation plan moves: its workload stops
// on Node/Card at Start and runs again on ToNode/ToCard at ToStart.
type Move struct {
	Node    string `json:"node"`
	Card    int    `json:"card"`
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	ToNode  string `json:"toNode"`
	ToCard  int    `json:"toCard"`
	ToStart int    `json:"toStart"`
}

// String prints e.g. "node-a/0 small@2 -> node-a/3@6": node and card
// index, profile and placement, then where it goes.
func (m Move) String() string {
	return fmt.Sprintf("%s/%d %s@%d -> %s/%d@%d", m.Node, m.Card, m.Profile, m.Start, m.ToNode, m.ToCard, m.ToStart)
}

// Defrag is Defragment's result.
type Defrag struct {
	// Found is true when the request fits after Moves (no moves when it
	// fits already).
	Found bool `json:"found"`
	// Target is where the request goes (Request is 0), when Found.
	Target Assignment `json:"target"`
	// Moves are the partitions to move, fewest possible, in fleet order of
	// their current place.
	Moves []Move `json:"moves,omitempty"`
	// After is the fleet once the moves are done and the request placed:
	// cards the plan does not touch keep their layout; the others hold
	// their in-use partitions that stay, the moved ones (in use, still
	// restartable) and the request's (in use). Idle partitions on touched
	// cards are destroyed.
	After []FleetCard `json:"after,omitempty"`
	// Score is the fragmentation score of After, summed over the cards
	// (higher is better; the planner's measure).
	Score int `json:"score"`
	// Work is the work the search did: sets of partitions tried plus
	// search nodes.
	Work int `json:"work"`
	// Budget is the work the search was allowed (WithWorkBudget).
	Budget int `json:"budget"`
	// Complete is true when the search finished: the plan has the fewest
	// moves and, among those, the best score; or, when not Found, no plan
	// of at most MaxMoves moves exists. False when the budget ran out:
	// then a found plan may not be the best, and Reason says so.
	Complete bool `json:"complete"`
	// MaxMoves is the most moves the search allowed (WithMaxMoves).
	MaxMoves int `json:"maxMoves"`
	// Reason says why nothing was found, or why the search stopped.
	Reason string `json:"reason,omitempty"`
}

// WithMaxMoves sets the most partitions Defragment may move (default
// DefaultMaxMoves); 0 only checks whether the request fits. k must be
// between 0 and 8. Defragment only.
func WithMaxMoves(k int) Option {
	return func(o *options) error {
		if k < 0 || k > 8 {
			return fmt.Errorf("max moves %d: must be between 0 and 8", k)
		}
		o.maxMoves = k
		return nil
	}
}

// WithWorkBudget bounds a search by work, not time, so that a result is
// the same on a busy and an idle machine: Defragment's (sets of partitions
// tried plus search nodes; default DefaultDefragWork) and PlanFleet's
// (search nodes of its neighbourhood and exact searches; default
// DefaultSearchWork). n must be positive.
func WithWorkBudget(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("work budget %d: must be positive", n)
		}
		o.work = n
		return nil
	}
}

// Defragment finds where a request for one partition can go on the fleet
// if some restartable partitions move (Instance.Restartable; in-use
// partitions that are not restartable never move; idle partitions count as
// free): the fewest partitions to move, at most WithMaxMoves, and the
// placement of each and of the request, such that all fit by the
// catalog's rules; among plans with the fewest moves, the one whose
// result has the best fragmentation score. Moved partitions keep their
// profile and may go to any card whose scheme has it; the request
// follows its pins (Request.Node, Request.card). The search is exact and
// bounded by work (see WithWorkBudget): Defrag.Complete says whether it
// finished, Defrag.Reason why nothing was found. Options other than
// WithMaxMoves and WithWorkBudget are ignored. Errors are for invalid
// input only (wrapping ErrFleet). Defragment is safe for concurrent use.
func Defragment(fleet []FleetCard, req Request, opts ...Option) (*Defrag, error) {
	o := options{maxMoves: DefaultMaxMoves, work: DefaultDefragWork}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("defragment: %w", err)
		}
	}
	pl := newPlanner()
	cards, err := pl.load(fleet)
	if err != nil {
		return nil, fmt.Errorf("defragment: %w", err)
	}
	if req.Profile == "" {
		return nil, fmt.Errorf("defragment: %w: request profile is empty", ErrFleet)
	}
	if req.Card != nil && *req.Card < 0 {
		return nil, fmt.Errorf("defragment: %w: request card %d is negative", ErrFleet, *req.Card)
	}
	if req.Node != "" {
		found := false
		for _, f := range fleet {
			found = found || f.Node == req.Node
		}
		if !found {
			return nil, fmt.Errorf("defragment: %w: request node %q is not in the fleet", ErrFleet, req.Node)
		}
	}
	nn := namesOf(fleet)
	ds := &defragSearch{pl: pl, fleet: fleet, cards: cards, budget: o.work, reqName: canonicalIn(fleet, req.Profile)}
	res := &Defrag{Budget: o.work, MaxMoves: o.maxMoves}
	ds.setup(req)
	if len(ds.targets) == 0 && !ds.anyOffer {
		res.Complete = true
		res.Reason = "no " + nn.Card + " the request may use offers profile " + ds.reqName
		return res, nil
	}
	pr, _ := resolve(fleet, req.Profile)
	if need, free := pr.Compute, ds.freeCompute(); free < need {
		res.Complete = true
		res.Reason = fmt.Sprintf("the fleet has %d free %s, %s needs %d: moving %s cannot help", free, plural(nn.ComputeUnit), ds.reqName, need, plural(nn.Partition))
		return res, nil
	}
	for t := 0; t <= o.maxMoves && !ds.aborted; t++ {
		ds.size(t)
		if ds.best != nil {
			break
		}
	}
	res.Work = ds.work
	res.Complete = !ds.aborted
	if ds.best == nil {
		switch {
		case ds.aborted:
			res.Reason = fmt.Sprintf("gave up: work budget %d spent before a plan of at most %d moves was found", o.work, o.maxMoves)
		case len(ds.targets) == 0:
			res.Reason = "every placement of " + ds.reqName + " overlaps " + article(nn.Partition) + " that is not restartable"
		default:
			res.Reason = fmt.Sprintf("no plan moves at most %d restartable %s", o.maxMoves, plural(nn.Partition))
		}
		return res, nil
	}
	if ds.aborted {
		res.Reason = fmt.Sprintf("work budget %d spent: the plan may not be the best", o.work)
	}
	ds.build(res)
	return res, nil
}

// dmov is a restartable partition: its card and slot.
type dmov struct {
	gi, si int
	prof   string
}

// dtarget is a placement of the request and the restartable partitions
// that overlap it.
type dtarget struct {
	gi, si int
	over   []int // indices into movs, ascending
}

// ditem is an partition to place: the request (mov -1) or a moved one.
type ditem struct {
	prof string
	mem  int
	mov  int
}

type dchoice struct {
	set    []int // movs moved
	items  []ditem
	cardOf []int // per item, its card
	score  int
	states map[int]state
}

type defragSearch struct {
	pl       *planner
	fleet    []FleetCard
	cards    []*pcard
	reqName  string
	reqProf  []int // per card, the request's profile index; -1 when the card may not take it
	anyOffer bool
	movs     []dmov
	targets  []dtarget
	groups   [][]int // cards by (scheme, in-use state), fleet order; groups in order of first member
	groupOf  []int
	base     []int // per card, the score of its in-use state
	budget   int
	work     int
	aborted  bool
	tried    map[string]bool
	best     *dchoice

	// per set
	states   map[int]state // cards the set or the assignment touch: in-use state less the set
	assigned map[int][maxProfiles]uint8
	items    []ditem
	cardOf   []int
	set      []int
}

func (ds *defragSearch) tick() bool {
	ds.work++
	if ds.work > ds.budget {
		ds.aborted = true
	}
	return ds.aborted
}

func (ds *defragSearch) setup(req Request) {
	ds.reqProf = make([]int, len(ds.cards))
	ds.groupOf = make([]int, len(ds.cards))
	ds.base = make([]int, len(ds.cards))
	type gk struct {
		prod  *Scheme
		fixed state
	}
	gidx := map[gk]int{}
	movAt := map[[2]int]int{}
	for gi, g := range ds.cards {
		ds.base[gi] = g.sc.score(g.fixed)
		k := gk{g.s, g.fixed}
		i, ok := gidx[k]
		if !ok {
			i = len(ds.groups)
			gidx[k] = i
			ds.groups = append(ds.groups, nil)
		}
		ds.groups[i] = append(ds.groups[i], gi)
		ds.groupOf[gi] = i
		f := ds.fleet[gi]
		for _, in := range f.Layout {
			if !in.InUse || !in.Restartable {
				continue
			}
			pi, _ := g.s.profileIndex(in.Profile)
			si := g.s.slotIndex(pi, in.Start)
			movAt[[2]int{gi, si}] = len(ds.movs)
			ds.movs = append(ds.movs, dmov{gi: gi, si: si, prof: g.s.Profiles[pi].Name})
		}
		ds.reqProf[gi] = -1
		if !pinOK(req, f) {
			continue
		}
		pi, err := g.s.profileIndex(ds.reqName)
		if err != nil {
			continue
		}
		ds.reqProf[gi] = pi
		ds.anyOffer = true
	}
	for gi, g := range ds.cards {
		pi := ds.reqProf[gi]
		if pi < 0 {
			continue
		}
		for si, sl := range g.s.slots {
			if sl.prof != pi {
				continue
			}
			t := dtarget{gi: gi, si: si}
			ok := true
			for _, u := range g.inUse {
				if g.s.slots[u].mask&sl.mask == 0 {
					continue
				}
				m, movable := movAt[[2]int{gi, u}]
				if !movable {
					ok = false
					break
				}
				t.over = append(t.over, m)
			}
			if ok {
				sort.Ints(t.over)
				ds.targets = append(ds.targets, t)
			}
		}
	}
}

// freeCompute is the fleet's free compute units, idle partitions free.
func (ds *defragSearch) freeCompute() int {
	n := 0
	for _, g := range ds.cards {
		n += g.s.Compute.Count - g.s.computeUsed(&g.fixed)
	}
	return n
}

// size tries every set of t partitions that some target needs.
func (ds *defragSearch) size(t int) {
	ds.tried = map[string]bool{}
	for _, tg := range ds.targets {
		if len(tg.over) > t {
			continue
		}
		rest := ds.others(tg)
		need := t - len(tg.over)
		pick := make([]int, 0, need)
		var rec func(from int) bool
		rec = func(from int) bool {
			if len(pick) == need {
				set := append(append([]int(nil), tg.over...), pick...)
				sort.Ints(set)
				return ds.trySet(set)
			}
			for i := from; i <= len(rest)-(need-len(pick)); i++ {
				pick = append(pick, rest[i])
				ok := rec(i + 1)
				pick = pick[:len(pick)-1]
				if !ok {
					return false
				}
			}
			return true
		}
		if !rec(0) {
			return
		}
	}
}

// others lists the restartable partitions a target does not need moved:
// its card's first, then its node's, then the rest, each in fleet order.
func (ds *defragSearch) others(tg dtarget) []int {
	in := map[int]bool{}
	for _, m := range tg.over {
		in[m] = true
	}
	var a, b, c []int
	node := ds.fleet[tg.gi].Node
	for i, m := range ds.movs {
		switch {
		case in[i]:
		case m.gi == tg.gi:
			a = append(a, i)
		case ds.fleet[m.gi].Node == node:
			b = append(b, i)
		default:
			c = append(c, i)
		}
	}
	return append(append(a, b...), c...)
}

// trySet searches the placements of the request and the set's
// partitions; it returns false when the budget is spent.
func (ds *defragSearch) trySet(set []int) bool {
	var kb strings.Builder
	for _, m := range set {
		kb.WriteString(strconv.Itoa(m))
		kb.WriteByte(',')
	}
	key := kb.String()
	if ds.tried[key] {
		return true
	}
	ds.tried[key] = true
	if ds.tick() {
		return false
	}
	ds.set = set
	ds.states = map[int]state{}
	ds.assigned = map[int][maxProfiles]uint8{}
	ds.items = ds.items[:0]
	for _, m := range set {
		mv := ds.movs[m]
		g := ds.cards[mv.gi]
		st, ok := ds.states[mv.gi]
		if !ok {
			st = g.fixed
		}
		g.s.remove(&st, mv.si)
		ds.states[mv.gi] = st
		ds.items = append(ds.items, ditem{prof: mv.prof, mem: g.s.info[g.s.slots[mv.si].prof].size, mov: m})
	}
	rq := ditem{prof: ds.reqName, mov: -1}
	for gi, pi := range ds.reqProf {
		if pi >= 0 {
			rq.mem = ds.cards[gi].s.info[pi].size
			break
		}
	}
	ds.items = append(ds.items, rq)
	// Largest first (fewest placements, most pruning); the request first
	// among equals; moved partitions of one profile next to each other.
	sort.SliceStable(ds.items, func(a, b int) bool {
		x, y := ds.items[a], ds.items[b]
		if x.mem != y.mem {
			return x.mem > y.mem
		}
		if (x.mov < 0) != (y.mov < 0) {
			return x.mov < 0
		}
		return x.prof < y.prof
	})
	ds.cardOf = make([]int, len(ds.items))
	return ds.place(0)
}

// state returns card gi's in-use state less the set's partitions.
func (ds *defragSearch) state(gi int) state {
	if st, ok := ds.states[gi]; ok {
		return st
	}
	return ds.cards[gi].fixed
}

// candidates lists the cards an item may go to: every card the set or the
// assignment touches, and the first untouched card of every group.
func (ds *defragSearch) candidates() []int {
	var out []int
	for _, members := range ds.groups {
		for _, gi := range members {
			_, touched := ds.states[gi]
			_, got := ds.assigned[gi]
			if touched || got {
				continue
			}
			out = append(out, gi)
			break
		}
	}
	for gi := range ds.states {
		out = append(out, gi)
	}
	for gi := range ds.assigned {
		if _, ok := ds.states[gi]; !ok {
			out = append(out, gi)
		}
	}
	sort.Ints(out)
	return out
}

func (ds *defragSearch) profIndex(gi int, it ditem) int {
	if it.mov < 0 {
		return ds.reqProf[gi]
	}
	pi, err := ds.cards[gi].s.profileIndex(it.prof)
	if err != nil {
		return -1
	}
	return pi
}

func (ds *defragSearch) evalAt(gi int, a [maxProfiles]uint8) evalResult {
	g := ds.cards[gi]
	return ds.pl.eval(evalKey{s: g.s, fixed: ds.state(gi), assigned: a})
}

// place assigns items i.. to cards; it returns false when the budget is
// spent.
func (ds *defragSearch) place(i int) bool {
	if i == len(ds.items) {
		ds.leaf()
		return true
	}
	it := ds.items[i]
	minCard := -1
	if i > 0 && it.mov >= 0 && ds.items[i-1].mov >= 0 && ds.items[i-1].prof == it.prof {
		minCard = ds.cardOf[i-1] // interchangeable partitions: non-decreasing cards
	}
	for _, gi := range ds.candidates() {
		if gi < minCard {
			continue
		}
		pi := ds.profIndex(gi, it)
		if pi < 0 {
			continue
		}
		if ds.tick() {
			return false
		}
		a, had := ds.assigned[gi]
		a[pi]++
		if !ds.evalAt(gi, a).ok {
			continue
		}
		ds.assigned[gi] = a
		ds.cardOf[i] = gi
		ok := ds.place(i + 1)
		a[pi]--
		if had {
			ds.assigned[gi] = a
		} else {
			delete(ds.assigned, gi)
		}
		if !ok {
			return false
		}
	}
	return true
}

// leaf scores a complete assignment and keeps it when it is the best.
func (ds *defragSearch) leaf() {
	score := 0
	seen := map[int]bool{}
	for gi := range ds.states {
		seen[gi] = true
	}
	for gi := range ds.assigned {
		seen[gi] = true
	}
	for gi := range seen {
		score += ds.evalAt(gi, ds.assigned[gi]).score - ds.base[gi]
	}
	if ds.best != nil && score <= ds.best.score {
		return
	}
	st := make(map[int]state, len(ds.states))
	for gi, s := range ds.states {
		st[gi] = s
	}
	ds.best = &dchoice{set: ds.set, items: append([]ditem(nil), ds.items...), cardOf: append([]int(nil), ds.cardOf...), score: score, states: st}
}

// build turns the best choice into the result.
func (ds *defragSearch) build(res *Defrag) {
	b := ds.best
	res.Found = true
	total := 0
	for _, s := range ds.base {
		total += s
	}
	res.Score = total + b.score
	ds.states = b.states
	byCard := map[int][]int{} // card -> items
	for i, gi := range b.cardOf {
		byCard[gi] = append(byCard[gi], i)
	}
	moved := map[int]bool{}
	for _, m := range b.set {
		moved[m] = true
	}
	movedFrom := map[[2]int]bool{}
	for _, m := range b.set {
		movedFrom[[2]int{ds.movs[m].gi, ds.movs[m].si}] = true
	}
	dest := map[int][2]int{} // item -> card, start
	for gi, items := range byCard {
		g := ds.cards[gi]
		var a [maxProfiles]uint8
		byProf := map[int][]int{}
		for _, i := range items {
			pi := ds.profIndex(gi, b.items[i])
			a[pi]++
			byProf[pi] = append(byProf[pi], i)
		}
		r := ds.evalAt(gi, a)
		// r.slots are by profile, starts ascending; hand them to the
		// request first, then to moved partitions in fleet order.
		for _, l := range byProf {
			sort.Slice(l, func(x, y int) bool { return b.items[l[x]].mov < b.items[l[y]].mov })
		}
		for _, si := range r.slots {
			pi := g.s.slots[si].prof
			i := byProf[pi][0]
			byProf[pi] = byProf[pi][1:]
			dest[i] = [2]int{gi, g.s.slots[si].start}
		}
	}
	after := make([]FleetCard, len(ds.fleet))
	for gi, f := range ds.fleet {
		_, touched := ds.states[gi]
		_, got := byCard[gi]
		if !touched && !got {
			after[gi] = FleetCard{Node: f.Node, Index: f.Index, Scheme: f.Scheme, Layout: append(Layout(nil), f.Layout...)}
			continue
		}
		g := ds.cards[gi]
		nf := FleetCard{Node: f.Node, Index: f.Index, Scheme: f.Scheme}
		for _, in := range f.Layout {
			if !in.InUse {
				continue
			}
			pi, _ := g.s.profileIndex(in.Profile)
			if movedFrom[[2]int{gi, g.s.slotIndex(pi, in.Start)}] {
				continue
			}
			nf.Layout = append(nf.Layout, in)
		}
		after[gi] = nf
	}
	var movOrder []int // per move, its index in movs (fleet order)
	for i, it := range b.items {
		d := dest[i]
		f := ds.fleet[d[0]]
		name := ds.cards[d[0]].s.Profiles[ds.profIndex(d[0], it)].Name
		if it.mov < 0 {
			res.Target = Assignment{Request: 0, Node: f.Node, Card: f.Index, Profile: name, Start: d[1]}
			after[d[0]].Layout = append(after[d[0]].Layout, Instance{Profile: name, Start: d[1], InUse: true})
			continue
		}
		mv := ds.movs[it.mov]
		from := ds.fleet[mv.gi]
		src := ds.cards[mv.gi].s.slots[mv.si]
		movOrder = append(movOrder, it.mov)
		res.Moves = append(res.Moves, Move{Node: from.Node, Card: from.Index, Profile: mv.prof, Start: src.start, ToNode: f.Node, ToCard: f.Index, ToStart: d[1]})
		after[d[0]].Layout = append(after[d[0]].Layout, Instance{Profile: name, Start: d[1], InUse: true, Restartable: true})
	}
	sort.Sort(byMov{res.Moves, movOrder})
	for gi := range after {
		after[gi].Layout = after[gi].Layout.Sorted()
	}
	res.After = after
}

// byMov sorts moves by their partitions' fleet order.
type byMov struct {
	m   []Move
	ord []int
}

func (b byMov) Len() int           { return len(b.m) }
func (b byMov) Less(i, j int) bool { return b.ord[i] < b.ord[j] }
func (b byMov) Swap(i, j int) {
	b.m[i], b.m[j] = b.m[j], b.m[i]
	b.ord[i], b.ord[j] = b.ord[j], b.ord[i]
}
