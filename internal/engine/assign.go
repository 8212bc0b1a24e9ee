package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// NodeCard is one card of a node as AssignFleet sees it: what is in use
// on it and what it offers free now.
type NodeCard struct {
	// Index is the card's index on its node.
	Index int
	// Scheme is the card's partition scheme.
	Scheme *Scheme
	// Profiles are the profiles the card offers; empty: all of the
	// scheme's.
	Profiles []string
	// InUse are the partitions allocated or busy on the card; they stay.
	InUse Layout
	// WholeInUse is true when the whole card is allocated or busy.
	WholeInUse bool
	// Free are the free partitions the card offers now (its open devices):
	// a request of one of their profiles takes one without a re-layout.
	Free Layout
	// FreeWhole is true when the card is offered whole now.
	FreeWhole bool
	// NoWhole is true when the card cannot be offered whole.
	NoWhole bool
	// Withheld is true when the card takes nothing new.
	Withheld bool
}

// Node is one node of the fleet for AssignFleet.
type Node struct {
	// Name is the node's name.
	Name string
	// Cards are its cards.
	Cards []NodeCard
}

// PendingRequest is what one pending pod asks of a driver: one profile
// per device (WholeCard for a whole card), all on one node.
type PendingRequest struct {
	// ID names the request in the result.
	ID string
	// Profiles are the devices asked for, one profile each.
	Profiles []string
	// Nodes are the nodes the request can land on (the pod's node
	// selection, the claim's selectors); nil: every node.
	Nodes []string
	// Waited is how long the request has been pending.
	Waited time.Duration
}

// ReservedCard keeps a card for a profile that fits nowhere yet.
type ReservedCard struct {
	// Card is the card's index on its node.
	Card int `json:"card"`
	// Profile is the profile it is kept for.
	Profile string `json:"profile"`
}

// FleetAssignment is AssignFleet's result.
type FleetAssignment struct {
	// Demand is, per node that gets any, what to lay out for: the
	// profiles of the devices assigned to it (a free partition of the
	// profile counts towards it).
	Demand map[string]Demand
	// Reserved is, per node, the cards kept for a larger profile.
	Reserved map[string][]ReservedCard
	// Placed is, per request ID, the node it is assigned.
	Placed map[string]string
	// Unplaced are the IDs of the requests no candidate node can hold.
	Unplaced []string
	// Relaid are the nodes whose layout the assignment changes: a device
	// is assigned there that is not offered free now.
	Relaid []string
}

// AssignOption configures AssignFleet.
type AssignOption func(*assignOptions) error

type assignOptions struct {
	aging time.Duration
}

// DefaultAging is how long a request waits before AssignFleet plans it
// before every younger one (WithAging).
const DefaultAging = 30 * time.Second

// WithAging sets how long a request waits before it is planned before
// every request that has waited less, whatever their sizes (default
// DefaultAging), and may keep a card reserved when it fits nowhere. d
// must be positive.
func WithAging(d time.Duration) AssignOption {
	return func(o *assignOptions) error {
		if d <= 0 {
			return fmt.Errorf("aging %s: must be positive", d)
		}
		o.aging = d
		return nil
	}
}

// acard is a card's working state in AssignFleet.
type acard struct {
	node   int
	c      *NodeCard
	st     state
	whole  bool            // taken whole (in use, or assigned)
	free   map[string]bool // free partitions ("profile@start") not taken
	reserv string          // reserved for this profile
	relaid bool
	used   int // compute units in use or assigned
}

// anode is a node's working state.
type anode struct {
	n      *Node
	cards  []*acard
	demand Demand
	relaid bool
	used   int // compute units in use or assigned
}

