package mig

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
// pools: map a device back to its GPU, profile and placement with
// ParseDeviceName. Attributes and capacities carry bare names, which
// device publishes in the driver's own domain. device's
// Inventory.DriverResources splits the pools under the API limits (counter
// sets 8 per slice in slices of their own, then devices 64 per slice);
// Slices gives the same slices as ready objects for in-process use.
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

// DefaultProfiles is the profile set a dynamic-MIG driver advertises by
// default for product p (GPU.Profiles, and WithProfiles for Preference):
// one profile per compute size, the first of the catalog's order (the
// smallest memory) without media extensions. On an H100-80GB that is
// 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb and 7g.80gb: 15 devices per GPU with
// the full GPU, against 26 with every profile. The large-memory 1g
// (1g.20gb) and the "+me" profiles are left to an explicit setting.
//
// Chosen by the fleet benchmark ("drakit mig bench -fleet", package doc):
// every advertised device is a device the scheduler converts, evaluates
// and stores on every node for every pod. With 8 x H100 per node the
// slices take 385 KiB per node against 654 KiB with every profile (the
// goal was 400), and each extra profile adds its placements to every
// node's cost. A nil p has no profiles.
func DefaultProfiles(p *Product) []string {
	if p == nil {
		return nil
	}
	var out []string
	seen := map[int]bool{}
	for _, pr := range p.Profiles {
		if pr.MediaExtensions || seen[pr.ComputeSlices] {
			continue
		}
		seen[pr.ComputeSlices] = true
		out = append(out, pr.Name)
	}
	return out
}

// PreferredPools is what a dynamic-MIG driver publishes for one node after
// every change: Pools(name) with the devices in the planner's order for
// the node's current instances (Preference(node, opts...)), restricted to
// the devices the model advertises, so any advertised profile set works
// without WithProfiles. Pass WithFitOnly() to publish only the devices
// the scheduler can still allocate (the package doc's choice); without
// it, every model device is listed. node must hold one entry per GPU of
// the model (by index) with the model's product; anything else is an
// error wrapping ErrFleet.
func (m CounterModel) PreferredPools(name string, node []FleetGPU, opts ...Option) ([]device.Pool, error) {
	gpus := map[string]bool{}
	for _, cs := range m.CounterSets {
		gpus[cs.Name] = true
	}
	product := map[int]string{} // GPU index -> product name on its devices
	for _, d := range m.Devices {
		if ref, err := ParseDeviceName(d.Name); err == nil {
			if a, ok := d.Attributes[AttrProduct]; ok && a.StringValue != nil {
				product[ref.GPU] = *a.StringValue
			}
		}
	}
	for i, g := range node {
		if !gpus[CounterSetName(g.Index)] {
			return nil, fmt.Errorf("preferred pools: %w: node[%d]: GPU %d is not in the model", ErrFleet, i, g.Index)
		}
		delete(gpus, CounterSetName(g.Index))
		if p, ok := product[g.Index]; ok && g.Product != nil && g.Product.Name != p {
			return nil, fmt.Errorf("preferred pools: %w: node[%d]: GPU %d is a %s in the model, not a %s", ErrFleet, i, g.Index, p, g.Product.Name)
		}
	}
	if len(gpus) > 0 {
		return nil, fmt.Errorf("preferred pools: %w: the node lacks %d of the model's GPUs", ErrFleet, len(gpus))
	}
	pref, err := Preference(node, opts...)
	if err != nil {
		return nil, fmt.Errorf("preferred pools: %w", err)
	}
	have := make(map[string]bool, len(m.Devices))
	for _, d := range m.Devices {
		have[d.Name] = true
	}
	names := pref[:0:0]
	for _, n := range pref {
		if have[n] {
			names = append(names, n)
		}
	}
	only, err := m.Only(names)
	if err != nil {
		return nil, fmt.Errorf("preferred pools: %w", err)
	}
	return only.Pools(name), nil
}

// GPUPoolName is the name of GPU index's pool in GPUPools: the node's pool
// name, "/gpu-" and the index with at least two digits, so that the
// allocator, which walks a node's pools by name, walks them in GPU order.
func GPUPoolName(name string, index int) string {
	return fmt.Sprintf("%s/gpu-%02d", name, index)
}

// GPUPools is PreferredPools cut into one pool per GPU: pool
// GPUPoolName(name, index) holds GPU index's counter set and its devices
// in the planner's order, and the pools come in GPU order. Take it over
// PreferredPools when the devices are republished after every MIG change
// (WithFitOnly): a change on one GPU then rewrites one pool's one device
// slice, which the resource slice controller of
// k8s.io/dynamic-resource-allocation updates in place without a new pool
// generation, so no pool is ever incomplete while the scheduler catches
// up. One pool for the node spans several device slices (8 GPUs of 14
// devices each make 112 devices, two slices of 64); a change that touches
// two of them starts a new generation, and until the scheduler has seen
// every slice of it the whole pool, every GPU of the node, is incomplete
// and skipped.
//
// The price is the order across GPUs: the allocator takes the first
// fitting device of the first pool by name, so the planner's choice of
// placement on a GPU is kept, and the GPU is the first in index order
// that fits the request (first fit across GPUs), not necessarily the
// planner's. Each pool holds its GPU's devices in one slice as long as
// they fit in 64 (every product of the catalog does, all profiles
// advertised) and the GPU has at least one device, which fit-only
// publication guarantees (a GPU's in-use devices stay listed).
func (m CounterModel) GPUPools(name string, node []FleetGPU, opts ...Option) ([]device.Pool, error) {
	pools, err := m.PreferredPools(name, node, opts...)
	if err != nil {
		return nil, err
	}
	out := make([]device.Pool, 0, len(node))
	at := map[int]int{}        // GPU index -> position in out
	setGPU := map[string]int{} // counter set name -> GPU index
	for _, g := range node {   // PreferredPools checked: one entry per GPU of the model
		at[g.Index] = len(out)
		setGPU[CounterSetName(g.Index)] = g.Index
		out = append(out, device.Pool{Name: GPUPoolName(name, g.Index)})
	}
	for _, p := range pools {
		for _, cs := range p.CounterSets {
			gpu, ok := setGPU[cs.Name]
			if !ok {
				return nil, fmt.Errorf("GPU pools: counter set %q belongs to no GPU of the node", cs.Name)
			}
			out[at[gpu]].CounterSets = append(out[at[gpu]].CounterSets, cs)
		}
		for _, d := range p.Devices {
			ref, err := ParseDeviceName(d.Name())
			if err != nil {
				return nil, fmt.Errorf("GPU pools: %w", err)
			}
			i, ok := at[ref.GPU]
			if !ok {
				return nil, fmt.Errorf("GPU pools: device %q belongs to no GPU of the node", d.Name())
			}
			out[i].Devices = append(out[i].Devices, d)
		}
	}
	slices.SortStableFunc(out, func(a, b device.Pool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
