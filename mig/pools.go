package mig

import (
	"maps"
	"slices"

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
