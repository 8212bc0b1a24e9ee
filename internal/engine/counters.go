package engine

import (
	"errors"
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// API limits the model respects (k8s.io/api/resource/v1).
const (
	maxDevicesPerSliceWithCounters = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures // 64
	maxCounterSetsPerSlice         = resourceapi.ResourceSliceMaxCounterSets                 // 8
	maxCountersPerSet              = resourceapi.ResourceSliceMaxCountersPerCounterSet       // 32
)

// Card is one physical partitionable card of a node to model.
type Card struct {
	// Index is the card's index on its node; it names the devices.
	Index int
	// Scheme is the card's partition scheme, built by NewScheme.
	Scheme *Scheme
	// UUID, when set, becomes the UUID attribute of its devices.
	UUID string
	// Profiles limits the advertised profiles; empty means all. A driver
	// that partitions at prepare passes DefaultProfiles(Scheme) or its
	// setting, and the same set to Preference with WithProfiles.
	Profiles []string
}

// CounterModel is the KEP-4815 model of a node's cards: one counter set
// per card and one device per whole card and per profile x placement.
// Partitions consume the placed units they cover, their counted units,
// their extras, the card's partition counter (Scheme.MaxPartitions),
// per-profile instance counters where the placements alone do not bound
// a profile's count, and, on a scheme with several modes, the mode
// counters. The allocator can then allocate exactly the sets of devices
// that form valid layouts (the whole card excludes everything else on
// it); the package's tests prove it with the real allocator.
//
// Names follow the scheme's Names: "<device>-<index>" for the whole card,
// "<device>-<index>-<profile>-<start>" for a partition, counter set
// "<device>-<index>-<counterSet>". Scheme.ParseDeviceName reads a device
// name back.
//
// Modes: a card whose partitions must share one card-wide mode gets one
// mode counter per unit of its lock dimension (compute when placed, else
// memory). Modes are numbered in profile order; mode i may have n_i
// partitions at once (at most the units), and takes b_i on every unit
// its partition does not cover, where b_1 = 1 and b_k is one more than
// the largest (n_i - 1) * b_i of the modes before it. Each counter holds
// L, the largest n_i * b_i, and a partition takes L - (n_i - 1) * b_i on
// the units it covers. Partitions of one mode then fit in every
// combination their units allow, and a partition of mode i beside one of
// a later mode k overflows the counter of a unit the first covers:
// L - (n_i - 1) * b_i + b_k > L.
type CounterModel struct {
	// CounterSets, one per card, in card order.
	CounterSets []resourceapi.CounterSet
	// Devices in the static order: by card, the whole card first, then
	// profiles in the scheme's order, placements by ascending start.
	Devices []resourceapi.Device
}

func qty(v int64) resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
}

// planLocks plans the mode counters of a scheme with several modes.
func (s *Scheme) planLocks() error {
	lp := lockPlan{compute: s.Compute.Placed}
	switch {
	case s.Compute.Placed:
		lp.units = s.Compute.Count
	case s.Memory.Placed:
		lp.units = s.Memory.Count
	default:
		return errors.New("modes need a placed dimension (compute, or memory) that every profile with a mode covers")
	}
	n := make([]int64, len(s.modes))
	for pi, pr := range s.Profiles {
		m := s.info[pi].mode
		if m == 0 {
			continue
		}
		if !lp.compute && pr.Memory == 0 {
			return fmt.Errorf("profile %s has mode %s but takes no memory units, which keep a card in one mode when compute is counted", pr.Name, pr.Mode)
		}
		n[m-1] += int64(pr.MaxCount)
	}
	b := make([]int64, len(s.modes))
	var top, capacity int64
	for i := range s.modes {
		n[i] = min(n[i], int64(lp.units))
		b[i] = top + 1
		top = max(top, (n[i]-1)*b[i])
		capacity = max(capacity, n[i]*b[i])
		if capacity > 1<<50 {
			return fmt.Errorf("%d modes: the mode counters would exceed 2^50", len(s.modes))
		}
	}
	lp.capacity = capacity
	for i := range s.modes {
		lp.covered = append(lp.covered, capacity-(n[i]-1)*b[i])
		lp.other = append(lp.other, b[i])
	}
	s.lock = lp
	return nil
}

