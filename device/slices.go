package device

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// API limits that the conversion respects (resource.k8s.io/v1, 1.37).
const (
	// MaxDevicesPerSlice is the most devices one ResourceSlice holds.
	MaxDevicesPerSlice = resourceapi.ResourceSliceMaxDevices
	// MaxDevicesPerSliceWithTaintsOrCounters is the limit when any device
	// of the slice has taints or consumes counters.
	MaxDevicesPerSliceWithTaintsOrCounters = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	// MaxCounterSetsPerSlice is the most counter sets one slice holds.
	MaxCounterSetsPerSlice = resourceapi.ResourceSliceMaxCounterSets
	// MaxCountersPerSet is the most counters in one counter set.
	MaxCountersPerSet = resourceapi.ResourceSliceMaxCountersPerCounterSet
	// MaxAttributesAndCapacities is the most attributes plus capacities
	// of one device.
	MaxAttributesAndCapacities = resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice
	// MaxStringLength is the most bytes of a string or version attribute.
	MaxStringLength = resourceapi.DeviceAttributeMaxValueLength
)

// DriverResources validates the inventory and converts it into what
// kubeletplugin.Helper.PublishResources takes. An invalid inventory yields
// a *[ValidationError] listing every problem, with paths into the
// inventory ("pools[0].devices[3].attributes[model].string").
//
// Each pool becomes: its counter sets first, 8 per slice, in the given
// order; then its devices in the given order, packed greedily into slices
// of at most 128 devices, or 64 for a slice holding any device with taints
// or counter consumption. A pool with neither counter sets nor devices
// gets one empty slice (an empty pool is not a missing pool). The same
// inventory always gives the same result, deeply equal, with attribute
// names in the driver's own domain written without the domain.
func (inv *Inventory) DriverResources() (*resourceslice.DriverResources, error) {
	converted, err := inv.convertChecked()
	if err != nil {
		return nil, err
	}
	out := &resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(inv.Pools))}
	for i := range inv.Pools {
		p := &inv.Pools[i]
		rp := resourceslice.Pool{
			AllNodes: p.AllNodes,
			Slices:   layout(converted[i]).slices(),
		}
		if p.NodeSelector != nil {
			rp.NodeSelector = p.NodeSelector.DeepCopy()
		}
		out.Pools[p.Name] = rp
	}
	return out, nil
}

// ResourceSlices converts the inventory into complete ResourceSlice
// objects as the kubelet plugin helper creates them for node nodeName
// (used for pools that have no NodeSelector and not AllNodes), without
// validating it: use it to look at the result, to feed [Validate], or to
// create the objects yourself. Slice names are
// "<driver>-<pool>-<index>", made DNS-safe with [SanitizeName]; the pool
// generation is 1.
func (inv *Inventory) ResourceSlices(nodeName string) []*resourceapi.ResourceSlice {
	if inv == nil {
		return nil
	}
	var out []*resourceapi.ResourceSlice
	for i := range inv.Pools {
		p := &inv.Pools[i]
		ss := layout(convertPool(inv.Driver, p)).slices()
		for j, s := range ss {
			rs := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: sliceName(inv.Driver, p.Name, j)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver: inv.Driver,
					Pool: resourceapi.ResourcePool{
						Name:               p.Name,
						Generation:         1,
						ResourceSliceCount: int64(len(ss)),
					},
					Devices:        s.Devices,
					SharedCounters: s.SharedCounters,
				},
			}
			switch {
			case p.NodeSelector != nil:
				rs.Spec.NodeSelector = p.NodeSelector.DeepCopy()
				if p.AllNodes {
					rs.Spec.AllNodes = ptr.To(true)
				}
			case p.AllNodes:
				rs.Spec.AllNodes = ptr.To(true)
			default:
				rs.Spec.NodeName = ptr.To(nodeName)
			}
			out = append(out, rs)
		}
	}
	return out
}
