package device

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/inf.v0"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits of the API that have no exported constant in k8s.io/api.
const (
	maxDriverName         = resourceapi.DriverNameMaxLength
	maxIDLength           = resourceapi.DeviceMaxIDLength
	maxTaints             = resourceapi.DeviceTaintsMaxLength
	maxConsumedSets       = resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice
	maxConsumedCounters   = resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption
	maxBindingConditions  = resourceapi.BindingConditionsMaxSize
	maxRequestValidValues = 10 // CapacityRequestPolicyDiscreteMaxOptions in the API server.
)

// checker collects problems.
type checker struct {
	// v is the API server behaviour validated against.
	v        Validator
	problems []Problem
	slice    int
	// okNames caches qualified names and versions found valid: a few
	// distinct names repeat across thousands of devices.
	okNames map[string]bool
}

func (c *checker) add(scope Scope, errs ...*field.Error) {
	for _, e := range errs {
		p := Problem{Field: e.Field, Type: e.Type, Detail: e.Detail, Slice: c.slice, Scope: scope}
		if e.BadValue != nil && e.Type != field.ErrorTypeRequired && e.Type != field.ErrorTypeTooMany && e.Type != field.ErrorTypeTooLong {
			p.Value = fmt.Sprintf("%q", fmt.Sprint(e.BadValue))
		}
		c.problems = append(c.problems, p)
	}
}

func (c *checker) obj(errs ...*field.Error)  { c.add(ScopeObject, errs...) }
func (c *checker) pool(errs ...*field.Error) { c.add(ScopePool, errs...) }

func (c *checker) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: c.problems}
}

// ---- names ----

// isDNSLabel is a fast check for the common, valid case.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123LabelMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9':
		case ch == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

func (c *checker) dnsLabel(s string, p *field.Path) {
	if isDNSLabel(s) {
		return
	}
	if s == "" {
		c.obj(field.Required(p, ""))
		return
	}
	for _, msg := range validation.IsDNS1123Label(s) {
		c.obj(field.Invalid(p, s, msg))
	}
}

func (c *checker) dnsSubdomain(s string, p *field.Path) {
	for _, msg := range validation.IsDNS1123Subdomain(s) {
		c.obj(field.Invalid(p, s, msg))
	}
}

// driverName checks a driver name or the domain of a qualified name: at
// most 63 characters, a DNS subdomain once lower-cased (the API server
// accepts upper case here).
func (c *checker) driverName(s string, p *field.Path) {
	if s == "" {
		c.obj(field.Required(p, ""))
		return
	}
	if len(s) > maxDriverName {
		c.obj(field.TooLong(p, s, maxDriverName))
	}
	for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(s)) {
		c.obj(field.Invalid(p, s, msg))
	}
}

func (c *checker) poolName(s string, p *field.Path) {
	if s == "" {
		c.obj(field.Required(p, ""))
		return
	}
	if len(s) > resourceapi.PoolNameMaxLength {
		c.obj(field.TooLong(p, s, resourceapi.PoolNameMaxLength))
	}
	for _, part := range strings.Split(s, "/") {
		c.dnsSubdomain(part, p)
	}
}

func (c *checker) cIdentifier(s string, p *field.Path) {
	if len(s) > maxIDLength {
		c.obj(field.TooLong(p, s, maxIDLength))
	}
	for _, msg := range content.IsCIdentifier(s) {
		c.obj(field.Invalid(p, s, msg))
	}
}

