package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drakit/drakit/device"
)

// Pools returns the model as device pools for a device.Inventory: the
// counter sets and one *device.Device per model device, fresh copies the
// caller may add attributes and taints to, devices in model order (so
// Reorder/Only order is kept and is the scheduler's first fit).
//
// name is the pool name (usually the node name). Today the model is one
// pool named name; callers must not assume the pool name or the number of
// pools: map a device back to its card, profile and placement with
// Scheme.ParseDeviceName. Attributes and capacities carry bare names,
// which device publishes in the driver's own domain. device's
// Inventory.DriverResources splits the pools under the API limits
// (counter sets 8 per slice in slices of their own, then devices 64 per
// slice); Slices gives the same slices as ready objects for in-process
// use.
func (m CounterModel) Pools(name string) []device.Pool {
	p := device.Pool{Name: name, CounterSets: make([]device.CounterSet, len(m.CounterSets)), Devices: make([]*device.Device, len(m.Devices))}
	for i, cs := range m.CounterSets {
		c := make(map[string]resource.Quantity, len(cs.Counters))
		for k, v := range cs.Counters {
			c[k] = v.Value.DeepCopy()
		}
		p.CounterSets[i] = device.CounterSet{Name: cs.Name, Counters: c}
	}
	for i := range m.Devices {
		p.Devices[i] = fromAPI(&m.Devices[i])
	}
	return []device.Pool{p}
}

// fromAPI converts one model device into a device.Device. The model holds
// only what device expresses (attributes, capacities without request
// policy, counter consumption), so nothing is lost.
func fromAPI(d *resourceapi.Device) *device.Device {
	out := device.New(d.Name)
	for _, n := range slices.Sorted(maps.Keys(d.Attributes)) {
		a := d.Attributes[n]
		switch {
		case a.StringValue != nil:
			out.StringAttribute(string(n), *a.StringValue)
		case a.IntValue != nil:
			out.IntAttribute(string(n), *a.IntValue)
		case a.BoolValue != nil:
			out.BoolAttribute(string(n), *a.BoolValue)
		case a.VersionValue != nil:
			out.VersionAttribute(string(n), *a.VersionValue)
		}
		// An attribute without a value (never made by NewCounterModel)
		// is dropped: the API would reject it.
	}
	for n, c := range d.Capacity {
		out.Capacity(string(n), c.Value, nil)
	}
	for _, cc := range d.ConsumesCounters {
		c := make(map[string]resource.Quantity, len(cc.Counters))
		for k, v := range cc.Counters {
			c[k] = v.Value
		}
		out.ConsumesCounters(cc.CounterSet, c)
	}
	return out
}

// DefaultProfiles is a profile set to advertise by default for scheme s
// (Card.Profiles, and WithProfiles for Preference): one profile per
// compute size, the first in the scheme's order (the fewest memory
// units) among those that take no extra counter. Every advertised
// profile x placement is a device the scheduler converts, evaluates and
// stores on every node for every pod, so each extra profile adds its
// placements to every node's cost. A nil s has no profiles.
func DefaultProfiles(s *Scheme) []string {
	if s == nil {
		return nil
	}
	var out []string
	seen := map[int]bool{}
	for _, pr := range s.Profiles {
		if len(pr.Extras) > 0 || seen[pr.Compute] {
			continue
		}
		seen[pr.Compute] = true
		out = append(out, pr.Name)
	}
	return out
}

