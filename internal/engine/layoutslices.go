package engine

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
)

// LayoutMaxDevices is the most devices a layout pool holds by default:
// the API's limit of devices in one ResourceSlice whose devices use no
// taints, counters or list attributes (resourceapi.ResourceSliceMaxDevices,
// 128 in k8s.io/api v0.37; 64 with any of those,
// ResourceSliceMaxDevicesWithAdvancedFeatures).
const LayoutMaxDevices = resourceapi.ResourceSliceMaxDevices

// WithPoolDevices sets the most devices one layout pool (one slice) may
// hold, 1 to LayoutMaxDevices (the default). A driver that puts taints
// on layout devices sets resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
// (64), the API's limit then. CounterModel.LayoutPools,
// CounterModel.LayoutSlices and LayoutPublisher only.
func WithPoolDevices(n int) Option {
	return func(o *options) error {
		if n < 1 || n > LayoutMaxDevices {
			return fmt.Errorf("pool devices %d: must be between 1 and %d", n, LayoutMaxDevices)
		}
		o.poolDevices = n
		return nil
	}
}

// MaxLayoutDevices is the most devices one card of s can publish in a
// layout: its partition limit (Scheme.MaxPartitions), its compute units
// (every partition takes at least one) and the sum over profiles of
// their maximum counts, whichever is least, and at least 1 (the whole
// card). It bounds a card's share of a layout pool whatever its layout.
func (s *Scheme) MaxLayoutDevices() int {
	if s.check() != nil {
		return 0
	}
	sum := 0
	for _, pr := range s.Profiles {
		sum += min(pr.MaxCount, len(pr.Placements))
	}
	n := min(sum, s.Compute.Count)
	if s.MaxPartitions > 0 {
		n = min(n, s.MaxPartitions)
	}
	return max(n, 1)
}

// layoutPool is one pool of a layout publication: its name and cards.
type layoutPool struct {
	name  string
	cards []PublishedCard
}

// layoutGroups cuts a node's cards, in index order, into pools: one pool
// named name when every card's worst case (Scheme.MaxLayoutDevices) fits
// in limit devices together, else consecutive groups whose worst cases
// fit, each named Scheme.PoolName(name, index of its first card). The
// grouping depends on the cards only, never on their layouts, so a
// device keeps its pool, and its ID, from one version to the next.
func layoutGroups(name string, cards []PublishedCard, limit int) ([]layoutPool, error) {
	sorted := slices.Clone(cards)
	slices.SortStableFunc(sorted, func(a, b PublishedCard) int { return a.Index - b.Index })
	var groups []layoutPool
	sum := limit + 1
	total := 0
	for i, c := range sorted {
		if err := c.Scheme.check(); err != nil {
			return nil, fmt.Errorf("%w: cards[%d].scheme: %w", ErrFleet, i, err)
		}
		if i > 0 && c.Index == sorted[i-1].Index {
			return nil, fmt.Errorf("%w: %s %d repeats", ErrFleet, c.Scheme.Names.Card, c.Index)
		}
		n := c.Scheme.MaxLayoutDevices()
		total += n
		if sum+n > limit {
			groups = append(groups, layoutPool{name: c.Scheme.PoolName(name, c.Index)})
			sum = 0
		}
		sum += n
		groups[len(groups)-1].cards = append(groups[len(groups)-1].cards, c)
	}
	if len(groups) == 1 || total <= limit {
		return []layoutPool{{name: name, cards: sorted}}, nil
	}
	return groups, nil
}

// LayoutPoolNames is the names of the pools LayoutPools makes of a
// node's cards (WithPoolDevices as for LayoutPools): name alone, or one
// name per group of cards. It depends on the cards' schemes and indices
// only, never on their layouts, so a driver can ask it before any
// layout exists (to read what claims hold of those pools).
func LayoutPoolNames(name string, cards []LayoutCard, opts ...Option) ([]string, error) {
	limit, err := poolLimit(opts)
	if err != nil {
		return nil, fmt.Errorf("layout pool names: %w", err)
	}
	groups, err := layoutGroups(name, Published(cards), limit)
	if err != nil {
		return nil, fmt.Errorf("layout pool names: %w", err)
	}
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = g.name
	}
	return out, nil
}

// LayoutCardPools is, per card index, the name of the pool LayoutPools
// puts the card's devices in (WithPoolDevices as for LayoutPools): the
// pools of LayoutPoolNames, by card. Like it, it depends on the cards'
// schemes and indices only.
func LayoutCardPools(name string, cards []LayoutCard, opts ...Option) (map[int]string, error) {
	limit, err := poolLimit(opts)
	if err != nil {
		return nil, fmt.Errorf("layout card pools: %w", err)
	}
	groups, err := layoutGroups(name, Published(cards), limit)
	if err != nil {
		return nil, fmt.Errorf("layout card pools: %w", err)
	}
	out := map[int]string{}
	for _, g := range groups {
		for _, c := range g.cards {
			out[c.Index] = g.name
		}
	}
	return out, nil
}