// AssignFleet decides which node lays out for which pending request, so
// that a burst lands on as few nodes as it needs and no request starves.
// Requests are planned in this order: those that have waited at least
// the aging (WithAging) first, the longest waiting first; then the
// others, largest first (a whole card, then by compute units of the
// request), the longest waiting first among equals, then by ID. Each
// goes to the candidate node where it costs least, all its devices on
// that node:
//
//  1. a free partition of its profile the node offers now (or the card
//     offered whole): nothing is laid out again;
//  2. free space of a card that already has partitions;
//  3. an idle card (or, for a whole-card request, a card not offered
//     whole now);
//
// among nodes of equal cost, a node already laid out again for an
// earlier request of this assignment first, then the node with the most
// compute in use (packing), then by name. Whole-card requests take cards
// with nothing in use. A request that fits on no candidate node is
// unplaced; if it has waited at least the aging, the candidate card of
// its largest profile that has the least compute in use is reserved for
// that profile: later requests are not assigned to it, and its node
// opens nothing else on it, so that its partitions drain and the larger
// profile does not lose forever to smaller ones placed first. The result
// is deterministic. Errors wrap ErrFleet for invalid input.
func AssignFleet(
	nodes []Node,
	reqs []PendingRequest,
	opts ...AssignOption,
) (*FleetAssignment, error) {
	o := assignOptions{aging: DefaultAging}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("assign fleet: %w", err)
		}
	}
	ns := make([]*anode, len(nodes))
	byName := map[string]int{}
	for i := range nodes {
		n := &nodes[i]
		if _, dup := byName[n.Name]; dup || n.Name == "" {
			return nil, fmt.Errorf(
				"assign fleet: %w: node %q is empty or repeated",
				ErrFleet,
				n.Name,
			)
		}
		byName[n.Name] = i
		an := &anode{n: n, demand: Demand{}}
		for j := range n.Cards {
			c := &n.Cards[j]
			if err := c.Scheme.check(); err != nil {
				return nil, fmt.Errorf(
					"assign fleet: %w: node %s card %d: %w",
					ErrFleet,
					n.Name,
					c.Index,
					err,
				)
			}
			st, err := c.Scheme.stateOf(c.InUse)
			if err != nil {
				return nil, fmt.Errorf(
					"assign fleet: %w: node %s card %d: %w",
					ErrFleet,
					n.Name,
					c.Index,
					err,
				)
			}
			ac := &acard{
				node:  i,
				c:     c,
				st:    st,
				whole: c.WholeInUse,
				free:  map[string]bool{},
				used:  computeOf(c.Scheme, c.InUse),
			}
			if c.WholeInUse {
				ac.used = c.Scheme.Compute.Count
			}
			for _, in := range c.Free {
				ac.free[in.Profile+"@"+fmt.Sprint(in.Start)] = true
			}
			an.used += computeOf(c.Scheme, c.InUse)
			if c.WholeInUse {
				an.used += c.Scheme.Compute.Count
			}
			an.cards = append(an.cards, ac)
		}
		ns[i] = an
	}
	order := slices.Clone(reqs)
	aged := func(r PendingRequest) bool { return r.Waited >= o.aging }
	size := func(r PendingRequest) int {
		n := 0
		for _, p := range r.Profiles {
			if p == WholeCard {
				n += 1 << 20
				continue
			}
			n += profileCompute(nodes, p)
		}
		return n
	}
	slices.SortStableFunc(order, func(a, b PendingRequest) int {
		if aged(a) != aged(b) {
			if aged(a) {
				return -1
			}
			return 1
		}
		if aged(a) {
			return cmp.Or(cmp.Compare(b.Waited, a.Waited), strings.Compare(a.ID, b.ID))
		}
		return cmp.Or(
			cmp.Compare(size(b), size(a)),
			cmp.Compare(b.Waited, a.Waited),
			strings.Compare(a.ID, b.ID),
		)
	})
	out := &FleetAssignment{
		Demand:   map[string]Demand{},
		Reserved: map[string][]ReservedCard{},
		Placed:   map[string]string{},
	}
	for _, r := range order {
		if len(r.Profiles) == 0 {
			continue
		}
		cands := r.Nodes
		if cands == nil {
			cands = make([]string, len(nodes))
			for i := range nodes {
				cands[i] = nodes[i].Name
			}
		}
		best, bestCost := -1, 0
		var bestPicks []pick
		for _, name := range cands {
			i, ok := byName[name]
			if !ok {
				continue
			}
			picks, cost, ok := tryNode(ns[i], r.Profiles)
			if !ok {
				continue
			}
			if best < 0 || better(ns[i], cost, ns[best], bestCost) {
				best, bestCost, bestPicks = i, cost, picks
			}
		}
		if best < 0 {
			out.Unplaced = append(out.Unplaced, r.ID)
			if aged(r) {
				reserve(ns, byName, cands, r, out)
			}
			continue
		}
		an := ns[best]
		for _, p := range bestPicks {
			p.apply(an)
		}
		out.Placed[r.ID] = an.n.Name
	}
	for _, an := range ns {
		if len(an.demand) > 0 {
			out.Demand[an.n.Name] = an.demand
		}
		if an.relaid {
			out.Relaid = append(out.Relaid, an.n.Name)
		}
	}
	slices.Sort(out.Relaid)
	return out, nil
}

