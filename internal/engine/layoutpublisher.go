package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// DefaultFence is the margin a LayoutPublisher waits, by default,
// between retiring a free device and publishing a device that overlaps
// it (WithFence).
const DefaultFence = time.Second

// WithFence sets the fence of a LayoutPublisher: how long a retired
// device stays reserved after the version that retires it, before a
// device that overlaps it may be published. It must cover the time
// from a publication until the in-use sets given to Next include every
// allocation made from that publication (the driver's watch lag, and
// the scheduler's write of an allocation it decided on the older
// version, unless an admission policy refuses such stale writes).
// Default DefaultFence. d must not be negative; 0 removes the margin,
// which breaks the guarantee (the tests use it to show that).
// NewLayoutPublisher only.
func WithFence(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("fence %s: must not be negative", d)
		}
		o.fence, o.fenceSet = d, true
		return nil
	}
}

// CardUse is what one card holds, as the driver knows it: the
// partitions allocated to claims or prepared (InUse flags are ignored:
// every instance listed is in use), or the whole card.
type CardUse struct {
	// Index is the card's index.
	Index int
	// InUse is the card's in-use partitions; they must form a valid
	// layout.
	InUse Layout
	// Whole is true when the card's whole device is allocated or
	// prepared; InUse must then be empty.
	Whole bool
}

// LayoutVersion is what a LayoutPublisher says to publish.
type LayoutVersion struct {
	// Version counts the distinct versions published; it grows by one
	// whenever Cards changes, and is 0 before the first Next.
	Version int64
	// Cards is the publication, per card in index order, for
	// CounterModel.LayoutPools or LayoutSlices: the whole card (empty
	// Layout), its partitions (in use ones marked), or nothing
	// (Withheld).
	Cards []PublishedCard
	// HeldBack is how many devices of the planned layouts the fence
	// holds back; 0 when the publication is the plan.
	HeldBack int
	// Retry, when HeldBack is positive, is when the fence of the
	// earliest retired device ends: call Next again at or after it
	// (with fresh in-use sets) to publish more. Zero otherwise.
	Retry time.Time
}

// retiredDevice is a free device a version stopped publishing, still
// reserved until its fence ends.
type retiredDevice struct {
	in    Instance // the partition; unused when whole
	whole bool
	at    time.Time
}

// pubCard is what the publisher has published for one card, and the
// devices it retired that are still fenced.
type pubCard struct {
	s       *Scheme
	index   int
	whole   bool   // the whole device is published
	parts   Layout // published partitions, InUse marks as last seen
	retired []retiredDevice
}

// LayoutPublisher sequences the layout publication of one node in one
// process with a time fence ("retire, then reuse",
// docs/dynamic-mig-measurements.md, issue 38), so that no two devices a
// scheduler can combine overlap, even when it allocates from a version
// the driver has since replaced, as long as the in-use sets are complete
// and a fence's time covers every lag.
//
// Deprecated: the fence counts from Next's decision, not from what the
// API server shows, and lives in one process: a late or conflicting
// slice write, a second instance of a rolling update or a restart within
// the fence defeats it (package partition/ledger's TestAdversarial counts
// the overlaps). Drivers publish with package partition/ledger; the
// benchmarks keep LayoutPublisher as the design it replaced.
//
// Next is called on every change of what is in use or pending (and at
// Retry); it plans the layouts (PlanLayouts, over the in-use partitions
// and the free partitions published now) and returns what to publish.
// The contract, per card:
//
//   - Every in-use device (CardUse) is published, marked in use, in
//     every version: the publisher never drops one, even one it had
//     retired (a retired device that was allocated is kept, and the
//     layout is made around it).
//   - A free device that the plan no longer has is retired: the version
//     leaves it out, and it stays reserved until the fence
//     (WithFence, DefaultFence) has passed since that version, strictly,
//     and a Next after that does not list it in use.
//   - A device is published only when it is valid (Scheme.Validate)
//     together with every device published or reserved at that moment:
//     a new device over a region a retired device still reserves is
//     held back (HeldBack, Retry) and published by a later Next. The
//     whole card is published only while no partition of it is
//     published or reserved, and a partition only while the whole card
//     is neither.
//
// Hence the set of devices published or reserved is valid at every
// moment, and every device published in the last fence is in it: the
// union of the versions published within any window shorter than or
// equal to the fence is a valid layout per card, which is what a
// scheduler with a view up to a fence old can combine. The guarantee
// needs the in-use sets to be complete at each Next (every allocation
// of a device made at least a fence before Next must be in them).
//
// A LayoutPublisher is safe for concurrent use; Next calls must come
// with non-decreasing times.
type LayoutPublisher struct {
	mu      sync.Mutex
	cards   []*pubCard // index order
	opts    []Option
	fence   time.Duration
	version int64
	last    []PublishedCard
	now     time.Time
}

