package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// ModelCards turns one node's fleet entries into counter-model cards
// (index, scheme), in the given order.
func ModelCards(node []FleetCard) ([]Card, error) {
	out := make([]Card, len(node))
	for i, f := range node {
		if err := f.Scheme.check(); err != nil {
			return nil, fmt.Errorf("model cards: %w: cards[%d].scheme: %w", ErrFleet, i, err)
		}
		out[i] = Card{Index: f.Index, Scheme: f.Scheme}
	}
	return out, nil
}

// Preference is the planner's online mode. For one node's cards and their
// current partitions (all treated as allocated, in use or not), it
// returns the names of every device of the node's counter model
// (NewCounterModel with all profiles, or with the profiles of
// WithProfiles) in the order the planner prefers them: per profile, in
// the scheme's order (smallest first), the placements that fit, the
// least fragmentation loss first (ties: the card with the most
// partitions, then the one with the fewest placed units left free, then
// card order, then start), then the placements that do not fit; the
// whole cards come last, empty ones first (WithCardsFirst puts them
// first). With memoryless lifetimes the card running the most partitions
// is the last to drain, so packing onto it keeps the others emptying. A
// driver that publishes its slices with CounterModel.Reorder(names)
// makes the scheduler's first-fit choice for a one-device request the
// planner's choice, since the allocator takes the first device in slice
// order whose counters are free. Recompute and republish after every
// allocation or release.
//
// The order is what a claim gets that any device satisfies (a class that
// selects every device of the driver, as a conformance suite's claims
// do): the smallest profile's best placement, never a whole card while a
// partition fits. Whole cards first would give such a claim a whole card
// and leave the claims after it nothing on a one-card node. Claims that
// name a profile, or select whole cards by type, get the same device in
// either order.
//
// With WithReserve(n), while at most n of the node's cards are free, the
// placements of partial profiles (every profile beside which something
// else still fits on an empty card) on free cards are left out of the
// list: a driver that publishes only the listed devices
// (CounterModel.Only) keeps those cards for whole-card requests. This is
// admission control, a policy choice, off by default: it rejects small
// requests while few cards are free so that whole-card requests find
// one; it lowers whole-card rejection and raises everyone else's.
func Preference(node []FleetCard, opts ...Option) ([]string, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("preference: %w", err)
		}
	}
	pl := newPlanner()
	cards, err := pl.load(node)
	if err != nil {
		return nil, fmt.Errorf("preference: %w", err)
	}
	freeCards := 0
	for _, g := range cards {
		if g.fixed.empty() && len(g.idle) == 0 {
			freeCards++
		}
	}
	reserve := o.reserve > 0 && freeCards <= o.reserve
	wholeGroup := math.MaxInt
	if o.cardsFirst {
		wholeGroup = 0
	}
	type entry struct {
		name                string
		group               int
		fits                bool
		loss, free, card, i int
		running             int
	}
	var entries []entry
	groupOf := map[string]int{}
	for gi, g := range cards {
		s := g.s
		var allow []bool
		if o.profiles != nil {
			if allow, err = s.profileFilter(o.profiles(s)); err != nil {
				return nil, fmt.Errorf("preference: %s %d: %w", s.Names.Card, node[gi].Index, err)
			}
		}
		st := g.fixed
		for _, si := range g.idle {
			s.add(&st, si)
		}
		whole := entry{name: s.CardDeviceName(node[gi].Index), group: wholeGroup, fits: st.empty(), card: gi}
		if !o.fitOnly || g.fixed.empty() {
			entries = append(entries, whole)
		}
		before := g.sc.score(st)
		for si, sl := range s.slots {
			name := s.Profiles[sl.prof].Name
			grp, ok := groupOf[name]
			if !ok {
				grp = len(groupOf) + 1
				groupOf[name] = grp
			}
			if o.fitOnly && !s.fits(&g.fixed, si) && !slices.Contains(g.inUse, si) {
				continue
			}
			if allow != nil && !allow[sl.prof] {
				continue
			}
			if reserve && st.empty() && !s.info[sl.prof].whole {
				continue
			}
			e := entry{name: s.slotDeviceName(node[gi].Index, si), group: grp, card: gi, i: si, running: len(node[gi].Layout)}
			if s.fits(&st, si) {
				after := st
				s.add(&after, si)
				e.fits = true
				e.loss = before - g.sc.score(after)
				e.free = s.freeUnits(after.used)
			}
			entries = append(entries, e)
		}
	}
	sort.SliceStable(entries, func(a, b int) bool {
		x, y := entries[a], entries[b]
		if x.group != y.group {
			return x.group < y.group
		}
		if x.fits != y.fits {
			return x.fits
		}
		if !x.fits {
			return false // keep static order among devices that do not fit
		}
		if x.loss != y.loss {
			return x.loss < y.loss
		}
		if x.running != y.running {
			return x.running > y.running
		}
		if x.free != y.free {
			return x.free < y.free
		}
		if x.card != y.card {
			return x.card < y.card
		}
		return x.i < y.i
	})
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	return names, nil
}