// PreferredPools is what a driver that partitions at prepare publishes
// for one node after every change: Pools(name) with the devices in the
// planner's order for the node's current partitions (Preference(node,
// opts...)), restricted to the devices the model advertises, so any
// advertised profile set works without WithProfiles. Pass WithFitOnly()
// to publish only the devices the scheduler can still allocate; without
// it, every model device is listed. node must hold one entry per card of
// the model (by index) with the model's scheme; anything else is an error
// wrapping ErrFleet.
func (m CounterModel) PreferredPools(name string, node []FleetCard, opts ...Option) ([]device.Pool, error) {
	sets := map[string]bool{}
	for _, cs := range m.CounterSets {
		sets[cs.Name] = true
	}
	devs := make(map[string]*resourceapi.Device, len(m.Devices))
	for i := range m.Devices {
		devs[m.Devices[i].Name] = &m.Devices[i]
	}
	for i, c := range node {
		if err := c.Scheme.check(); err != nil {
			return nil, fmt.Errorf("preferred pools: %w: node[%d].scheme: %w", ErrFleet, i, err)
		}
		set := c.Scheme.CounterSetName(c.Index)
		if !sets[set] {
			return nil, fmt.Errorf("preferred pools: %w: node[%d]: %s %d is not in the model", ErrFleet, i, c.Scheme.Names.Card, c.Index)
		}
		delete(sets, set)
		n := c.Scheme.Names
		if d, ok := devs[c.Scheme.CardDeviceName(c.Index)]; ok && n.ModelAttribute != Omit {
			if a, ok := d.Attributes[resourceapi.QualifiedName(n.ModelAttribute)]; ok && a.StringValue != nil && *a.StringValue != c.Scheme.Name {
				return nil, fmt.Errorf("preferred pools: %w: node[%d]: %s %d is a %s in the model, not a %s", ErrFleet, i, n.Card, c.Index, *a.StringValue, c.Scheme.Name)
			}
		}
	}
	if len(sets) > 0 {
		noun := "card"
		if len(node) > 0 && node[0].Scheme != nil {
			noun = node[0].Scheme.Names.Card
		}
		return nil, fmt.Errorf("preferred pools: %w: the node lacks %d of the model's %s", ErrFleet, len(sets), plural(noun))
	}
	pref, err := Preference(node, opts...)
	if err != nil {
		return nil, fmt.Errorf("preferred pools: %w", err)
	}
	names := pref[:0:0]
	for _, n := range pref {
		if devs[n] != nil {
			names = append(names, n)
		}
	}
	only, err := m.Only(names)
	if err != nil {
		return nil, fmt.Errorf("preferred pools: %w", err)
	}
	return only.Pools(name), nil
}

// CardPools is PreferredPools cut into one pool per card: pool
// Scheme.PoolName(name, index) holds card index's counter set and its
// devices in the planner's order, and the pools come in card order. Take
// it over PreferredPools when the devices are republished after every
// partition change (WithFitOnly): a change on one card then rewrites one
// pool's one device slice, which the resource slice controller of
// k8s.io/dynamic-resource-allocation updates in place without a new pool
// generation, so no pool is ever incomplete while the scheduler catches
// up. One pool for the node spans several device slices (8 cards of 14
// devices each make 112 devices, two slices of 64); a change that
// touches two of them starts a new generation, and until the scheduler
// has seen every slice of it the whole pool, every card of the node, is
// incomplete and skipped.
//
// The price is the order across cards: the allocator takes the first
// fitting device of the first pool by name, so the planner's choice of
// placement on a card is kept, and the card is the first in index order
// that fits the request (first fit across cards), not necessarily the
// planner's. Each pool holds its card's devices in one slice as long as
// they fit in 64 and the card has at least one device, which fit-only
// publication guarantees (a card's in-use devices stay listed).
func (m CounterModel) CardPools(name string, node []FleetCard, opts ...Option) ([]device.Pool, error) {
	pools, err := m.PreferredPools(name, node, opts...)
	if err != nil {
		return nil, err
	}
	out := make([]device.Pool, 0, len(node))
	at := map[int]int{}         // card index -> position in out
	setCard := map[string]int{} // counter set name -> card index
	devCard := map[string]int{} // device name -> card index
	for _, c := range node {    // PreferredPools checked: one entry per card of the model
		at[c.Index] = len(out)
		setCard[c.Scheme.CounterSetName(c.Index)] = c.Index
		devCard[c.Scheme.CardDeviceName(c.Index)] = c.Index
		for si := range c.Scheme.slots {
			devCard[c.Scheme.slotDeviceName(c.Index, si)] = c.Index
		}
		out = append(out, device.Pool{Name: c.Scheme.PoolName(name, c.Index)})
	}
	for _, p := range pools {
		for _, cs := range p.CounterSets {
			card, ok := setCard[cs.Name]
			if !ok {
				return nil, fmt.Errorf("card pools: counter set %q belongs to no card of the node", cs.Name)
			}
			out[at[card]].CounterSets = append(out[at[card]].CounterSets, cs)
		}
		for _, d := range p.Devices {
			card, ok := devCard[d.Name()]
			if !ok {
				return nil, fmt.Errorf("card pools: device %q belongs to no card of the node", d.Name())
			}
			out[at[card]].Devices = append(out[at[card]].Devices, d)
		}
	}
	slices.SortStableFunc(out, func(a, b device.Pool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