// qualifiedName checks an attribute or capacity name. Like the API
// server, it does not reject more than one '/' ("a/b/c"); such a name is
// reported as unusable ([ScopePool]) because no CEL expression can reach
// it.
func (c *checker) qualifiedName(name string, p *field.Path) {
	if c.okNames[name] {
		return
	}
	before := len(c.problems)
	defer func() {
		if len(c.problems) == before {
			if c.okNames == nil {
				c.okNames = make(map[string]bool)
			}
			c.okNames[name] = true
		}
	}()
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 1:
		c.cIdentifier(parts[0], p)
	case 2:
		if parts[0] == "" {
			c.obj(field.Invalid(p, "", "the domain must not be empty"))
		} else {
			c.driverName(parts[0], p)
		}
		if parts[1] == "" {
			c.obj(field.Invalid(p, "", "the name must not be empty"))
		} else {
			c.cIdentifier(parts[1], p)
		}
	default:
		c.pool(field.Invalid(p, name, "a qualified name has at most one '/'; the API server stores this name but device selectors cannot use it"))
	}
}

func (c *checker) labelKey(s string, p *field.Path) {
	c.obj(metav1validation.ValidateLabelName(s, p)...)
}

func (c *checker) labelValue(s string, p *field.Path) {
	for _, msg := range validation.IsValidLabelValue(s) {
		c.obj(field.Invalid(p, s, msg))
	}
}

func (c *checker) nodeName(s string, p *field.Path) {
	for _, msg := range validation.IsDNS1123Subdomain(s) {
		c.obj(field.Invalid(p, s, msg))
	}
}

// ---- node selection ----

