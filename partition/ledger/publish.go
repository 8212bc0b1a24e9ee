package ledger

import (
	"fmt"
	"slices"
	"sort"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
)

// AgentCard is one card as the node's agent sees it: its scheme and what
// is in use on it locally.
type AgentCard struct {
	// Index is the card's index on the node.
	Index int
	// Scheme is the card's partition scheme.
	Scheme *partition.Scheme
	// Profiles are the profiles the card offers (the driver's advertised
	// ones); empty: all of the scheme's.
	Profiles []string
	// Busy are the partitions in use on the node: made (the vendor's
	// list), being made or destroyed (the lifecycle journal's intents),
	// whether or not a claim holds them. InUse flags are ignored.
	// InUse.Card sets it and BusyWhole from those sources.
	Busy partition.Layout
	// BusyWhole is true when the whole card is in use on the node.
	BusyWhole bool
	// NoWhole is true when the card cannot be offered whole (it is then
	// offered as partitions only, or nothing while nothing is asked).
	NoWhole bool
}

// cardView is a card as one Publish or Layout sees it.
type cardView struct {
	AgentCard
	pool      string
	held      partition.Layout // partitions Held in the card's pool
	heldWhole bool
	foreign   []Device // Held devices of the card in another pool
	busy      partition.Layout
	inUse     partition.Layout // held ∪ busy, InUse set
	conflict  error            // held ∪ busy is not a valid layout
}

// view reads the ledger per card.
func (l *Ledger) view(pool string, cards []AgentCard, opts []Option) ([]cardView, error) {
	lc := make([]partition.LayoutCard, len(cards))
	for i, c := range cards {
		if c.Scheme == nil {
			return nil, fmt.Errorf("card %d: no scheme", c.Index)
		}
		lc[i] = partition.LayoutCard{Index: c.Index, Scheme: c.Scheme}
	}
	o, err := gather(opts)
	if err != nil {
		return nil, err
	}
	pools, err := counter.LayoutCardPools(pool, lc, o.pool...)
	if err != nil {
		return nil, err
	}
	out := make([]cardView, len(cards))
	at := map[int]int{}
	for i, c := range cards {
		out[i] = cardView{AgentCard: c, pool: pools[c.Index]}
		at[c.Index] = i
	}
	for _, d := range l.HeldDevices() {
		for i := range out {
			v := &out[i]
			ref, err := v.Scheme.ParseDeviceName(d.Name)
			if err != nil || ref.Card != v.Index {
				continue
			}
			switch {
			case d.Pool != v.pool:
				v.foreign = append(v.foreign, d)
			case ref.Profile == "":
				v.heldWhole = true
			default:
				v.held = append(
					v.held,
					partition.Instance{Profile: ref.Profile, Start: ref.Start, InUse: true},
				)
			}
		}
	}
	for i := range out {
		v := &out[i]
		for _, in := range v.Busy {
			in.InUse, in.Restartable = true, false
			if !hasInstance(v.held, in) {
				v.busy = append(v.busy, in)
			}
		}
		v.inUse = append(slices.Clone(v.held), v.busy...)
		switch {
		case (v.heldWhole || v.BusyWhole) && len(v.inUse) > 0:
			v.conflict = fmt.Errorf("whole %s %d in use beside partitions %v",
				v.Scheme.Names.Card, v.Index, v.inUse)
		default:
			if err := v.Scheme.Validate(v.inUse); err != nil {
				v.conflict = err
			}
		}
	}
	return out, nil
}

func hasInstance(l partition.Layout, x partition.Instance) bool {
	return slices.ContainsFunc(l, func(y partition.Instance) bool {
		return y.Profile == x.Profile && y.Start == x.Start
	})
}

