package device

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Device describes one device in a vendor-neutral way. Build it with [New]
// and the chainable setters; a Device is converted into a
// resource.k8s.io/v1 Device by [Inventory.DriverResources].
//
// The setters never fail: they record what they are given, and every
// problem (a bad name, a string longer than 64 bytes, a version that is not
// semver, too many attributes) is reported with its field path by
// [Inventory.Validate] and [Inventory.DriverResources]. Setting the same
// attribute, capacity or counter set twice keeps the last value. A nil
// *Device is treated as an empty device by every method that reads it.
//
// A Device is not safe for concurrent mutation; [Device.Clone] returns an
// independent copy.
type Device struct {
	name                     string
	attributes               map[string]attribute
	capacities               map[string]capacity
	consumes                 map[string]map[string]resource.Quantity
	consumesOrder            []string
	taints                   []Taint
	allowMultipleAllocations bool
	bindsToNode              bool
	bindingConditions        []string
	bindingFailureConditions []string
}

// attribute is one attribute value; exactly one field is set.
type attribute struct {
	kind    attributeKind
	str     string
	integer int64
	boolean bool
}

type attributeKind int

const (
	kindString attributeKind = iota + 1
	kindInt
	kindBool
	kindVersion
)

type capacity struct {
	value  resource.Quantity
	policy *RequestPolicy
}

// New starts the description of a device. name must be a DNS label (at
// most 63 lowercase alphanumerics or '-', starting and ending with an
// alphanumeric) unique within its pool; [SanitizeName] turns an arbitrary
// hardware identifier into one.
func New(name string) *Device {
	return &Device{name: name}
}

// Name returns the device's name as given to [New].
func (d *Device) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// StringAttribute sets a string attribute. name is a qualified name: either a bare
// C identifier ("model"), which belongs to the driver's own domain, or
// "domain/identifier" ("resource.kubernetes.io/pcieRoot"). The value must be
// at most 64 bytes.
func (d *Device) StringAttribute(name, value string) *Device {
	d.setAttribute(name, attribute{kind: kindString, str: value})
	return d
}

// IntAttribute sets an integer attribute. See [Device.StringAttribute] for name.
func (d *Device) IntAttribute(name string, value int64) *Device {
	d.setAttribute(name, attribute{kind: kindInt, integer: value})
	return d
}

// BoolAttribute sets a boolean attribute. See [Device.StringAttribute] for name.
func (d *Device) BoolAttribute(name string, value bool) *Device {
	d.setAttribute(name, attribute{kind: kindBool, boolean: value})
	return d
}

// VersionAttribute sets a version attribute. The value must be a semantic version
// 2.0.0 ("1.2.3", "12.4.0-rc.1+build.5") of at most 64 bytes. See
// [Device.StringAttribute] for name.
func (d *Device) VersionAttribute(name, value string) *Device {
	d.setAttribute(name, attribute{kind: kindVersion, str: value})
	return d
}

func (d *Device) setAttribute(name string, a attribute) {
	if d.attributes == nil {
		d.attributes = make(map[string]attribute)
	}
	d.attributes[name] = a
}

// RemoveAttribute removes attribute name (as given to the setter) and
// returns d; removing one the device does not have changes nothing. It is
// how a driver trims a device it did not build itself (one of package
// mig's model devices) down to the attributes its claims select on.
func (d *Device) RemoveAttribute(name string) *Device {
	if d != nil {
		delete(d.attributes, name)
	}
	return d
}

// Capacity sets a capacity of the device (memory, cores, bandwidth). See
// [Device.StringAttribute] for name. A request policy is only allowed on devices
// that [Device.AllowMultipleAllocations]: it says how much of the capacity
// one allocation takes. policy may be nil.
func (d *Device) Capacity(name string, value resource.Quantity, policy *RequestPolicy) *Device {
	if d.capacities == nil {
		d.capacities = make(map[string]capacity)
	}
	c := capacity{value: value.DeepCopy()}
	if policy != nil {
		c.policy = policy.clone()
	}
	d.capacities[name] = c
	return d
}

// ConsumesCounters records that allocating this device consumes the given
// amounts from the named counter set of its pool (partitionable devices:
// e.g. a MIG slice consumes memory slices of its physical GPU). counterSet
// and the counter names are DNS labels; the set must exist in the same
// pool. A device consumes from at most 2 counter sets and at most 32
// counters per set. Calling it again for the same set replaces the amounts.
func (d *Device) ConsumesCounters(counterSet string, counters map[string]resource.Quantity) *Device {
	if d.consumes == nil {
		d.consumes = make(map[string]map[string]resource.Quantity)
	}
	if _, ok := d.consumes[counterSet]; !ok {
		d.consumesOrder = append(d.consumesOrder, counterSet)
	}
	c := make(map[string]resource.Quantity, len(counters))
	for k, v := range counters {
		c[k] = v.DeepCopy()
	}
	d.consumes[counterSet] = c
	return d
}

// Taint adds taints to the device. A device has at most 16 taints. The
// runtime adds health taints itself through [Inventory.WithTaints]; a
// vendor uses this for taints it knows at discovery time.
func (d *Device) Taint(taints ...Taint) *Device {
	d.taints = append(d.taints, taints...)
	return d
}

// AllowMultipleAllocations marks the device as shareable: the scheduler
// may allocate it to several claims at once, each taking a share of the
// capacities that have a [RequestPolicy] (consumable capacity, KEP-5075).
func (d *Device) AllowMultipleAllocations() *Device {
	d.allowMultipleAllocations = true
	return d
}

