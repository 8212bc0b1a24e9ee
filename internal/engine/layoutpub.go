package engine

import (
	"fmt"
	"slices"
	"sort"
)

// The layout publication (docs/dynamic-mig-publication.md, shape (a)):
// per card either the whole card's device or one device per partition of
// the card's current layout, without counters. This file chooses the
// layouts; layoutslices.go turns them into one pool of one slice per
// node; layoutpublisher.go sequences versions so that a scheduler with a
// stale view can never combine overlapping devices.

// Demand is what pending claims ask of a node: partitions per profile
// name (a scheme's Canonical applies), and whole cards under the key
// WholeCard. Counts must not be negative.
type Demand map[string]int

// WholeCard is the Demand key of requests for whole cards.
const WholeCard = ""

// LayoutCard is one card of a node in the layout publication.
//
// As input to PlanLayouts, Layout holds the card's in-use partitions
// (InUse set: allocated to a claim or prepared; they are kept) and the
// free partitions published now (InUse false: kept where the plan can
// keep them, so that a republish changes as little as it can);
// together they must be a valid layout. As output, Layout is the layout
// to publish, in the planner's order: the in-use partitions (InUse set)
// and free ones. An empty Layout publishes the card's whole device.
type LayoutCard struct {
	// Index is the card's index on its node; it names the devices.
	Index int
	// Scheme is the card's partition scheme, built by NewScheme.
	Scheme *Scheme
	// Layout is the card's partitions (see LayoutCard).
	Layout Layout
	// WholeInUse is true when the card's whole device is allocated or
	// prepared: Layout must then be empty, and the card publishes its
	// whole device.
	WholeInUse bool
}

// PublishedCard is one card of a node as its layout publication
// publishes it: a planned card (PlanLayouts' output, through Published)
// or one a publisher may withhold (LayoutPublisher's output, the layout
// ledger's Layout). It is the input of CounterModel.LayoutPools and
// LayoutSlices, never of PlanLayouts.
type PublishedCard struct {
	LayoutCard
	// Withheld is true when the card publishes no device at all (its
	// Layout and WholeInUse then say nothing): the publisher may not
	// offer any of it now.
	Withheld bool
}

// Published returns cards (PlanLayouts' output) as published cards, none
// withheld, in cards' order.
func Published(cards []LayoutCard) []PublishedCard {
	out := make([]PublishedCard, len(cards))
	for i, c := range cards {
		out[i] = PublishedCard{LayoutCard: c}
	}
	return out
}

// DefaultMix is the profile mix PlanLayouts fills a partitioned card's
// free space with when WithDefaultMix does not say otherwise: the
// profiles of DefaultProfiles (one per compute size, no extras) that
// leave room for another partition on an empty card and take at most
// half of the card's compute units, largest first (on an H100 or H200:
// 3g, 2g, 1g, which lay out an empty GPU as 3g + 2g + 1g + 1g). When no
// profile qualifies, the smallest profile that leaves room for another
// one; nil when there is none. A nil s has no mix.
func DefaultMix(s *Scheme) []string {
	if s.check() != nil {
		return nil
	}
	var out []string
	def := DefaultProfiles(s)
	for i := len(def) - 1; i >= 0; i-- {
		pi, err := s.profileIndex(def[i])
		if err != nil || s.info[pi].whole || 2*s.Profiles[pi].Compute > s.Compute.Count {
			continue
		}
		out = append(out, def[i])
	}
	if len(out) > 0 {
		return out
	}
	for pi, pr := range s.Profiles {
		if !s.info[pi].whole && !s.info[pi].hasExtra {
			return []string{pr.Name}
		}
	}
	return nil
}

// WithDefaultMix sets the profiles PlanLayouts (and LayoutPublisher)
// fill a partitioned card's free space with once the demand is served:
// mix returns them for a scheme, in the order they are placed round
// after round (nil or empty: no fill). The default is DefaultMix. A name
// the scheme lacks is an error. mix must not be nil. PlanLayouts and
// NewLayoutPublisher only.
func WithDefaultMix(mix func(s *Scheme) []string) Option {
	return func(o *options) error {
		if mix == nil {
			return fmt.Errorf("default mix: function is nil")
		}
		o.defaultMix = mix
		return nil
	}
}