// better says whether node a at cost ca beats node b at cost cb.
func better(a *anode, ca int, b *anode, cb int) bool {
	if ca != cb {
		return ca < cb
	}
	if a.relaid != b.relaid {
		return a.relaid
	}
	if a.used != b.used {
		return a.used > b.used
	}
	return a.n.Name < b.n.Name
}

// pick is one device of a request placed on a card of a node.
type pick struct {
	card    *acard
	profile string // canonical; WholeCard for the whole card
	slot    int    // the slot placed, -1 for a free partition taken or the whole card
	freeKey string // the free partition taken
	cost    int
}

func (p pick) apply(an *anode) {
	c := p.card
	an.demand[p.profile]++
	s := c.c.Scheme
	n := 0
	switch {
	case p.profile == WholeCard:
		c.whole = true
		n = s.Compute.Count
	case p.freeKey != "":
		delete(c.free, p.freeKey)
		if si := s.slotOfKey(p.freeKey); si >= 0 {
			s.add(&c.st, si)
			n = s.Profiles[s.slots[si].prof].Compute
		}
	default:
		s.add(&c.st, p.slot)
		n = s.Profiles[s.slots[p.slot].prof].Compute
	}
	an.used += n
	c.used += n
	if p.cost > 0 {
		c.relaid, an.relaid = true, true
	}
}

// tryNode places a request's devices on a node, on a copy of its state:
// the picks, the highest cost among them, and whether all fit.
func tryNode(an *anode, profiles []string) ([]pick, int, bool) {
	// Work on copies of the cards' states.
	saved := make([]acard, len(an.cards))
	for i, c := range an.cards {
		saved[i] = *c
		saved[i].free = map[string]bool{}
		for k := range c.free {
			saved[i].free[k] = true
		}
	}
	defer func() {
		for i, c := range an.cards {
			*c = saved[i]
		}
	}()
	var picks []pick
	worst := 0
	for _, p := range profiles {
		pk, ok := bestPick(an, p)
		if !ok {
			return nil, 0, false
		}
		// Apply on the working copy only (the node's counters are not
		// touched: apply's node part is redone on success).
		c := pk.card
		s := c.c.Scheme
		switch {
		case pk.profile == WholeCard:
			c.whole = true
		case pk.freeKey != "":
			delete(c.free, pk.freeKey)
			if si := s.slotOfKey(pk.freeKey); si >= 0 {
				s.add(&c.st, si)
			}
		default:
			s.add(&c.st, pk.slot)
		}
		picks = append(picks, pk)
		worst = max(worst, pk.cost)
	}
	return picks, worst, true
}