// NewCounterModel builds the counter model of a node's cards. Card indices
// must be unique and non-negative; each card's counter set must fit in 32
// counters with distinct names.
func NewCounterModel(cards []Card) (CounterModel, error) {
	var m CounterModel
	seen := map[int]bool{}
	for ci, c := range cards {
		s := c.Scheme
		if err := s.check(); err != nil {
			return m, fmt.Errorf("build counter model: cards[%d].scheme: %w", ci, err)
		}
		if c.Index < 0 || seen[c.Index] {
			return m, fmt.Errorf("build counter model: cards[%d].index %d is negative or repeated", ci, c.Index)
		}
		seen[c.Index] = true
		allow, err := s.profileFilter(c.Profiles)
		if err != nil {
			return m, fmt.Errorf("build counter model: cards[%d].profiles: %w", ci, err)
		}
		set := resourceapi.CounterSet{Name: s.CounterSetName(c.Index), Counters: map[string]resourceapi.Counter{}}
		dup := ""
		put := func(name string, v int64) {
			if _, ok := set.Counters[name]; ok && dup == "" {
				dup = name
			}
			set.Counters[name] = qty(v)
		}
		n := s.Names
		if s.Memory.Placed {
			for i := 0; i < s.Memory.Count; i++ {
				put(n.MemoryCounter+strconv.Itoa(i), 1)
			}
		} else if s.Memory.Count > 0 {
			put(n.MemoryCounter, int64(s.Memory.Count))
		}
		if s.Compute.Placed {
			for i := 0; i < s.Compute.Count; i++ {
				put(n.ComputeCounter+strconv.Itoa(i), 1)
			}
		} else {
			put(n.ComputeCounter, int64(s.Compute.Count))
		}
		var extras [maxExtras]bool
		modes := map[uint8]bool{}
		for pi, pr := range s.Profiles {
			if !allow[pi] {
				continue
			}
			for e, v := range s.info[pi].extra {
				extras[e] = extras[e] || v > 0
			}
			if s.info[pi].instances {
				put(n.InstancesCounter+strconv.Itoa(pr.ID), int64(pr.MaxCount))
			}
			if s.info[pi].mode != 0 {
				modes[s.info[pi].mode] = true
			}
		}
		for e, used := range extras {
			if used {
				put(s.Extras[e].Name, int64(s.extraCap[e]))
			}
		}
		if s.MaxPartitions > 0 {
			put(n.PartitionsCounter, int64(s.MaxPartitions))
		}
		locks := len(modes) > 1
		if locks {
			for j := 0; j < s.lock.units; j++ {
				put(n.ModeCounter+strconv.Itoa(j), s.lock.capacity)
			}
		}
		if dup != "" {
			return m, fmt.Errorf("build counter model: cards[%d] (%s): counter %q is named twice; change the scheme's names", ci, s.Name, dup)
		}
		if len(set.Counters) > maxCountersPerSet {
			return m, fmt.Errorf("build counter model: cards[%d] (%s) needs %d counters, the API allows %d per counter set", ci, s.Name, len(set.Counters), maxCountersPerSet)
		}
		full := make(map[string]resourceapi.Counter, len(set.Counters))
		for k, v := range set.Counters {
			full[k] = v
		}
		m.CounterSets = append(m.CounterSets, set)

		common := func(typ string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
			a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
			attr(a, n.TypeAttribute, resourceapi.DeviceAttribute{StringValue: ptr.To(typ)})
			attr(a, n.IndexAttribute, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(c.Index))})
			attr(a, n.ModelAttribute, resourceapi.DeviceAttribute{StringValue: ptr.To(s.Name)})
			if c.UUID != "" {
				attr(a, n.UUIDAttribute, resourceapi.DeviceAttribute{StringValue: ptr.To(c.UUID)})
			}
			return a
		}
		memBytes := s.MemoryBytes
		if memBytes == 0 {
			for _, pr := range s.Profiles {
				memBytes = max(memBytes, pr.MemoryBytes)
			}
		}
		capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
		capa(capacity, n.MemoryCapacity, memBytes, resource.BinarySI)
		capa(capacity, n.ComputeCapacity, int64(s.Compute.Count), resource.DecimalSI)
		m.Devices = append(m.Devices, resourceapi.Device{
			Name:             s.CardDeviceName(c.Index),
			Attributes:       common(n.CardType),
			Capacity:         capacity,
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: full}},
		})
		for si, sl := range s.slots {
			if !allow[sl.prof] {
				continue
			}
			pr := s.Profiles[sl.prof]
			info := s.info[sl.prof]
			cons := map[string]resourceapi.Counter{}
			if s.Memory.Placed {
				for i := sl.mem; i < sl.mem+pr.Memory; i++ {
					cons[n.MemoryCounter+strconv.Itoa(i)] = qty(1)
				}
			} else if pr.Memory > 0 {
				cons[n.MemoryCounter] = qty(int64(pr.Memory))
			}
			if s.Compute.Placed {
				for i := sl.comp; i < sl.comp+pr.Compute; i++ {
					cons[n.ComputeCounter+strconv.Itoa(i)] = qty(1)
				}
			} else {
				cons[n.ComputeCounter] = qty(int64(pr.Compute))
			}
			for e, v := range info.extra {
				if v > 0 {
					cons[s.Extras[e].Name] = qty(int64(v))
				}
			}
			if info.instances {
				cons[n.InstancesCounter+strconv.Itoa(pr.ID)] = qty(1)
			}
			if s.MaxPartitions > 0 {
				cons[n.PartitionsCounter] = qty(1)
			}
			if locks && info.mode != 0 {
				first, size := sl.comp, pr.Compute
				if !s.lock.compute {
					first, size = sl.mem, pr.Memory
				}
				for j := 0; j < s.lock.units; j++ {
					v := s.lock.other[info.mode-1]
					if j >= first && j < first+size {
						v = s.lock.covered[info.mode-1]
					}
					cons[n.ModeCounter+strconv.Itoa(j)] = qty(v)
				}
			}
			a := common(n.PartitionType)
			attr(a, n.ProfileAttribute, resourceapi.DeviceAttribute{StringValue: ptr.To(pr.Name)})
			attr(a, n.ProfileIDAttribute, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(pr.ID))})
			if s.Memory.Placed && pr.Memory > 0 {
				attr(a, n.MemoryStartAttribute, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(sl.mem))})
				attr(a, n.MemorySizeAttribute, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(pr.Memory))})
			}
			if s.Compute.Placed {
				attr(a, n.ComputeStartAttribute, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(sl.comp))})
				attr(a, n.ComputeSizeAttribute, resourceapi.DeviceAttribute{IntValue: ptr.To(int64(pr.Compute))})
			}
			capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
			capa(capacity, n.MemoryCapacity, pr.MemoryBytes, resource.BinarySI)
			capa(capacity, n.ComputeCapacity, int64(pr.Compute), resource.DecimalSI)
			for k, q := range pr.Capacities {
				capacity[resourceapi.QualifiedName(k)] = resourceapi.DeviceCapacity{Value: q.DeepCopy()}
			}
			m.Devices = append(m.Devices, resourceapi.Device{
				Name:             s.slotDeviceName(c.Index, si),
				Attributes:       a,
				Capacity:         capacity,
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: cons}},
			})
		}
	}
	return m, nil
}