func (c *checker) nodeSelector(ns *corev1.NodeSelector, p *field.Path) {
	tp := p.Child("nodeSelectorTerms")
	if len(ns.NodeSelectorTerms) == 0 {
		c.obj(field.Required(tp, "must have at least one node selector term"))
	}
	for i, term := range ns.NodeSelectorTerms {
		ip := tp.Index(i)
		for j, rq := range term.MatchExpressions {
			rp := ip.Child("matchExpressions").Index(j)
			switch rq.Operator {
			case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
				if len(rq.Values) == 0 {
					c.obj(field.Required(rp.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
				}
			case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
				if len(rq.Values) > 0 {
					c.obj(field.Forbidden(rp.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
				}
			case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
				if len(rq.Values) != 1 {
					c.obj(field.Required(rp.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
				}
			default:
				c.obj(field.Invalid(rp.Child("operator"), rq.Operator, "not a valid selector operator"))
			}
			c.labelKey(rq.Key, rp.Child("key"))
			for k, v := range rq.Values {
				c.labelValue(v, rp.Child("values").Index(k))
			}
		}
		for j, rq := range term.MatchFields {
			rp := ip.Child("matchFields").Index(j)
			switch rq.Operator {
			case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
				if len(rq.Values) != 1 {
					c.obj(field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
				}
			default:
				c.obj(field.Invalid(rp.Child("operator"), rq.Operator, "not a valid selector operator"))
			}
			if rq.Key != "metadata.name" {
				c.obj(field.Invalid(rp.Child("key"), rq.Key, "not a valid field selector key"))
			} else {
				for k, v := range rq.Values {
					c.nodeName(v, rp.Child("values").Index(k))
				}
			}
		}
	}
}

// ---- counters ----

func (c *checker) counterSet(cs resourceapi.CounterSet, p *field.Path) {
	c.dnsLabel(cs.Name, p.Child("name"))
	cp := p.Child("counters")
	if len(cs.Counters) == 0 {
		c.obj(field.Required(cp, ""))
		return
	}
	if len(cs.Counters) > MaxCountersPerSet {
		c.obj(field.TooMany(cp, len(cs.Counters), MaxCountersPerSet))
		return
	}
	for _, name := range sortedKeys(cs.Counters) {
		c.dnsLabel(name, cp)
	}
}

// ---- devices ----

var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

// attributeOK is a fast check for the common, valid case.
func (c *checker) attributeOK(a *resourceapi.DeviceAttribute) bool {
	if a.BoolValues != nil || a.IntValues != nil || a.StringValues != nil || a.VersionValues != nil {
		return false
	}
	n := 0
	if a.BoolValue != nil {
		n++
	}
	if a.IntValue != nil {
		n++
	}
	if a.StringValue != nil {
		n++
		if len(*a.StringValue) > MaxStringLength {
			return false
		}
	}
	if a.VersionValue != nil {
		n++
		v := *a.VersionValue
		if !c.okNames["\x00v"+v] {
			if len(v) > MaxStringLength || !semverRE.MatchString(v) {
				return false
			}
			if c.okNames == nil {
				c.okNames = make(map[string]bool)
			}
			c.okNames["\x00v"+v] = true
		}
	}
	return n == 1
}

func (c *checker) attribute(a resourceapi.DeviceAttribute, p *field.Path) {
	n := 0
	if a.BoolValue != nil {
		n++
	}
	if a.IntValue != nil {
		n++
	}
	if a.StringValue != nil {
		n++
		if len(*a.StringValue) > MaxStringLength {
			c.obj(field.TooLong(p.Child("string"), *a.StringValue, MaxStringLength))
		}
	}
	if a.VersionValue != nil {
		n++
		if !semverRE.MatchString(*a.VersionValue) {
			c.obj(field.Invalid(p.Child("version"), *a.VersionValue, "must be a string compatible with semver.org spec 2.0.0"))
		}
		if len(*a.VersionValue) > MaxStringLength {
			c.obj(field.TooLong(p.Child("version"), *a.VersionValue, MaxStringLength))
		}
	}
	if a.BoolValues != nil || a.IntValues != nil || a.StringValues != nil || a.VersionValues != nil {
		// List attributes are an alpha feature (DRAListTypeAttributes)
		// that is off by default: the API server drops the list before
		// it validates, so they count as absent here.
		c.pool(field.Forbidden(p, "list attributes need the DRAListTypeAttributes feature, which is off by default; the API server drops them"))
	}
	if n != 1 {
		c.obj(field.Invalid(p, "", "exactly one value must be specified"))
	}
}

func (c *checker) device(d *resourceapi.Device, p *field.Path, driver string, perDeviceNodeSelection bool) {
	// The guards below skip building field paths for empty parts: this
	// runs for every device of every slice.
	if !isDNSLabel(d.Name) {
		c.dnsLabel(d.Name, p.Child("name"))
	}
	if n := len(d.Attributes) + len(d.Capacity); n > MaxAttributesAndCapacities {
		c.obj(field.Invalid(p, n, fmt.Sprintf("the total number of attributes and capacities must not exceed %d", MaxAttributesAndCapacities)))
	}
	// Map order is random: problems of this device are sorted at the end.
	start := len(c.problems)
	defer func() {
		if len(c.problems)-start > 1 {
			slices.SortStableFunc(c.problems[start:], func(a, b Problem) int {
				return cmp.Or(cmp.Compare(a.Field, b.Field), cmp.Compare(a.Value, b.Value), cmp.Compare(a.Detail, b.Detail))
			})
		}
	}()
	var ap *field.Path
	if len(d.Attributes) > 0 {
		ap = p.Child("attributes")
	}
	for name, a := range d.Attributes {
		c.qualifiedName(string(name), ap)
		if !c.attributeOK(&a) {
			c.attribute(a, ap.Key(string(name)))
		}
	}
	multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	var cp *field.Path
	if len(d.Capacity) > 0 {
		cp = p.Child("capacity")
	}
	for name := range d.Capacity {
		c.qualifiedName(string(name), cp)
		capa := d.Capacity[name]
		if capa.RequestPolicy == nil {
			continue
		}
		rp := cp.Key(string(name)).Child("requestPolicy")
		if !multi {
			c.obj(field.Forbidden(rp, "allowMultipleAllocations must be true"))
			continue
		}
		c.requestPolicy(capa.Value, capa.RequestPolicy, rp)
	}
	c.ambiguousNames(d, p, driver)

	if len(d.Taints) == 0 {
		// Nothing to check.
	} else if tp := p.Child("taints"); len(d.Taints) > maxTaints {
		c.obj(field.TooMany(tp, len(d.Taints), maxTaints))
	} else {
		for i, t := range d.Taints {
			ip := tp.Index(i)
			c.labelKey(t.Key, ip.Child("key"))
			if t.Value != "" {
				c.labelValue(t.Value, ip.Child("value"))
			}
			switch t.Effect {
			case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone:
			case "":
				c.obj(field.Required(ip.Child("effect"), ""))
			default:
				c.obj(field.NotSupported(ip.Child("effect"), t.Effect, []string{"NoExecute", "NoSchedule", "None"}))
			}
		}
	}

	if len(d.ConsumesCounters) == 0 {
		// Nothing to check.
	} else if ccp := p.Child("consumesCounters"); len(d.ConsumesCounters) > maxConsumedSets {
		c.obj(field.TooMany(ccp, len(d.ConsumesCounters), maxConsumedSets))
	} else {
		seen := make(map[string]bool, len(d.ConsumesCounters))
		for i, cc := range d.ConsumesCounters {
			ip := ccp.Index(i)
			c.dnsLabel(cc.CounterSet, ip.Child("counterSet"))
			if len(cc.Counters) == 0 {
				c.obj(field.Required(ip.Child("counters"), ""))
			} else if len(cc.Counters) > maxConsumedCounters {
				c.obj(field.TooMany(ip.Child("counters"), len(cc.Counters), maxConsumedCounters))
			} else {
				for _, name := range sortedKeys(cc.Counters) {
					c.dnsLabel(name, ip.Child("counters"))
				}
			}
			if seen[cc.CounterSet] {
				c.obj(field.Duplicate(ip, cc.CounterSet))
			}
			seen[cc.CounterSet] = true
		}
	}

	if perDeviceNodeSelection {
		set := 0
		if d.NodeName != nil {
			if *d.NodeName == "" {
				c.obj(field.Invalid(p.Child("nodeName"), "", "must not be empty"))
			} else {
				set++
				c.nodeName(*d.NodeName, p.Child("nodeName"))
			}
		}
		if d.NodeSelector != nil {
			set++
			c.nodeSelector(d.NodeSelector, p.Child("nodeSelector"))
		}
		if d.AllNodes != nil {
			if *d.AllNodes {
				set++
			} else {
				c.obj(field.Invalid(p.Child("allNodes"), false, "must be either unset or set to true"))
			}
		}
		if set != 1 {
			c.obj(field.Invalid(p, set, "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec"))
		}
	} else if d.NodeName != nil || d.NodeSelector != nil || d.AllNodes != nil {
		c.obj(field.Invalid(p, "", "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec"))
	}

	if len(d.BindingConditions)+len(d.BindingFailureConditions) > 0 {
		c.bindingConditions(d.BindingConditions, d.BindingFailureConditions, p)
	}
	if len(d.NodeAllocatableResources) > 0 {
		c.pool(field.Forbidden(p.Child("nodeAllocatableResources"), "needs the DRANodeAllocatableResources feature, which is off by default; the API server drops it"))
	}
}

// ambiguousNames reports an attribute or capacity given both bare and in
// the driver's own domain: the API server stores both, but they name the
// same thing for the scheduler.
func (c *checker) ambiguousNames(d *resourceapi.Device, p *field.Path, driver string) {
	if driver == "" {
		return
	}
	prefix := driver + "/"
	for name := range d.Attributes {
		if bare, ok := strings.CutPrefix(string(name), prefix); ok {
			if _, dup := d.Attributes[resourceapi.QualifiedName(bare)]; dup {
				c.pool(field.Duplicate(p.Child("attributes").Key(string(name)), bare))
			}
		}
	}
	for name := range d.Capacity {
		if bare, ok := strings.CutPrefix(string(name), prefix); ok {
			if _, dup := d.Capacity[resourceapi.QualifiedName(bare)]; dup {
				c.pool(field.Duplicate(p.Child("capacity").Key(string(name)), bare))
			}
		}
	}
}

func (c *checker) bindingConditions(conds, failure []string, p *field.Path) {
	bp, fp := p.Child("bindingConditions"), p.Child("bindingFailureConditions")
	if len(conds) > maxBindingConditions {
		c.obj(field.TooMany(bp, len(conds), maxBindingConditions))
	} else {
		for i, s := range conds {
			c.labelKey(s, bp.Index(i))
		}
	}
	if len(failure) > maxBindingConditions {
		c.obj(field.TooMany(fp, len(failure), maxBindingConditions))
	} else {
		for i, s := range failure {
			c.labelKey(s, fp.Index(i))
		}
	}
	seen := make(map[string]bool, len(conds))
	for i, s := range conds {
		if seen[s] {
			c.obj(field.Duplicate(bp.Index(i), s))
		}
		seen[s] = true
	}
	seenF := make(map[string]bool, len(failure))
	for i, s := range failure {
		if seenF[s] {
			c.obj(field.Duplicate(fp.Index(i), s))
		}
		seenF[s] = true
		if seen[s] {
			c.obj(field.Invalid(fp.Index(i), s, "bindingFailureConditions must not overlap with bindingConditions"))
		}
	}
	if len(conds) == 0 && len(failure) > 0 {
		c.obj(field.Invalid(bp, "", "bindingConditions are required to use bindingFailureConditions"))
	}
	if len(failure) == 0 && len(conds) > 0 {
		c.obj(field.Invalid(fp, "", "bindingFailureConditions are required to use bindingConditions"))
	}
}

// ---- request policies ----

func (c *checker) requestPolicy(capacity resource.Quantity, rp *resourceapi.CapacityRequestPolicy, p *field.Path) {
	if len(rp.ValidValues) > 0 && rp.ValidRange != nil {
		c.obj(field.Forbidden(p, `exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time`))
		return
	}
	switch {
	case len(rp.ValidValues) > 0:
		if rp.Default == nil {
			c.obj(field.Required(p.Child("default"), "required when validValues is defined"))
			return
		}
		c.validValues(*rp.Default, capacity, rp.ValidValues, p.Child("validValues"))
	case rp.ValidRange != nil:
		if rp.Default == nil {
			c.obj(field.Required(p.Child("default"), "required when validRange is defined"))
			return
		}
		c.validRange(*rp.Default, capacity, *rp.ValidRange, p.Child("validRange"))
	}
}

func (c *checker) validValues(def, capacity resource.Quantity, values []resource.Quantity, p *field.Path) {
	for i := 0; i+1 < len(values); i++ {
		if values[i].Cmp(values[i+1]) > 0 {
			c.obj(field.Invalid(p.Index(i+1), values[i+1].String(), "values must be sorted in ascending order"))
		}
	}
	if len(values) > maxRequestValidValues {
		c.obj(field.TooMany(p, len(values), maxRequestValidValues))
	} else {
		found := false
		seen := make(map[string]bool, len(values))
		for i, v := range values {
			if v.Cmp(capacity) > 0 {
				c.obj(field.Invalid(p.Index(i), v.String(), "option is larger than capacity value: "+capacity.String()))
			}
			if v.Cmp(def) == 0 {
				found = true
			}
			key := strconv.FormatInt(v.Value(), 10)
			if c.v.FractionalCapacityRange {
				key = v.AsDec().String()
			}
			if seen[key] {
				c.obj(field.Duplicate(p.Index(i), v.String()))
			}
			seen[key] = true
		}
		if !found {
			c.obj(field.Invalid(p, def.String(), "default value is not valid according to the requestPolicy"))
		}
		return
	}
	// Too many: the server still checks the default.
	for _, v := range values {
		if v.Cmp(def) == 0 {
			return
		}
	}
	c.obj(field.Invalid(p, def.String(), "default value is not valid according to the requestPolicy"))
}

func isFractional(q resource.Quantity) bool {
	d := q.AsDec()
	var r inf.Dec
	r.Round(d, 0, inf.RoundDown)
	return d.Cmp(&r) != 0
}

func (c *checker) validRange(def, capacity resource.Quantity, r resourceapi.CapacityRequestPolicyRange, p *field.Path) {
	if r.Min == nil {
		c.obj(field.Required(p.Child("min"), "required when validRange is defined"))
		return
	}
	if r.Min.Cmp(capacity) > 0 {
		c.obj(field.Invalid(p.Child("min"), r.Min.String(), "min is larger than capacity value: "+capacity.String()))
	}
	if def.Cmp(*r.Min) < 0 {
		c.obj(field.Invalid(p.Child("default"), def.String(), "default is less than min: "+r.Min.String()))
	}
	if r.Max != nil {
		if r.Min.Cmp(*r.Max) > 0 {
			c.obj(field.Invalid(p.Child("max"), r.Min.String(), "min is larger than max: "+r.Max.String()))
		}
		if r.Max.Cmp(capacity) > 0 {
			c.obj(field.Invalid(p.Child("max"), r.Max.String(), "max is larger than capacity value: "+capacity.String()))
		}
		if def.Cmp(*r.Max) > 0 {
			c.obj(field.Invalid(p.Child("default"), def.String(), "default is more than max: "+r.Max.String()))
		}
	}
	type named struct {
		q    *resource.Quantity
		name string
	}
	all := []named{{&def, "default"}, {r.Min, "min"}, {r.Max, "max"}, {r.Step, "step"}}
	useMilli := false
	if c.v.FractionalCapacityRange {
		useMilli = isFractional(def)
		for _, q := range []*resource.Quantity{r.Min, r.Max, r.Step} {
			if q != nil && isFractional(*q) {
				useMilli = true
			}
		}
		if useMilli {
			bad := false
			for _, n := range all {
				if n.q == nil {
					continue
				}
				m := resource.NewMilliQuantity(n.q.MilliValue(), n.q.Format)
				if n.q.Cmp(*m) != 0 {
					c.obj(field.Invalid(p.Child(n.name), n.q.String(), "value cannot be represented as a milli value"))
					bad = true
				}
			}
			if bad {
				return
			}
		}
	}
	if r.Step == nil {
		return
	}
	if r.Step.Sign() <= 0 {
		c.obj(field.Invalid(p.Child("step"), r.Step.String(), "must be greater than zero"))
		return
	}
	oneStep := r.Min.DeepCopy()
	oneStep.Add(*r.Step)
	if oneStep.Cmp(capacity) > 0 {
		c.obj(field.Invalid(p.Child("step"), r.Step.String(), fmt.Sprintf("one step %s is larger than capacity value: %s", oneStep.String(), capacity.String())))
	}
	if !useMilli {
		bad := false
		for _, n := range all {
			if n.q == nil {
				continue
			}
			if n.q.Sign() < 0 {
				c.obj(field.Invalid(p.Child(n.name), n.q.String(), "must be greater than or equal to 0"))
				bad = true
			} else if n.q.CmpInt64(math.MaxInt64) > 0 {
				c.obj(field.Invalid(p.Child(n.name), n.q.String(), "must not be larger than 9223372036854775807"))
				bad = true
			}
		}
		if bad {
			return
		}
	}
	val := func(q resource.Quantity) int64 {
		if useMilli {
			return q.MilliValue()
		}
		return q.Value()
	}
	step, minV := val(*r.Step), val(*r.Min)
	if step == 0 {
		return
	}
	if (val(def)-minV)%step != 0 {
		c.obj(field.Invalid(p.Child("step"), def.String(), fmt.Sprintf("value is not a multiple of a given step (%s) from (%s)", r.Step.String(), r.Min.String())))
	}
	if r.Max != nil && (val(*r.Max)-minV)%step != 0 {
		c.obj(field.Invalid(p.Child("step"), r.Max.String(), fmt.Sprintf("value is not a multiple of a given step (%s) from (%s)", r.Step.String(), r.Min.String())))
	}
}