// NewLayoutPublisher returns a publisher for a node's cards (Card.Index
// and Card.Scheme; UUID and Profiles are the counter model's business)
// with nothing published yet. Options: WithFence, WithDefaultMix (passed
// to PlanLayouts). Indices must be unique and non-negative.
func NewLayoutPublisher(cards []Card, opts ...Option) (*LayoutPublisher, error) {
	o := options{fence: DefaultFence, defaultMix: DefaultMix}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new layout publisher: %w", err)
		}
	}
	p := &LayoutPublisher{opts: opts, fence: o.fence}
	seen := map[int]bool{}
	for i, c := range cards {
		if err := c.Scheme.check(); err != nil {
			return nil, fmt.Errorf("new layout publisher: cards[%d].scheme: %w", i, err)
		}
		if c.Index < 0 || seen[c.Index] {
			return nil, fmt.Errorf("new layout publisher: cards[%d].index %d is negative or repeated", i, c.Index)
		}
		seen[c.Index] = true
		p.cards = append(p.cards, &pubCard{s: c.Scheme, index: c.Index})
	}
	slices.SortFunc(p.cards, func(a, b *pubCard) int { return a.index - b.index })
	return p, nil
}

// Next returns the version to publish at now, given what is in use
// (cards not listed hold nothing) and what is pending (Demand, as for
// PlanLayouts). See LayoutPublisher for the contract. Errors (invalid
// input: an unknown card, an invalid in-use layout, a whole card in use
// beside partitions, a time before the previous call's) leave the
// publisher unchanged.
func (p *LayoutPublisher) Next(use []CardUse, demand Demand, now time.Time) (LayoutVersion, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Before(p.now) {
		return LayoutVersion{}, fmt.Errorf("next layout: time %s is before the previous call's %s", now, p.now)
	}
	uses := make([]CardUse, len(p.cards))
	at := map[int]int{}
	for i, c := range p.cards {
		at[c.index] = i
		uses[i].Index = c.index
	}
	for i, u := range use {
		ci, ok := at[u.Index]
		if !ok {
			return LayoutVersion{}, fmt.Errorf("next layout: use[%d]: no card %d", i, u.Index)
		}
		c := p.cards[ci]
		l := make(Layout, len(u.InUse))
		for j, in := range u.InUse {
			pr, err := c.s.Profile(in.Profile)
			if err != nil {
				return LayoutVersion{}, fmt.Errorf("next layout: use[%d]: %w", i, err)
			}
			l[j] = Instance{Profile: pr.Name, Start: in.Start, InUse: true}
		}
		if err := c.s.Validate(l); err != nil {
			return LayoutVersion{}, fmt.Errorf("next layout: use[%d]: %w", i, err)
		}
		if u.Whole && len(l) > 0 {
			return LayoutVersion{}, fmt.Errorf("next layout: use[%d]: whole %s %d in use beside partitions", i, c.s.Names.Card, u.Index)
		}
		uses[ci] = CardUse{Index: u.Index, InUse: l, Whole: u.Whole}
	}

	// What stays reserved, and what the plan starts from.
	retired := make([][]retiredDevice, len(p.cards))
	input := make([]LayoutCard, len(p.cards))
	for ci, c := range p.cards {
		u := uses[ci]
		for _, r := range c.retired {
			switch {
			case r.whole && u.Whole, !r.whole && hasInstance(u.InUse, r.in):
				// Allocated meanwhile: in use from now on.
			case now.Sub(r.at) > p.fence:
				// Fenced, and not allocated: released.
			default:
				retired[ci] = append(retired[ci], r)
			}
		}
		in := LayoutCard{Index: c.index, Scheme: c.s, WholeInUse: u.Whole, Layout: slices.Clone(u.InUse)}
		if !u.Whole {
			st, _ := c.s.stateOf(u.InUse)
			for _, x := range c.parts {
				if hasInstance(u.InUse, x) {
					continue
				}
				if si := c.s.slotOf(x); si >= 0 && c.s.fits(&st, si) {
					c.s.add(&st, si)
					in.Layout = append(in.Layout, Instance{Profile: x.Profile, Start: x.Start})
				}
			}
		}
		input[ci] = in
	}
	plan, err := PlanLayouts(input, demand, p.opts...)
	if err != nil {
		return LayoutVersion{}, fmt.Errorf("next layout: %w", err)
	}

	out := LayoutVersion{Cards: make([]PublishedCard, len(p.cards))}
	next := make([]pubCard, len(p.cards))
	for ci, c := range p.cards {
		u, target := uses[ci], plan[ci]
		s := c.s
		nc := pubCard{s: s, index: c.index, retired: retired[ci]}
		// Retire the published free devices the plan drops.
		if c.whole && !u.Whole && len(target.Layout) > 0 {
			nc.retired = append(nc.retired, retiredDevice{whole: true, at: now})
		}
		for _, x := range c.parts {
			if !hasInstance(u.InUse, x) && !hasInstance(target.Layout, x) {
				nc.retired = append(nc.retired, retiredDevice{in: Instance{Profile: x.Profile, Start: x.Start}, at: now})
			}
		}
		// What is reserved: in use, and retired within the fence.
		var st state
		wholeLive := u.Whole
		add := func(x Instance) {
			if si := s.slotOf(x); si >= 0 {
				s.add(&st, si)
			}
		}
		for _, x := range u.InUse {
			add(x)
		}
		for _, r := range nc.retired {
			if r.whole {
				wholeLive = true
			} else {
				add(r.in)
			}
		}
		held := 0
		if len(target.Layout) == 0 {
			switch {
			case u.Whole || c.whole:
				nc.whole = true
			case st.empty():
				nc.whole = true
				nc.retired = slices.DeleteFunc(nc.retired, func(r retiredDevice) bool { return r.whole })
			default:
				held++
			}
		} else {
			// Kept devices first (they are published and reserved
			// already), then new ones where nothing reserved is in the way.
			for _, x := range target.Layout {
				if !x.InUse && hasInstance(c.parts, x) {
					add(x)
				}
			}
			// A retired device the plan has again is reserved already:
			// publishing it again adds nothing to what is reserved.
			again := func(x Instance) bool {
				i := slices.IndexFunc(nc.retired, func(r retiredDevice) bool {
					return !r.whole && r.in.Profile == x.Profile && r.in.Start == x.Start
				})
				if i < 0 {
					return false
				}
				nc.retired = slices.Delete(nc.retired, i, i+1)
				return true
			}
			for _, x := range target.Layout {
				switch {
				case x.InUse, hasInstance(c.parts, x), !wholeLive && again(x):
					nc.parts = append(nc.parts, x)
				case !wholeLive && s.fits(&st, s.slotOf(x)):
					add(x)
					nc.parts = append(nc.parts, x)
				default:
					held++
				}
			}
		}
		if held > 0 {
			out.HeldBack += held
			for _, r := range nc.retired {
				if t := r.at.Add(p.fence + 1); out.Retry.IsZero() || t.Before(out.Retry) {
					out.Retry = t
				}
			}
		}
		next[ci] = nc
		out.Cards[ci] = PublishedCard{
			LayoutCard: LayoutCard{Index: c.index, Scheme: s, WholeInUse: u.Whole, Layout: nc.parts},
			Withheld:   !nc.whole && len(nc.parts) == 0,
		}
	}
	for ci := range p.cards {
		*p.cards[ci] = next[ci]
	}
	if !sameCards(p.last, out.Cards) {
		p.version++
		p.last = out.Cards
	}
	out.Version = p.version
	p.now = now
	return out, nil
}