// attr sets attribute name unless it is Omit.
func attr(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name string, v resourceapi.DeviceAttribute) {
	if name != Omit {
		a[resourceapi.QualifiedName(name)] = v
	}
}

// capa sets capacity name to v unless the name is Omit or v is 0.
func capa(c map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, name string, v int64, f resource.Format) {
	if name != Omit && v > 0 {
		c[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(v, f)}
	}
}

// Reorder returns a copy of the model whose devices come in the given
// order of names; devices not named keep their relative order after the
// named ones. Unknown names are an error. Publishing the result with
// Slices makes the allocator's first fit follow the order.
func (m CounterModel) Reorder(names []string) (CounterModel, error) {
	pos := make(map[string]int, len(m.Devices))
	for i, d := range m.Devices {
		pos[d.Name] = i
	}
	out := CounterModel{CounterSets: m.CounterSets, Devices: make([]resourceapi.Device, 0, len(m.Devices))}
	used := make([]bool, len(m.Devices))
	for _, n := range names {
		i, ok := pos[n]
		if !ok {
			return CounterModel{}, fmt.Errorf("reorder devices: unknown device %q", n)
		}
		if used[i] {
			return CounterModel{}, fmt.Errorf("reorder devices: device %q named twice", n)
		}
		used[i] = true
		out.Devices = append(out.Devices, m.Devices[i])
	}
	for i, d := range m.Devices {
		if !used[i] {
			out.Devices = append(out.Devices, d)
		}
	}
	return out, nil
}

// Only returns a copy of the model with exactly the named devices, in the
// given order (for publishing a subset, e.g. Preference with WithReserve).
// Unknown or repeated names are an error.
func (m CounterModel) Only(names []string) (CounterModel, error) {
	r, err := m.Reorder(names)
	if err != nil {
		return CounterModel{}, err
	}
	r.Devices = r.Devices[:len(names)]
	return r, nil
}

// Slices turns the model into the ResourceSlices of one pool on one node,
// within the API limits: counter sets in their own slices (8 per slice),
// devices 64 per slice, in model order. Slice names are
// "<pool>-counters-NNN" and "<pool>-devices-NNN" with zero-padded
// numbers, so that ordering by name (what newer allocators do) and the
// returned order (what older ones use) agree: the allocator's first fit
// follows m.Devices.
//
// The slices hold the same devices and counter sets, cut the same way, as
// device.Inventory gives for Pools: a driver publishes Pools; Slices is
// the direct form for in-process simulations that republish at every step
// (tens of microseconds for a node of 8 cards, against milliseconds
// through device's conversion).
func (m CounterModel) Slices(driver, pool, nodeName string, generation int64) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	mk := func(kind string, n int) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%03d", pool, kind, n)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: driver,
				Pool:   resourceapi.ResourcePool{Name: pool, Generation: generation},
				// Exactly one node selection field is required, counter slices included.
				NodeName: ptr.To(nodeName),
			},
		}
	}
	for i := 0; i < len(m.CounterSets); i += maxCounterSetsPerSlice {
		s := mk("counters", i/maxCounterSetsPerSlice)
		s.Spec.SharedCounters = m.CounterSets[i:min(i+maxCounterSetsPerSlice, len(m.CounterSets))]
		out = append(out, s)
	}
	for i := 0; i < len(m.Devices); i += maxDevicesPerSliceWithCounters {
		s := mk("devices", i/maxDevicesPerSliceWithCounters)
		s.Spec.Devices = m.Devices[i:min(i+maxDevicesPerSliceWithCounters, len(m.Devices))]
		out = append(out, s)
	}
	for _, s := range out {
		s.Spec.Pool.ResourceSliceCount = int64(len(out))
	}
	return out
}