// BindingConditions sets the conditions the scheduler waits for on the
// claim before it binds a pod to the node (binding conditions, KEP-5007),
// and the conditions that make it give up. Both lists are needed together,
// each has at most 4 entries, each entry is a qualified name like a label
// key, and the lists must not overlap. bindsToNode makes the scheduler
// record the chosen node in the allocation.
func (d *Device) BindingConditions(conditions, failureConditions []string, bindsToNode bool) *Device {
	d.bindingConditions = slices.Clone(conditions)
	d.bindingFailureConditions = slices.Clone(failureConditions)
	d.bindsToNode = bindsToNode
	return d
}

// Clone returns a deep copy of d.
func (d *Device) Clone() *Device {
	if d == nil {
		return nil
	}
	c := *d
	c.attributes = maps.Clone(d.attributes)
	if d.capacities != nil {
		c.capacities = make(map[string]capacity, len(d.capacities))
		for k, v := range d.capacities {
			nv := capacity{value: v.value.DeepCopy()}
			if v.policy != nil {
				nv.policy = v.policy.clone()
			}
			c.capacities[k] = nv
		}
	}
	if d.consumes != nil {
		c.consumes = make(map[string]map[string]resource.Quantity, len(d.consumes))
		for k, v := range d.consumes {
			m := make(map[string]resource.Quantity, len(v))
			for ck, cv := range v {
				m[ck] = cv.DeepCopy()
			}
			c.consumes[k] = m
		}
	}
	c.consumesOrder = slices.Clone(d.consumesOrder)
	c.taints = make([]Taint, len(d.taints))
	for i, t := range d.taints {
		c.taints[i] = t.clone()
	}
	if d.taints == nil {
		c.taints = nil
	}
	c.bindingConditions = slices.Clone(d.bindingConditions)
	c.bindingFailureConditions = slices.Clone(d.bindingFailureConditions)
	return &c
}

// RequestPolicy says how much of a consumable capacity one allocation
// takes. Set Default, and at most one of ValidValues or a range
// (Min, Max, Step). With ValidValues, Default must be one of them and the
// values are ascending (at most 10). With a range, Min is required, Default
// lies within it, and Max and Default are Min plus a multiple of Step. No
// value may exceed the capacity.
type RequestPolicy struct {
	// Default is what a claim that states no amount gets. Required when
	// ValidValues or Min is set.
	Default *resource.Quantity
	// ValidValues lists the amounts a claim may request, ascending.
	ValidValues []resource.Quantity
	// Min is the smallest amount; setting it selects the range form.
	Min *resource.Quantity
	// Max is the largest amount; nil means the capacity.
	Max *resource.Quantity
	// Step is the granularity above Min; nil means any amount.
	Step *resource.Quantity
}

func (p *RequestPolicy) clone() *RequestPolicy {
	c := &RequestPolicy{}
	cp := func(q *resource.Quantity) *resource.Quantity {
		if q == nil {
			return nil
		}
		v := q.DeepCopy()
		return &v
	}
	c.Default, c.Min, c.Max, c.Step = cp(p.Default), cp(p.Min), cp(p.Max), cp(p.Step)
	if p.ValidValues != nil {
		c.ValidValues = make([]resource.Quantity, len(p.ValidValues))
		for i, v := range p.ValidValues {
			c.ValidValues[i] = v.DeepCopy()
		}
	}
	return c
}

// TaintEffect is what a taint does to pods and claims that do not tolerate it.
type TaintEffect string

const (
	// NoSchedule: no new allocations of the device.
	NoSchedule TaintEffect = "NoSchedule"
	// NoExecute: no new allocations, and pods using the device are evicted.
	NoExecute TaintEffect = "NoExecute"
	// NoEffect: informational only (API value "None").
	NoEffect TaintEffect = "None"
)

// Taint marks a device so that claims which do not tolerate it do not get
// it. Key is a label key (optional "prefix/" DNS subdomain, then a name of
// at most 63 characters), Value is empty or a label value, Effect is one of
// the constants above.
type Taint struct {
	Key    string
	Value  string
	Effect TaintEffect
	// TimeAdded is when the taint was added; nil lets the API server set
	// it. It is rounded to seconds when published.
	TimeAdded *time.Time
}

func (t Taint) clone() Taint {
	if t.TimeAdded != nil {
		v := *t.TimeAdded
		t.TimeAdded = &v
	}
	return t
}

// String implements [fmt.Stringer]: the device's name followed by its
// attributes and capacities in name order, e.g.
// `gpu-0{driverVersion=v580.65.6 index=0 model="h100" memory=80Gi}`.
// It is meant for logs and test failures, not for parsing.
func (d *Device) String() string {
	if d == nil {
		return "<nil>"
	}
	var b strings.Builder
	b.WriteString(d.name)
	b.WriteByte('{')
	sep := ""
	for _, name := range slices.Sorted(maps.Keys(d.attributes)) {
		a := d.attributes[name]
		b.WriteString(sep)
		sep = " "
		switch a.kind {
		case kindString:
			fmt.Fprintf(&b, "%s=%q", name, a.str)
		case kindInt:
			fmt.Fprintf(&b, "%s=%d", name, a.integer)
		case kindBool:
			fmt.Fprintf(&b, "%s=%t", name, a.boolean)
		case kindVersion:
			fmt.Fprintf(&b, "%s=v%s", name, a.str)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.capacities)) {
		b.WriteString(sep)
		sep = " "
		q := d.capacities[name].value
		fmt.Fprintf(&b, "%s=%s", name, q.String())
	}
	b.WriteByte('}')
	return b.String()
}
