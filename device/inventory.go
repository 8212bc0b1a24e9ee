package device

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Inventory is everything one driver publishes from one place: the devices
// and counter sets of a node, or of a network-attached pool, grouped into
// pools. The order of Pools does not matter; the order of each pool's
// Devices does: it is kept in the published slices and is the scheduler's
// first-fit priority (put preferred devices first).
type Inventory struct {
	// Driver is the driver's name, a DNS subdomain of at most 63
	// characters ("gpu.example.com"). Attribute and capacity names without
	// a domain belong to it.
	Driver string
	// Pools are the driver's pools. Pool names are unique.
	Pools []Pool
}

// Pool is a set of devices that the scheduler sees as one unit: devices
// can consume counters of counter sets in the same pool only.
type Pool struct {
	// Name is the pool's name: DNS subdomains joined by '/', at most 253
	// characters. A node-local driver usually names its pool after the
	// node.
	Name string
	// NodeSelector, when set, makes the pool's devices available on the
	// matching nodes (network-attached devices). It must have exactly one
	// term. Leave it and AllNodes unset for devices of the node the driver
	// runs on: the kubelet plugin helper sets the slices' nodeName.
	// Note: kubeletplugin.Helper.PublishResources publishes every pool
	// with the node's name, which the API server rejects together with a
	// NodeSelector or AllNodes (package driver refuses such pools with an
	// error that says so); publish them from a controller with
	// resourceslice.StartController, passing DriverResources and no Node
	// owner.
	NodeSelector *corev1.NodeSelector
	// AllNodes makes the devices available on every node.
	AllNodes bool
	// CounterSets are the shared counters that devices of this pool
	// consume (partitionable devices). They are published in slices of
	// their own, 8 sets per slice.
	CounterSets []CounterSet
	// Devices in priority order. Names are unique within the pool.
	Devices []*Device
}

// CounterSet is a named set of counters (e.g. the memory slices and
// compute units of one physical GPU) that partitions of a device consume.
// Name and counter names are DNS labels; a set has 1 to 32 counters.
type CounterSet struct {
	Name     string
	Counters map[string]resource.Quantity
}

// DeviceID names one device of an inventory.
type DeviceID struct {
	Pool   string
	Device string
}

// String returns "pool/device".
func (id DeviceID) String() string { return id.Pool + "/" + id.Device }

// ErrUnknownDevice is wrapped by [Inventory.WithTaints] when it is asked to
// taint a device that the inventory does not have.
var ErrUnknownDevice = fmt.Errorf("unknown device")

// Clone returns a deep copy of the inventory.
func (inv *Inventory) Clone() *Inventory {
	if inv == nil {
		return nil
	}
	c := &Inventory{Driver: inv.Driver, Pools: make([]Pool, len(inv.Pools))}
	for i, p := range inv.Pools {
		np := Pool{Name: p.Name, AllNodes: p.AllNodes}
		if p.NodeSelector != nil {
			np.NodeSelector = p.NodeSelector.DeepCopy()
		}
		if p.CounterSets != nil {
			np.CounterSets = make([]CounterSet, len(p.CounterSets))
			for j, cs := range p.CounterSets {
				m := make(map[string]resource.Quantity, len(cs.Counters))
				for k, v := range cs.Counters {
					m[k] = v.DeepCopy()
				}
				np.CounterSets[j] = CounterSet{Name: cs.Name, Counters: m}
			}
		}
		if p.Devices != nil {
			np.Devices = make([]*Device, len(p.Devices))
			for j, d := range p.Devices {
				np.Devices[j] = d.Clone()
			}
		}
		c.Pools[i] = np
	}
	return c
}

// Lookup returns the device with the given ID, or nil.
func (inv *Inventory) Lookup(id DeviceID) *Device {
	if inv == nil {
		return nil
	}
	for i := range inv.Pools {
		if inv.Pools[i].Name != id.Pool {
			continue
		}
		for _, d := range inv.Pools[i].Devices {
			if d != nil && d.name == id.Device {
				return d
			}
		}
	}
	return nil
}

// WithTaints returns a copy of the inventory in which each device named in
// taints carries, after its own taints, the given ones. The runtime uses it
// to turn health events into taints without touching the vendor's
// inventory. A device that the inventory lacks is an error wrapping
// [ErrUnknownDevice] (the copy is not returned then). The result is the
// same for the same input: the map is applied in sorted order.
func (inv *Inventory) WithTaints(taints map[DeviceID][]Taint) (*Inventory, error) {
	if inv == nil {
		if len(taints) == 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("taint devices: nil inventory: %w", ErrUnknownDevice)
	}
	out := inv.Clone()
	if len(taints) == 0 {
		return out, nil
	}
	index := make(map[DeviceID]*Device)
	for _, p := range out.Pools {
		for _, d := range p.Devices {
			if d != nil {
				index[DeviceID{Pool: p.Name, Device: d.name}] = d
			}
		}
	}
	ids := make([]DeviceID, 0, len(taints))
	for id := range taints {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b DeviceID) int {
		if c := strings.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		return strings.Compare(a.Device, b.Device)
	})
	for _, id := range ids {
		d, ok := index[id]
		if !ok {
			return nil, fmt.Errorf("taint device %s: %w", id, ErrUnknownDevice)
		}
		for _, t := range taints[id] {
			d.taints = append(d.taints, t.clone())
		}
	}
	return out, nil
}