// Publish is the node agent's step: it records cards (what is busy on
// the node) and rewrites Open for Held, Busy, Demand and Reserved, the
// pools named from pool by counter.LayoutCardPools (opts:
// WithPoolDevices, WithDefaultMix). Per card:
//
//   - nothing is opened on a card some claim holds a device of through
//     another pool (allocated from an earlier publication: the same
//     partition under another name), nor on a card whose held and busy
//     partitions do not form a valid layout (the reason is returned);
//   - otherwise plan.PlanLayouts chooses the layout from the
//     partitions held and busy (kept), the Open ones (kept where they
//     still fit) and Demand; its free devices are Open, the whole card
//     when the plan leaves it whole and nothing is in use (unless
//     NoWhole);
//   - on a card Reserved for a profile, only devices of that profile
//     are opened.
//
// Before the ledger is seeded nothing is opened. The result keeps the
// ledger's invariant whatever Open held before. Withheld returns, per
// card index opened nothing for a reason, the reason.
func (l *Ledger) Publish(
	pool string,
	cards []AgentCard,
	opts ...Option,
) (withheld map[int]string, err error) {
	views, err := l.view(pool, cards, opts)
	if err != nil {
		return nil, fmt.Errorf("publish the layout of node %s: %w", l.Node, err)
	}
	l.Cards = l.Cards[:0]
	for _, v := range views {
		c := Card{
			Index:     v.Index,
			Scheme:    v.Scheme.Name,
			Pool:      v.pool,
			Profiles:  slices.Clone(v.Profiles),
			Busy:      v.busy,
			BusyWhole: v.BusyWhole && !v.heldWhole,
			NoWhole:   v.NoWhole,
		}
		l.Cards = append(l.Cards, c)
	}
	slices.SortFunc(l.Cards, func(a, b Card) int { return a.Index - b.Index })
	withheld = map[int]string{}
	if !l.Seeded {
		l.Open = nil
		return withheld, nil
	}
	reserved := map[int]string{}
	for _, r := range l.Reserved {
		reserved[r.Card] = r.Profile
	}
	var plain, kept []partition.LayoutCard
	var plainAt []int
	for i, v := range views {
		switch {
		case len(v.foreign) > 0:
			withheld[v.Index] = fmt.Sprintf("claims hold %v through another pool", v.foreign)
			continue
		case v.conflict != nil:
			withheld[v.Index] = fmt.Sprintf("in use: %v", v.conflict)
			continue
		}
		in := partition.LayoutCard{
			Index:      v.Index,
			Scheme:     v.Scheme,
			WholeInUse: v.heldWhole || v.BusyWhole,
			Layout:     slices.Clone(v.inUse),
		}
		if !in.WholeInUse {
			for _, x := range l.openOn(v) {
				if x.Profile == "" {
					continue
				}
				cand := append(
					slices.Clone(in.Layout),
					partition.Instance{Profile: x.Profile, Start: x.Start},
				)
				if v.Scheme.Validate(cand) == nil {
					in.Layout = cand
				}
			}
		}
		if _, ok := reserved[v.Index]; ok {
			kept = append(kept, in)
			continue
		}
		plain = append(plain, in)
		plainAt = append(plainAt, i)
	}
	demand := l.offered(views)
	o, _ := gather(opts) // view checked them
	out, err := plan.PlanLayouts(plain, demand, o.layout...)
	if err != nil {
		return nil, fmt.Errorf("publish the layout of node %s: %w", l.Node, err)
	}
	var open []Device
	for j, t := range out {
		open = append(open, l.opened(views[plainAt[j]], t, "")...)
	}
	for _, in := range kept {
		v := views[slices.IndexFunc(views, func(v cardView) bool { return v.Index == in.Index })]
		p := reserved[in.Index]
		one, err := plan.PlanLayouts(
			[]partition.LayoutCard{in},
			plan.Demand{p: 1},
			append(
				slices.Clone(o.layout),
				plan.WithDefaultMix(func(*partition.Scheme) []string { return nil }),
			)...)
		if err != nil {
			return nil, fmt.Errorf("publish the layout of node %s: %w", l.Node, err)
		}
		open = append(open, l.opened(v, one[0], p)...)
	}
	slices.SortFunc(open, compareDevices)
	l.Open = slices.Compact(open)
	return withheld, nil
}

