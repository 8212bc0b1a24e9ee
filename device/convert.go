package device

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// poolLayout is how one pool is cut into slices.
type poolLayout struct {
	counterSlices [][]resourceapi.CounterSet
	deviceSlices  [][]resourceapi.Device
}

func (l poolLayout) slices() []resourceslice.Slice {
	out := make([]resourceslice.Slice, 0, len(l.counterSlices)+len(l.deviceSlices))
	for _, cs := range l.counterSlices {
		out = append(out, resourceslice.Slice{SharedCounters: cs})
	}
	for _, ds := range l.deviceSlices {
		out = append(out, resourceslice.Slice{Devices: ds})
	}
	if len(out) == 0 {
		out = append(out, resourceslice.Slice{})
	}
	return out
}

// convertedPool is a pool in API types, before it is cut into slices.
type convertedPool struct {
	sets    []resourceapi.CounterSet
	devices []resourceapi.Device
}

func convertPool(driver string, p *Pool) convertedPool {
	cp := convertedPool{
		sets:    make([]resourceapi.CounterSet, len(p.CounterSets)),
		devices: make([]resourceapi.Device, len(p.Devices)),
	}
	for i, cs := range p.CounterSets {
		cp.sets[i] = apiCounterSet(cs)
	}
	for i, d := range p.Devices {
		cp.devices[i] = apiDevice(driver, d)
	}
	return cp
}

// layout cuts a converted pool into slices within the API limits.
func layout(cp convertedPool) poolLayout {
	var l poolLayout
	for i := 0; i < len(cp.sets); i += MaxCounterSetsPerSlice {
		end := min(i+MaxCounterSetsPerSlice, len(cp.sets))
		l.counterSlices = append(l.counterSlices, cp.sets[i:end:end])
	}
	start := 0
	curAdvanced := false
	for i := range cp.devices {
		ad := &cp.devices[i]
		adv := len(ad.Taints) > 0 || len(ad.ConsumesCounters) > 0
		limit := MaxDevicesPerSlice
		if adv || curAdvanced {
			limit = MaxDevicesPerSliceWithTaintsOrCounters
		}
		if i-start >= limit {
			l.deviceSlices = append(l.deviceSlices, cp.devices[start:i:i])
			start, curAdvanced = i, false
		}
		curAdvanced = curAdvanced || adv
	}
	if len(cp.devices) > start {
		l.deviceSlices = append(l.deviceSlices, cp.devices[start:len(cp.devices):len(cp.devices)])
	}
	return l
}

// sliceName is a deterministic, valid object name for slice index of a
// pool. The index is zero-padded so that ordering by name (what the
// in-process allocator and "kubectl get" do) is publication order.
func sliceName(driver, pool string, index int) string {
	base := strings.ToLower(driver + "-" + strings.ReplaceAll(pool, "/", "-"))
	name := fmt.Sprintf("%s-%03d", base, index)
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(driver + "\x00" + pool))
	return fmt.Sprintf("slice-%s-%03d", hex.EncodeToString(sum[:8]), index)
}

func apiCounterSet(cs CounterSet) resourceapi.CounterSet {
	out := resourceapi.CounterSet{Name: cs.Name}
	if cs.Counters != nil {
		out.Counters = make(map[string]resourceapi.Counter, len(cs.Counters))
		for k, v := range cs.Counters {
			out.Counters[k] = resourceapi.Counter{Value: v.DeepCopy()}
		}
	}
	return out
}

// canonicalKeys maps each attribute or capacity name to the name it is
// published under: names in the driver's own domain lose the domain,
// unless that would merge two entries (which validation reports).
func canonicalKey(driver, name string, exists func(string) bool) string {
	if driver == "" || len(name) <= len(driver) || name[len(driver)] != '/' || name[:len(driver)] != driver {
		return name
	}
	bare := name[len(driver)+1:]
	if exists(bare) {
		return name
	}
	return bare
}

// apiDevice converts d; it never fails (validation is separate).
func apiDevice(driver string, d *Device) resourceapi.Device {
	if d == nil {
		return resourceapi.Device{}
	}
	out := resourceapi.Device{Name: d.name}
	if len(d.attributes) > 0 {
		out.Attributes = make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(d.attributes))
		// One backing array per value type instead of one allocation
		// per value.
		var nStr, nInt, nBool int
		for _, a := range d.attributes {
			switch a.kind {
			case kindString, kindVersion:
				nStr++
			case kindInt:
				nInt++
			case kindBool:
				nBool++
			}
		}
		strs, ints, bools := make([]string, 0, nStr), make([]int64, 0, nInt), make([]bool, 0, nBool)
		for name, a := range d.attributes {
			key := canonicalKey(driver, name, func(s string) bool { _, ok := d.attributes[s]; return ok })
			var v resourceapi.DeviceAttribute
			switch a.kind {
			case kindString:
				strs = append(strs, a.str)
				v.StringValue = &strs[len(strs)-1]
			case kindVersion:
				strs = append(strs, a.str)
				v.VersionValue = &strs[len(strs)-1]
			case kindInt:
				ints = append(ints, a.integer)
				v.IntValue = &ints[len(ints)-1]
			case kindBool:
				bools = append(bools, a.boolean)
				v.BoolValue = &bools[len(bools)-1]
			}
			out.Attributes[resourceapi.QualifiedName(key)] = v
		}
	}
	if len(d.capacities) > 0 {
		out.Capacity = make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, len(d.capacities))
		for name, c := range d.capacities {
			key := canonicalKey(driver, name, func(s string) bool { _, ok := d.capacities[s]; return ok })
			dc := resourceapi.DeviceCapacity{Value: c.value.DeepCopy()}
			if c.policy != nil {
				dc.RequestPolicy = c.policy.api()
			}
			out.Capacity[resourceapi.QualifiedName(key)] = dc
		}
	}
	for _, set := range d.consumesOrder {
		counters := d.consumes[set]
		dcc := resourceapi.DeviceCounterConsumption{CounterSet: set}
		if counters != nil {
			dcc.Counters = make(map[string]resourceapi.Counter, len(counters))
			for k, v := range counters {
				dcc.Counters[k] = resourceapi.Counter{Value: v.DeepCopy()}
			}
		}
		out.ConsumesCounters = append(out.ConsumesCounters, dcc)
	}
	for _, t := range d.taints {
		at := resourceapi.DeviceTaint{Key: t.Key, Value: t.Value, Effect: resourceapi.DeviceTaintEffect(t.Effect)}
		if t.TimeAdded != nil {
			tm := metav1.NewTime(t.TimeAdded.Truncate(1e9))
			at.TimeAdded = &tm
		}
		out.Taints = append(out.Taints, at)
	}
	if d.allowMultipleAllocations {
		out.AllowMultipleAllocations = ptr.To(true)
	}
	if d.bindsToNode {
		out.BindsToNode = ptr.To(true)
	}
	out.BindingConditions = slices.Clone(d.bindingConditions)
	out.BindingFailureConditions = slices.Clone(d.bindingFailureConditions)
	return out
}

func (p *RequestPolicy) api() *resourceapi.CapacityRequestPolicy {
	c := p.clone()
	out := &resourceapi.CapacityRequestPolicy{Default: c.Default, ValidValues: c.ValidValues}
	if c.Min != nil || c.Max != nil || c.Step != nil {
		out.ValidRange = &resourceapi.CapacityRequestPolicyRange{Min: c.Min, Max: c.Max, Step: c.Step}
	}
	return out
}