// bestPick finds where one device of profile goes on a node.
func bestPick(an *anode, profile string) (pick, bool) {
	var best pick
	found := false
	consider := func(p pick, loss int, bestLoss *int) {
		if !found || p.cost < best.cost || p.cost == best.cost && loss < *bestLoss {
			best, found, *bestLoss = p, true, loss
		}
	}
	bestLoss := 0
	for _, c := range an.cards {
		cc := c.c
		if cc.Withheld || c.whole {
			continue
		}
		s := cc.Scheme
		idle := c.st.empty() && len(cc.Free) == 0
		if profile == WholeCard {
			if c.st.empty() && c.reserv == "" && !cc.NoWhole {
				cost := 2
				if cc.FreeWhole {
					cost = 0
				}
				consider(pick{card: c, profile: WholeCard, slot: -1, cost: cost}, 0, &bestLoss)
			}
			continue
		}
		pi, err := s.profileIndex(profile)
		if err != nil ||
			len(cc.Profiles) > 0 && !slices.Contains(cc.Profiles, s.Profiles[pi].Name) {
			continue
		}
		name := s.Profiles[pi].Name
		if c.reserv != "" && c.reserv != name {
			continue
		}
		// 1: a free partition of the profile, offered now.
		for k := range c.free {
			if strings.HasPrefix(k, name+"@") {
				if si := s.slotOfKey(k); si >= 0 && s.fits(&c.st, si) {
					consider(
						pick{card: c, profile: name, slot: -1, freeKey: k, cost: 0},
						0,
						&bestLoss,
					)
				}
			}
		}
		// 2 and 3: free space, on a partitioned or an idle card.
		if si := s.leastLoss(c.st, pi); si >= 0 {
			cost := 1
			if idle {
				cost = 2
			}
			before := s.sc.score(c.st)
			after := c.st
			s.add(&after, si)
			consider(
				pick{card: c, profile: name, slot: si, cost: cost},
				before-s.sc.score(after),
				&bestLoss,
			)
		}
	}
	return best, found
}

// reserve keeps, for an aged request that fits nowhere, the candidate
// card of its largest profile with the least compute in use.
func reserve(
	ns []*anode,
	byName map[string]int,
	cands []string,
	r PendingRequest,
	out *FleetAssignment,
) {
	largest, lc := "", -1
	for _, p := range r.Profiles {
		if p == WholeCard {
			largest, lc = p, 1<<20
			continue
		}
		for _, an := range ns {
			for _, c := range an.cards {
				if pi, err := c.c.Scheme.profileIndex(p); err == nil &&
					c.c.Scheme.Profiles[pi].Compute > lc {
					largest, lc = c.c.Scheme.Profiles[pi].Name, c.c.Scheme.Profiles[pi].Compute
				}
			}
		}
	}
	if largest == "" || largest == WholeCard {
		return
	}
	var best *acard
	bestUsed := 0
	for _, name := range cands {
		i, ok := byName[name]
		if !ok {
			continue
		}
		for _, c := range ns[i].cards {
			s := c.c.Scheme
			if c.c.Withheld || c.whole || c.reserv != "" {
				continue
			}
			if _, err := s.profileIndex(largest); err != nil {
				continue
			}
			if best == nil || c.used < bestUsed {
				best, bestUsed = c, c.used
			}
		}
	}
	if best == nil {
		return
	}
	best.reserv = largest
	n := ns[best.node].n.Name
	out.Reserved[n] = append(out.Reserved[n], ReservedCard{Card: best.c.Index, Profile: largest})
}

// slotOfKey is the slot of a "profile@start" key, -1 when unknown.
func (s *Scheme) slotOfKey(k string) int {
	name, start, ok := strings.Cut(k, "@")
	if !ok {
		return -1
	}
	var st int
	if _, err := fmt.Sscan(start, &st); err != nil {
		return -1
	}
	return s.slotOf(Instance{Profile: name, Start: st})
}

// computeOf is the compute units of a layout's partitions.
func computeOf(s *Scheme, l Layout) int {
	n := 0
	for _, in := range l {
		if pr, err := s.Profile(in.Profile); err == nil {
			n += pr.Compute
		}
	}
	return n
}

// profileCompute is a profile's compute units on the first card whose
// scheme has it.
func profileCompute(nodes []Node, p string) int {
	for _, n := range nodes {
		for _, c := range n.Cards {
			if pr, err := c.Scheme.Profile(p); err == nil {
				return pr.Compute
			}
		}
	}
	return 0
}