// Option configures PlanFleet, Preference and Defragment; each option
// says which it applies to, and the others ignore it.
type Option func(*options) error

type options struct {
	reserve    int
	budget     time.Duration
	budgetSet  bool
	profiles   func(*Scheme) []string
	fitOnly    bool
	cardsFirst bool
	maxMoves   int
	work       int
	// Layout publication (layoutpub.go).
	defaultMix  func(*Scheme) []string
	fence       time.Duration
	fenceSet    bool
	poolDevices int
}

// WithFitOnly makes Preference list only the devices the scheduler can
// still allocate: those that fit beside the node's in-use partitions, and
// the devices of the in-use partitions themselves (which the scheduler
// holds allocated, so their counters must stay visible). A device that
// overlaps an in-use partition can be part of no allocation until that
// partition goes, so leaving it out changes no allocation result (the
// tests prove it with the real allocator), while the scheduler evaluates
// and stores far fewer devices on busy nodes. Idle partitions do not
// shrink the list: they are not allocated and the planner may replace
// them. Publish the result with CounterModel.Only (or use
// CounterModel.PreferredPools), and republish after every change, as for
// Preference. The in-use partitions must be those of allocated devices
// of the model: a card allocated whole has no partitions, so leave its
// layout empty (its counters keep the scheduler off its other devices);
// describing it as a partition of a whole-card profile would hide the
// whole-card device and show that partition's device as free.
// Preference only.
func WithFitOnly() Option {
	return func(o *options) error {
		o.fitOnly = true
		return nil
	}
}

// WithCardsFirst makes Preference list each whole card's device before
// the partitions (empty cards first, then the others), an order for a
// driver whose device classes keep whole cards and partitions apart by
// type, so that no claim sees both kinds and each gets the same device
// in either order. Preference only.
func WithCardsFirst() Option {
	return func(o *options) error {
		o.cardsFirst = true
		return nil
	}
}

// WithProfiles makes Preference list only the devices of the profiles a
// driver advertises: for each card, the profiles of its scheme that
// profiles returns (nil or empty: all), the same set the driver gives
// NewCounterModel as Card.Profiles, so that CounterModel.Reorder accepts
// every name. WithProfiles(DefaultProfiles) matches a model built with
// DefaultProfiles. A name the scheme lacks is an error of Preference.
// profiles must not be nil. Preference only.
func WithProfiles(profiles func(s *Scheme) []string) Option {
	return func(o *options) error {
		if profiles == nil {
			return fmt.Errorf("profiles: function is nil")
		}
		o.profiles = profiles
		return nil
	}
}

// WithSearchBudget adds a time limit to PlanFleet's searches (see
// PlanFleet and Search), on top of the work budget; 0 turns the searches
// off, so PlanFleet returns the heuristic's plan. A time limit makes the
// plan depend on how busy the machine is; without this option PlanFleet
// is bounded by work alone (WithWorkBudget). d must not be negative.
// PlanFleet only.
func WithSearchBudget(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("search budget %s: must not be negative", d)
		}
		o.budget, o.budgetSet = d, true
		return nil
	}
}

// WithReserve makes Preference withhold partial-profile placements on
// free cards while at most n cards of the node are free (see
// Preference): admission control that trades small requests for
// whole-card ones. n must not be negative; 0 turns reservation off.
// Preference only.
func WithReserve(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("reserve %d: must not be negative", n)
		}
		o.reserve = n
		return nil
	}
}

// errNilOption is what an entry point of the public packages returns for
// a nil option.
var errNilOption = errors.New("option is nil")

// Convert maps the options of a public package to the engine's: get
// takes one apart, and a nil one becomes an option that fails (a nil
// option is an error of the entry point, never a panic).
func Convert[O comparable](opts []O, get func(O) Option) []Option {
	out := make([]Option, len(opts))
	var none O
	for i, o := range opts {
		if o == none {
			out[i] = func(*options) error { return errNilOption }
			continue
		}
		out[i] = get(o)
	}
	return out
}

// ConvertAssign is Convert for AssignFleet's options.
func ConvertAssign[O comparable](opts []O, get func(O) AssignOption) []AssignOption {
	out := make([]AssignOption, len(opts))
	var none O
	for i, o := range opts {
		if o == none {
			out[i] = func(*assignOptions) error { return errNilOption }
			continue
		}
		out[i] = get(o)
	}
	return out
}
