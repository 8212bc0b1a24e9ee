package device

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func hasAdvanced(devices []resourceapi.Device) bool {
	for i := range devices {
		// List attributes would count too, but the API server drops
		// them (feature off by default) before it counts.
		if len(devices[i].Taints) > 0 || len(devices[i].ConsumesCounters) > 0 {
			return true
		}
	}
	return false
}

// sliceSpec checks what the API server checks in one slice's spec.
func (c *checker) sliceSpec(s *resourceapi.ResourceSliceSpec, p *field.Path) {
	c.driverName(s.Driver, p.Child("driver"))
	pp := p.Child("pool")
	c.poolName(s.Pool.Name, pp.Child("name"))
	if s.Pool.ResourceSliceCount <= 0 {
		c.obj(field.Invalid(pp.Child("resourceSliceCount"), s.Pool.ResourceSliceCount, "must be greater than zero"))
	}
	if s.Pool.Generation < 0 {
		c.obj(field.Invalid(pp.Child("generation"), s.Pool.Generation, "must be greater than or equal to zero"))
	}

	var set []string
	if s.NodeName != nil {
		if *s.NodeName == "" {
			c.obj(field.Invalid(p.Child("nodeName"), "", "must be either unset or set to a non-empty string"))
		} else {
			set = append(set, "`nodeName`")
			c.nodeName(*s.NodeName, p.Child("nodeName"))
		}
	}
	if s.NodeSelector != nil {
		set = append(set, "`nodeSelector`")
		c.nodeSelector(s.NodeSelector, p.Child("nodeSelector"))
		if len(s.NodeSelector.NodeSelectorTerms) != 1 {
			c.obj(field.Invalid(p.Child("nodeSelector", "nodeSelectorTerms"), len(s.NodeSelector.NodeSelectorTerms), "must have exactly one node selector term"))
		}
	}
	if s.AllNodes != nil {
		if *s.AllNodes {
			set = append(set, "`allNodes`")
		} else {
			c.obj(field.Invalid(p.Child("allNodes"), false, "must be either unset or set to true"))
		}
	}
	pdns := s.PerDeviceNodeSelection != nil && *s.PerDeviceNodeSelection
	if s.PerDeviceNodeSelection != nil {
		if pdns {
			set = append(set, "`perDeviceNodeSelection`")
		} else {
			c.obj(field.Invalid(p.Child("perDeviceNodeSelection"), false, "must be either unset or set to true"))
		}
	}
	switch len(set) {
	case 0:
		c.obj(field.Required(p, "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"))
	case 1:
	default:
		c.obj(field.Invalid(p, "{"+strings.Join(set, ", ")+"}", "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set"))
	}

	if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
		c.obj(field.Invalid(p, "", "only one of `sharedCounters` or `devices` is allowed"))
	}

	dp := p.Child("devices")
	limit := MaxDevicesPerSlice
	if hasAdvanced(s.Devices) {
		limit = MaxDevicesPerSliceWithTaintsOrCounters
	}
	if len(s.Devices) > limit {
		c.obj(field.TooMany(dp, len(s.Devices), limit))
	} else {
		seen := make(map[string]bool, len(s.Devices))
		for i := range s.Devices {
			c.device(&s.Devices[i], dp.Index(i), s.Driver, pdns)
			if seen[s.Devices[i].Name] {
				c.obj(field.Duplicate(dp.Index(i), s.Devices[i].Name))
			}
			seen[s.Devices[i].Name] = true
		}
	}

	cp := p.Child("sharedCounters")
	if len(s.SharedCounters) > MaxCounterSetsPerSlice {
		c.obj(field.TooMany(cp, len(s.SharedCounters), MaxCounterSetsPerSlice))
	} else {
		seen := make(map[string]bool, len(s.SharedCounters))
		for i := range s.SharedCounters {
			c.counterSet(s.SharedCounters[i], cp.Index(i))
			if seen[s.SharedCounters[i].Name] {
				c.obj(field.Duplicate(cp.Index(i), s.SharedCounters[i].Name))
			}
			seen[s.SharedCounters[i].Name] = true
		}
	}
	if s.PartitionTypeAttribute != nil {
		c.pool(field.Forbidden(p.Child("partitionTypeAttribute"), "needs the DRAPartitionableDevicesType feature, which is off by default; the API server drops it"))
	}
	if len(s.SkipNodeOperations) > 0 {
		c.pool(field.Forbidden(p.Child("skipNodeOperations"), "needs the DRAOptionalNodeOperations feature, which is off by default; the API server drops it"))
	}
}