// Restore tells a new publisher what was published before it (the
// devices of an earlier process's slice, read from the API server at
// start), as if it had published them itself at now: the first Next then
// keeps the free devices that still fit and retires those it drops, with
// the fence, instead of laying the cards out afresh, so that a restart
// changes no device for nothing and never publishes a device over one a
// scheduler may still allocate from the earlier version. Per card: an
// empty Layout is the whole card (unless Withheld: nothing); InUse flags
// are ignored (Next's in-use sets say what is in use). Cards not listed
// had nothing published. It must come before the first Next; an unknown
// card or an invalid layout is an error and restores nothing.
func (p *LayoutPublisher) Restore(published []PublishedCard, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.version > 0 || !p.now.IsZero() {
		return errors.New("restore layout: after the first Next")
	}
	at := map[int]*pubCard{}
	for _, c := range p.cards {
		at[c.index] = c
	}
	next := map[int]pubCard{}
	for i, lc := range published {
		c, ok := at[lc.Index]
		if !ok {
			return fmt.Errorf("restore layout: published[%d]: no card %d", i, lc.Index)
		}
		if _, dup := next[lc.Index]; dup {
			return fmt.Errorf("restore layout: published[%d]: card %d repeats", i, lc.Index)
		}
		nc := pubCard{s: c.s, index: c.index}
		switch {
		case lc.Withheld:
		case len(lc.Layout) == 0:
			nc.whole = true
		default:
			l := make(Layout, len(lc.Layout))
			for j, in := range lc.Layout {
				pr, err := c.s.Profile(in.Profile)
				if err != nil {
					return fmt.Errorf("restore layout: published[%d]: %w", i, err)
				}
				l[j] = Instance{Profile: pr.Name, Start: in.Start}
			}
			if err := c.s.Validate(l); err != nil {
				return fmt.Errorf("restore layout: published[%d]: %w", i, err)
			}
			nc.parts = l
		}
		next[lc.Index] = nc
	}
	for idx, nc := range next {
		*at[idx] = nc
	}
	p.now = now
	return nil
}

// slotOf is the slot of an instance, -1 when the scheme lacks it.
func (s *Scheme) slotOf(in Instance) int {
	pi, err := s.profileIndex(in.Profile)
	if err != nil {
		return -1
	}
	return s.slotIndex(pi, in.Start)
}

func hasInstance(l Layout, x Instance) bool {
	return slices.ContainsFunc(l, func(y Instance) bool { return y.Profile == x.Profile && y.Start == x.Start })
}

func sameCards(a, b []PublishedCard) bool {
	return slices.EqualFunc(a, b, func(x, y PublishedCard) bool {
		return x.Index == y.Index && x.WholeInUse == y.WholeInUse && x.Withheld == y.Withheld &&
			slices.Equal(x.Layout, y.Layout)
	})
}