// offered is Demand restricted to the profiles some card offers (whole
// cards always).
func (l *Ledger) offered(views []cardView) plan.Demand {
	out := plan.Demand{}
	for p, n := range l.Demand {
		if n <= 0 {
			continue
		}
		if p == partition.WholeCard {
			out[p] = n
			continue
		}
		for _, v := range views {
			pr, err := v.Scheme.Profile(p)
			if err == nil && (len(v.Profiles) == 0 || slices.Contains(v.Profiles, pr.Name)) {
				out[p] = n
				break
			}
		}
	}
	return out
}

// openOn is the Open devices of a card, as instances (Profile "" for the
// whole card).
func (l *Ledger) openOn(v cardView) []partition.Instance {
	var out []partition.Instance
	for _, d := range l.Open {
		if d.Pool != v.pool {
			continue
		}
		ref, err := v.Scheme.ParseDeviceName(d.Name)
		if err != nil || ref.Card != v.Index {
			continue
		}
		out = append(out, partition.Instance{Profile: ref.Profile, Start: ref.Start})
	}
	return out
}

// opened is the devices to open on a card after the plan t: its free
// partitions (of profile only, when set), or the whole card.
func (l *Ledger) opened(v cardView, t partition.LayoutCard, only string) []Device {
	if t.WholeInUse {
		return nil
	}
	if len(t.Layout) == 0 {
		if len(v.inUse) > 0 || v.NoWhole || only != "" {
			return nil
		}
		return []Device{{Pool: v.pool, Name: v.Scheme.CardDeviceName(v.Index)}}
	}
	var out []Device
	for _, x := range t.Layout {
		if x.InUse || only != "" && x.Profile != only {
			continue
		}
		if len(v.Profiles) > 0 && !slices.Contains(v.Profiles, x.Profile) {
			continue
		}
		name, err := v.Scheme.DeviceName(v.Index, x.Profile, x.Start)
		if err != nil {
			continue
		}
		out = append(out, Device{Pool: v.pool, Name: name})
	}
	return out
}

// Layout returns what the node publishes, per card in cards' order, for
// counter.Model.LayoutPools (with the same pool name and
// options): the card's Held and Open partitions (held ones marked in
// use) in the planner's order (counter.Preference over what is in use
// on the card), its whole device when it is Open or Held whole, or
// Withheld when the card has neither. Held devices of other pools are
// not published (the card is withheld while they are held). Two agents
// given the same ledger and cards return the same layout.
func (l *Ledger) Layout(
	pool string,
	cards []AgentCard,
	opts ...Option,
) ([]partition.PublishedCard, error) {
	views, err := l.view(pool, cards, opts)
	if err != nil {
		return nil, fmt.Errorf("layout of node %s: %w", l.Node, err)
	}
	out := make([]partition.PublishedCard, len(views))
	var pref []partition.FleetCard
	for i, v := range views {
		c := partition.PublishedCard{
			LayoutCard: partition.LayoutCard{Index: v.Index, Scheme: v.Scheme},
		}
		open := l.openOn(v)
		wholeOpen := slices.ContainsFunc(
			open,
			func(x partition.Instance) bool { return x.Profile == "" },
		)
		switch {
		case v.heldWhole || v.BusyWhole && len(v.held) == 0:
			// Held whole, or used whole on the node (being prepared or
			// released): the whole device stays published, in use.
			c.WholeInUse = true
		case len(v.held) == 0 && len(open) == 0:
			c.Withheld = true
		case wholeOpen && len(v.held) == 0:
		default:
			c.Layout = slices.Clone(v.held)
			for _, x := range open {
				if x.Profile != "" {
					c.Layout = append(c.Layout, x)
				}
			}
			if v.Scheme.Validate(append(slices.Clone(c.Layout), v.busy...)) == nil {
				pref = append(
					pref,
					partition.FleetCard{Node: "node", Index: v.Index, Scheme: v.Scheme,
						Layout: append(slices.Clone(v.held), v.busy...)},
				)
			}
		}
		out[i] = c
	}
	if len(pref) > 0 {
		names, err := counter.Preference(pref)
		if err != nil {
			return nil, fmt.Errorf("layout of node %s: %w", l.Node, err)
		}
		rank := make(map[string]int, len(names))
		for r, n := range names {
			rank[n] = r
		}
		for i := range out {
			c := &out[i]
			r := func(in partition.Instance) int {
				n, _ := c.Scheme.DeviceName(c.Index, in.Profile, in.Start)
				if k, ok := rank[n]; ok {
					return k
				}
				return len(rank)
			}
			sort.SliceStable(
				c.Layout,
				func(a, b int) bool { return r(c.Layout[a]) < r(c.Layout[b]) },
			)
		}
	}
	return out, nil
}