// PlanLayouts chooses the layout each card of one node publishes, given
// what is in use and the pending demand. It is deterministic: the same
// input gives the same output.
//
//   - A card whose whole device is in use (WholeInUse) publishes it.
//   - demand[WholeCard] = k keeps up to k cards with nothing in use whole
//     (cards already whole first, the last in node order first).
//   - The partition demand is placed on the other cards by PlanFleet (its
//     order: largest first, each where the fragmentation score drops
//     least, whole cards kept free while a partly used card can take it;
//     its heuristic only, searches off, since a driver calls this on every
//     republish). Published free partitions that the plan can serve a
//     request with are kept. Each profile's count is capped at what the
//     node could hold; profiles no card offers are ignored.
//   - A card with nothing in use that the demand does not reach publishes
//     its whole device (a whole card is one device, and a whole-card
//     request needs it).
//   - On every other card (something in use or placed), the free space
//     left is filled: first with the card's published free partitions
//     that still fit (in start order), then round after round with the
//     default mix (WithDefaultMix; DefaultMix), each profile once per
//     round at its placement of least fragmentation loss, until a round
//     places nothing.
//
// The result has one entry per input card, in input order: Layout the
// in-use partitions (InUse) and the free ones, no two overlapping, each
// a valid placement (Scheme.Validate accepts the layout), in the
// planner's order (Preference over the in-use partitions: per profile in
// the scheme's order, the least loss first, in-use ones after the free
// ones of their profile); empty for a whole card. Errors wrap ErrFleet
// for invalid input.
func PlanLayouts(node []LayoutCard, demand Demand, opts ...Option) ([]LayoutCard, error) {
	o := options{defaultMix: DefaultMix}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("plan layouts: %w", err)
		}
	}
	seen := map[int]bool{}
	for i, c := range node {
		if err := c.Scheme.check(); err != nil {
			return nil, fmt.Errorf("plan layouts: %w: node[%d].scheme: %w", ErrFleet, i, err)
		}
		if c.Index < 0 || seen[c.Index] {
			return nil, fmt.Errorf("plan layouts: %w: node[%d].index %d is negative or repeated", ErrFleet, i, c.Index)
		}
		seen[c.Index] = true
		if err := c.Scheme.Validate(c.Layout); err != nil {
			return nil, fmt.Errorf("plan layouts: %w: node[%d].layout: %w", ErrFleet, i, err)
		}
		if c.WholeInUse && len(c.Layout) > 0 {
			return nil, fmt.Errorf("plan layouts: %w: node[%d]: whole %s in use beside partitions %v", ErrFleet, i, c.Scheme.Names.Card, c.Layout)
		}
	}
	for p, n := range demand {
		if n < 0 {
			return nil, fmt.Errorf("plan layouts: %w: demand for %q is negative (%d)", ErrFleet, p, n)
		}
	}
	out := make([]LayoutCard, len(node))
	inUse := make([]Layout, len(node))
	idle := make([]Layout, len(node))
	for i, c := range node {
		out[i] = LayoutCard{Index: c.Index, Scheme: c.Scheme, WholeInUse: c.WholeInUse}
		for _, in := range c.Layout {
			in.Restartable = false
			if in.InUse {
				inUse[i] = append(inUse[i], in)
			} else {
				idle[i] = append(idle[i], in)
			}
		}
	}

	// Whole cards asked for: keep k free cards whole.
	reserved := make([]bool, len(node))
	k := demand[WholeCard]
	for pass := 0; pass < 2 && k > 0; pass++ {
		for i := len(node) - 1; i >= 0 && k > 0; i-- {
			if node[i].WholeInUse || len(inUse[i]) > 0 || reserved[i] || (pass == 0) != (len(idle[i]) == 0) {
				continue
			}
			reserved[i] = true
			k--
		}
	}

	// The partition demand, by PlanFleet.
	var fleet []FleetCard
	var at []int // fleet position -> node position
	for i, c := range node {
		if c.WholeInUse || reserved[i] {
			continue
		}
		fleet = append(fleet, FleetCard{Node: "node", Index: c.Index, Scheme: c.Scheme, Layout: append(slices.Clone(inUse[i]), idle[i]...)})
		at = append(at, i)
	}
	var requests []Request
	for _, p := range sortedKeys(demand) {
		if p == WholeCard || demand[p] == 0 {
			continue
		}
		room := 0
		for _, f := range fleet {
			if pr, err := f.Scheme.Profile(p); err == nil {
				room += min(pr.MaxCount, len(pr.Placements))
			}
		}
		for j := 0; j < min(demand[p], room); j++ {
			requests = append(requests, Request{Profile: p})
		}
	}
	placed := make([]Layout, len(node))
	if len(requests) > 0 && len(fleet) > 0 {
		plan, err := PlanFleet(fleet, requests, WithSearchBudget(0))
		if err != nil {
			return nil, fmt.Errorf("plan layouts: %w", err)
		}
		for _, a := range plan.Assignments {
			i := -1
			for fi, f := range fleet {
				if f.Index == a.Card {
					i = at[fi]
				}
			}
			pr, err := node[i].Scheme.Profile(a.Profile)
			if err != nil {
				return nil, fmt.Errorf("plan layouts: %w", err)
			}
			placed[i] = append(placed[i], Instance{Profile: pr.Name, Start: a.Start})
		}
	}

	// Fill partitioned cards, then order them.
	var pref []FleetCard
	for i, c := range node {
		if c.WholeInUse || reserved[i] || (len(inUse[i]) == 0 && len(placed[i]) == 0) {
			continue
		}
		s := c.Scheme
		l := append(slices.Clone(inUse[i]), placed[i]...)
		st, err := s.stateOf(l)
		if err != nil {
			return nil, fmt.Errorf("plan layouts: %s %d: planned layout: %w", s.Names.Card, c.Index, err)
		}
		for _, in := range idle[i].Sorted() {
			pi, _ := s.profileIndex(in.Profile)
			si := s.slotIndex(pi, in.Start)
			if slices.ContainsFunc(l, func(x Instance) bool { return x.Profile == in.Profile && x.Start == in.Start }) || !s.fits(&st, si) {
				continue
			}
			s.add(&st, si)
			l = append(l, Instance{Profile: s.Profiles[pi].Name, Start: in.Start})
		}
		mix, err := s.profileIndices(o.defaultMix(s))
		if err != nil {
			return nil, fmt.Errorf("plan layouts: %s %d: default mix: %w", s.Names.Card, c.Index, err)
		}
		for more := len(mix) > 0; more; {
			more = false
			for _, pi := range mix {
				if si := s.leastLoss(st, pi); si >= 0 {
					s.add(&st, si)
					l = append(l, Instance{Profile: s.Profiles[pi].Name, Start: s.slots[si].start})
					more = true
				}
			}
		}
		out[i].Layout = l
		pref = append(pref, FleetCard{Node: "node", Index: c.Index, Scheme: s, Layout: inUse[i]})
	}
	if len(pref) > 0 {
		names, err := Preference(pref)
		if err != nil {
			return nil, fmt.Errorf("plan layouts: %w", err)
		}
		rank := make(map[string]int, len(names))
		for r, n := range names {
			rank[n] = r
		}
		for i := range out {
			c := &out[i]
			r := func(in Instance) int {
				n, _ := c.Scheme.DeviceName(c.Index, in.Profile, in.Start)
				return rank[n]
			}
			sort.SliceStable(c.Layout, func(a, b int) bool { return r(c.Layout[a]) < r(c.Layout[b]) })
		}
	}
	return out, nil
}

// leastLoss is profile pi's slot that fits st with the least
// fragmentation loss (ties: the lower slot), or -1.
func (s *Scheme) leastLoss(st state, pi int) int {
	best, bestLoss := -1, 0
	before := s.sc.score(st)
	for si, sl := range s.slots {
		if sl.prof != pi || !s.fits(&st, si) {
			continue
		}
		after := st
		s.add(&after, si)
		if loss := before - s.sc.score(after); best < 0 || loss < bestLoss {
			best, bestLoss = si, loss
		}
	}
	return best
}

// profileIndices maps profile names to indices, in the given order.
func (s *Scheme) profileIndices(names []string) ([]int, error) {
	out := make([]int, 0, len(names))
	for _, n := range names {
		pi, err := s.profileIndex(n)
		if err != nil {
			return nil, err
		}
		out = append(out, pi)
	}
	return out, nil
}

func sortedKeys(m Demand) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