// layoutDevices returns the model's devices of one pool's cards, without
// counter consumption: per card in index order, the whole card's device
// when its layout is empty, else one device per partition in layout
// order.
func (m CounterModel) layoutDevices(cards []PublishedCard, limit int) ([]resourceapi.Device, error) {
	byName := make(map[string]*resourceapi.Device, len(m.Devices))
	for i := range m.Devices {
		byName[m.Devices[i].Name] = &m.Devices[i]
	}
	var out []resourceapi.Device
	for _, c := range cards {
		s := c.Scheme
		if c.Withheld {
			continue
		}
		names := []string{s.CardDeviceName(c.Index)}
		if len(c.Layout) > 0 {
			if c.WholeInUse {
				return nil, fmt.Errorf("%w: %s %d: whole %s in use beside partitions", ErrFleet, s.Names.Card, c.Index, s.Names.Card)
			}
			if err := s.Validate(c.Layout); err != nil {
				return nil, fmt.Errorf("%w: %s %d: %w", ErrFleet, s.Names.Card, c.Index, err)
			}
			names = names[:0]
			for _, in := range c.Layout {
				n, err := s.DeviceName(c.Index, in.Profile, in.Start)
				if err != nil {
					return nil, fmt.Errorf("%s %d: %w", s.Names.Card, c.Index, err)
				}
				names = append(names, n)
			}
		}
		for _, n := range names {
			d, ok := byName[n]
			if !ok {
				return nil, fmt.Errorf("%w: device %q is not in the counter model (not one of its cards, or a profile it does not advertise)", ErrFleet, n)
			}
			cp := *d.DeepCopy()
			cp.ConsumesCounters = nil
			out = append(out, cp)
		}
	}
	if len(out) > limit {
		return nil, fmt.Errorf("%w: %d devices in one pool, more than %d", ErrFleet, len(out), limit)
	}
	return out, nil
}

// LayoutPools is the layout publication of one node (shape (a) of
// docs/dynamic-mig-publication.md) as device pools for a
// device.Inventory: the model's devices named by cards (PlanLayouts'
// output through Published, or LayoutPublisher's), with the names,
// attributes and capacities the counter model gives them and no counter
// consumption, and no counter sets. Per card, in index order: no device when it is
// Withheld, its whole device when its Layout is empty, else one device
// per partition in Layout order (the planner's).
//
// Normally one pool, named name, that device publishes as one slice
// (resourceSliceCount 1), so that a republish rewrites it in place and
// the scheduler never sees half of a version. When the node's cards
// could together publish more than the pool limit (WithPoolDevices,
// default LayoutMaxDevices, the API's 128 devices per slice; counted
// with each card's worst case, Scheme.MaxLayoutDevices, e.g. 7 per
// H100 or H200, so more than 18 such GPUs), the cards are cut in index
// order into consecutive groups whose worst cases fit, one pool each,
// named Scheme.PoolName(name, first card's index): the grouping depends
// on the cards only, so a device keeps its pool across versions. Every
// card in cards must be one of the model's, with every device its layout
// names (build the model with every profile a layout may use); errors
// wrap ErrFleet.
func (m CounterModel) LayoutPools(name string, cards []PublishedCard, opts ...Option) ([]device.Pool, error) {
	limit, err := poolLimit(opts)
	if err != nil {
		return nil, fmt.Errorf("layout pools: %w", err)
	}
	groups, err := layoutGroups(name, cards, limit)
	if err != nil {
		return nil, fmt.Errorf("layout pools: %w", err)
	}
	out := make([]device.Pool, 0, len(groups))
	for _, g := range groups {
		devs, err := m.layoutDevices(g.cards, limit)
		if err != nil {
			return nil, fmt.Errorf("layout pools: pool %s: %w", g.name, err)
		}
		p := device.Pool{Name: g.name, Devices: make([]*device.Device, len(devs))}
		for i := range devs {
			p.Devices[i] = fromAPI(&devs[i])
		}
		out = append(out, p)
	}
	return out, nil
}

// LayoutSlices is LayoutPools as ready ResourceSlice objects for
// in-process use (simulations, the allocator proofs): one slice per
// pool, with nodeName set, pool generation generation and
// resourceSliceCount 1, named after its pool ("/" replaced by "-") with
// "-layout" appended.
func (m CounterModel) LayoutSlices(driver, name, nodeName string, generation int64, cards []PublishedCard, opts ...Option) ([]*resourceapi.ResourceSlice, error) {
	limit, err := poolLimit(opts)
	if err != nil {
		return nil, fmt.Errorf("layout slices: %w", err)
	}
	groups, err := layoutGroups(name, cards, limit)
	if err != nil {
		return nil, fmt.Errorf("layout slices: %w", err)
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(groups))
	for _, g := range groups {
		devs, err := m.layoutDevices(g.cards, limit)
		if err != nil {
			return nil, fmt.Errorf("layout slices: pool %s: %w", g.name, err)
		}
		out = append(out, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(g.name, "/", "-") + "-layout"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   driver,
				Pool:     resourceapi.ResourcePool{Name: g.name, Generation: generation, ResourceSliceCount: 1},
				NodeName: ptr.To(nodeName),
				Devices:  devs,
			},
		})
	}
	return out, nil
}

func poolLimit(opts []Option) (int, error) {
	o := options{poolDevices: LayoutMaxDevices}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return 0, err
		}
	}
	return o.poolDevices, nil
}