// Check verifies the ledger's invariant for cards: per card, the Held
// and Open devices of its pool and its Busy partitions form a valid
// layout, the whole card alone; no device is both Open and Held; every
// Open device is a device of some card's pool. It returns the first
// violation. Tests and the planner use it.
func (l *Ledger) Check(schemes func(name string) (*partition.Scheme, error)) error {
	for _, d := range l.Open {
		if len(l.Holder(d)) > 0 {
			return fmt.Errorf("node %s: %s is both open and held", l.Node, d)
		}
	}
	seen := map[Device]bool{}
	for _, c := range l.Cards {
		s, err := schemes(c.Scheme)
		if err != nil {
			return fmt.Errorf("node %s: card %d: %w", l.Node, c.Index, err)
		}
		layout := slices.Clone(c.Busy)
		whole := c.BusyWhole
		add := func(d Device) error {
			if d.Pool != c.Pool {
				return nil
			}
			ref, err := s.ParseDeviceName(d.Name)
			if err != nil || ref.Card != c.Index {
				return nil
			}
			seen[d] = true
			if ref.Profile == "" {
				if whole {
					return fmt.Errorf("node %s: %s: whole card twice", l.Node, d)
				}
				whole = true
				return nil
			}
			layout = append(layout, partition.Instance{Profile: ref.Profile, Start: ref.Start})
			return nil
		}
		for _, d := range l.HeldDevices() {
			if err := add(d); err != nil {
				return err
			}
		}
		for _, d := range l.Open {
			if err := add(d); err != nil {
				return err
			}
		}
		if whole && len(layout) > 0 {
			return fmt.Errorf("node %s: card %d: whole card beside %v", l.Node, c.Index, layout)
		}
		if err := s.Validate(layout); err != nil {
			return fmt.Errorf("node %s: card %d: %w", l.Node, c.Index, err)
		}
	}
	for _, d := range l.Open {
		if !seen[d] {
			return fmt.Errorf("node %s: open device %s is on no card", l.Node, d)
		}
	}
	return nil
}

// Reconcile closes the Open devices that are not valid together with
// what is Held and Busy on their card (after Observe recorded an
// allocation made without Admit), keeping the others in Open's order.
// It returns the devices closed. Cards whose scheme does not resolve
// keep their Open devices.
func (l *Ledger) Reconcile(schemes func(name string) (*partition.Scheme, error)) []Device {
	var closed []Device
	for _, c := range l.Cards {
		s, err := schemes(c.Scheme)
		if err != nil {
			continue
		}
		layout := slices.Clone(c.Busy)
		whole := c.BusyWhole
		parse := func(d Device) (partition.DeviceRef, bool) {
			if d.Pool != c.Pool {
				return partition.DeviceRef{}, false
			}
			ref, err := s.ParseDeviceName(d.Name)
			return ref, err == nil && ref.Card == c.Index
		}
		for _, d := range l.HeldDevices() {
			if ref, ok := parse(d); ok {
				if ref.Profile == "" {
					whole = true
				} else {
					layout = append(layout, partition.Instance{Profile: ref.Profile, Start: ref.Start})
				}
			}
		}
		for _, d := range l.Open {
			ref, ok := parse(d)
			if !ok {
				continue
			}
			var fits bool
			if ref.Profile == "" {
				fits = !whole && len(layout) == 0
			} else {
				cand := append(slices.Clone(layout), partition.Instance{Profile: ref.Profile, Start: ref.Start})
				fits = !whole && s.Validate(cand) == nil
				if fits {
					layout = cand
				}
			}
			if ref.Profile == "" && fits {
				whole = true
			}
			if !fits {
				closed = append(closed, d)
			}
		}
	}
	l.Open = slices.DeleteFunc(l.Open, func(d Device) bool { return slices.Contains(closed, d) })
	return closed
}