// poolConsistency checks what the API server cannot: slices of one
// driver's pool against each other.
func (c *checker) poolConsistency(in []*resourceapi.ResourceSlice) {
	type poolKey struct{ driver, pool string }
	groups := make(map[poolKey][]int)
	var order []poolKey
	for i, s := range in {
		if s == nil {
			continue
		}
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		// Only the newest generation counts, as in the scheduler.
		gen := in[idx[0]].Spec.Pool.Generation
		for _, i := range idx {
			gen = max(gen, in[i].Spec.Pool.Generation)
		}
		var cur []int
		for _, i := range idx {
			if in[i].Spec.Pool.Generation == gen {
				cur = append(cur, i)
			}
		}
		count := in[cur[0]].Spec.Pool.ResourceSliceCount
		for _, i := range cur[1:] {
			if in[i].Spec.Pool.ResourceSliceCount != count {
				c.slice = i
				c.pool(field.Invalid(field.NewPath("spec", "pool", "resourceSliceCount"), in[i].Spec.Pool.ResourceSliceCount,
					fmt.Sprintf("slices of pool %q generation %d disagree on the slice count (%d in slice %d)", k.pool, gen, count, cur[0])))
			}
		}
		if count > 0 && int64(len(cur)) > count {
			c.slice = cur[0]
			c.pool(field.TooMany(field.NewPath("spec", "pool", "resourceSliceCount"), len(cur), int(count)))
		}
		pc := poolChecker{c: c, sets: make(map[string]setRef), devices: make(map[string]setRef)}
		for _, i := range cur {
			c.slice = i
			for j, cs := range in[i].Spec.SharedCounters {
				pc.addSet(cs, i, field.NewPath("spec", "sharedCounters").Index(j))
			}
		}
		for _, i := range cur {
			c.slice = i
			for j := range in[i].Spec.Devices {
				pc.addDevice(&in[i].Spec.Devices[j], i, field.NewPath("spec", "devices").Index(j))
			}
		}
	}
	c.slice = -1
	slices.SortStableFunc(c.problems, func(a, b Problem) int { return cmp.Compare(a.Slice, b.Slice) })
}

type setRef struct {
	slice    int
	counters map[string]resourceapi.Counter
}

// poolChecker checks cross-references within one pool.
type poolChecker struct {
	c       *checker
	sets    map[string]setRef
	devices map[string]setRef
}

func (pc *poolChecker) addSet(cs resourceapi.CounterSet, slice int, p *field.Path) {
	if prev, dup := pc.sets[cs.Name]; dup {
		pc.c.pool(field.Duplicate(p.Child("name"), fmt.Sprintf("%s (also in slice %d)", cs.Name, prev.slice)))
		return
	}
	pc.sets[cs.Name] = setRef{slice: slice, counters: cs.Counters}
}

func (pc *poolChecker) addDevice(d *resourceapi.Device, slice int, p *field.Path) {
	if prev, dup := pc.devices[d.Name]; dup && prev.slice != slice {
		pc.c.pool(field.Duplicate(p.Child("name"), fmt.Sprintf("%s (also in slice %d)", d.Name, prev.slice)))
	} else if !dup {
		pc.devices[d.Name] = setRef{slice: slice}
	}
	for i, cc := range d.ConsumesCounters {
		ip := p.Child("consumesCounters").Index(i)
		set, ok := pc.sets[cc.CounterSet]
		if !ok {
			pc.c.pool(field.NotFound(ip.Child("counterSet"), cc.CounterSet))
			continue
		}
		for _, name := range sortedKeys(cc.Counters) {
			if _, ok := set.counters[name]; !ok {
				pc.c.pool(field.NotFound(ip.Child("counters").Key(name), fmt.Sprintf("%s (not in counter set %s)", name, cc.CounterSet)))
			}
		}
	}
}

// convertChecked converts the inventory's pools into API objects and checks
// them by the rules of [Validate], with paths into the inventory: what is
// checked is exactly what is published. Slice-level limits are met by
// construction (the conversion splits), so only per-device, per-set and
// per-pool rules apply. [Inventory.Validate] and
// [Inventory.DriverResources] share it.
func (inv *Inventory) convertChecked() ([]convertedPool, error) {
	c := &checker{slice: -1}
	if inv == nil {
		c.obj(field.Required(field.NewPath("inventory"), "nil inventory"))
		return nil, c.err()
	}
	converted := make([]convertedPool, len(inv.Pools))
	c.driverName(inv.Driver, field.NewPath("driver"))
	pools := make(map[string]int, len(inv.Pools))
	for pi := range inv.Pools {
		p := &inv.Pools[pi]
		pp := field.NewPath("pools").Index(pi)
		c.poolName(p.Name, pp.Child("name"))
		if prev, dup := pools[p.Name]; dup {
			c.obj(field.Duplicate(pp.Child("name"), fmt.Sprintf("%s (also pools[%d])", p.Name, prev)))
		} else {
			pools[p.Name] = pi
		}
		if p.NodeSelector != nil {
			if p.AllNodes {
				c.obj(field.Invalid(pp, "{`nodeSelector`, `allNodes`}", "at most one of `nodeSelector` and `allNodes` may be set"))
			}
			c.nodeSelector(p.NodeSelector, pp.Child("nodeSelector"))
			if len(p.NodeSelector.NodeSelectorTerms) != 1 {
				c.obj(field.Invalid(pp.Child("nodeSelector", "nodeSelectorTerms"), len(p.NodeSelector.NodeSelectorTerms), "must have exactly one node selector term"))
			}
		}
		converted[pi] = convertPool(inv.Driver, p)
		cp := &converted[pi]
		pc := poolChecker{c: c, sets: make(map[string]setRef, len(p.CounterSets)), devices: make(map[string]setRef, len(p.Devices))}
		sp := pp.Child("counterSets")
		for si := range cp.sets {
			acs := cp.sets[si]
			c.counterSet(acs, sp.Index(si))
			pc.addSet(acs, si, sp.Index(si))
		}
		dp := pp.Child("devices")
		for di, d := range p.Devices {
			ip := dp.Index(di)
			if d == nil {
				c.obj(field.Required(ip, "nil device"))
				continue
			}
			ad := &cp.devices[di]
			c.device(ad, ip, inv.Driver, false)
			// Every device is its own "slice" for duplicate detection.
			if prev, dup := pc.devices[ad.Name]; dup {
				c.pool(field.Duplicate(ip.Child("name"), fmt.Sprintf("%s (also devices[%d])", ad.Name, prev.slice)))
			} else {
				pc.devices[ad.Name] = setRef{slice: di}
			}
			for i, cc := range ad.ConsumesCounters {
				cp := ip.Child("consumesCounters").Index(i)
				set, ok := pc.sets[cc.CounterSet]
				if !ok {
					c.pool(field.NotFound(cp.Child("counterSet"), cc.CounterSet))
					continue
				}
				for _, name := range sortedKeys(cc.Counters) {
					if _, ok := set.counters[name]; !ok {
						c.pool(field.NotFound(cp.Child("counters").Key(name), fmt.Sprintf("%s (not in counter set %s)", name, cc.CounterSet)))
					}
				}
			}
		}
	}
	return converted, c.err()
}
