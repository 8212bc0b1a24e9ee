package explain

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/parser"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// eval returns, per device of the node, whether the CEL expression is
// true for it, evaluated by the DRA CEL library as the allocator does. A
// device for which evaluation fails does not match; the error is kept.
//
// The result depends only on what the expression reads of a device (see
// readsOf), so devices that look the same to it, such as the MIG devices
// of one profile and placement on many nodes, share one evaluation even
// when other attributes (a UUID) differ.
func (n *nodeCtx) eval(expr string) []bool {
	if r, ok := n.match[expr]; ok {
		return r
	}
	res := make([]bool, len(n.devices))
	errs := make([]string, len(n.devices))
	compiled := n.cel.GetOrCompile(expr)
	r := n.readsOf(expr)
	for i := range n.devices {
		d := &n.devices[i]
		if compiled.Error != nil {
			errs[i] = compiled.Error.Error()
			continue
		}
		k := celKey{expr: expr, device: projectedKey(r, d)}
		if v, ok := n.celMemo.Load(k); ok {
			r := v.(celResult)
			res[i], errs[i] = r.ok, r.err
			continue
		}
		ok, _, err := compiled.DeviceMatches(n.ctx, cel.Device{
			Driver: d.id.Driver.String(), AllowMultipleAllocations: d.dev.AllowMultipleAllocations,
			Attributes: d.dev.Attributes, Capacity: d.dev.Capacity,
		})
		if err != nil {
			errs[i] = cel.EnhanceRuntimeError(err).Error()
		} else {
			res[i] = ok
		}
		if n.ctx.Err() == nil {
			n.celMemo.Store(k, celResult{ok: res[i], err: errs[i]})
		}
	}
	n.match[expr], n.errs[expr] = res, errs
	return res
}

type celKey struct{ expr, device string }

type celResult struct {
	ok  bool
	err string
}

// celKeyOf is a canonical text of what CEL sees of a device: equal keys
// mean equal selector results.
func celKeyOf(driver string, d *resourceapi.Device) string {
	b := make([]byte, 0, 256)
	b = append(b, driver...)
	if d.AllowMultipleAllocations != nil {
		b = append(b, "\x00multi="...)
		b = strconv.AppendBool(b, *d.AllowMultipleAllocations)
	}
	var buf [resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice]string
	names := buf[:0]
	for name := range d.Attributes {
		names = append(names, string(name))
	}
	slices.Sort(names)
	for _, name := range names {
		b = append(b, "\x00a:"...)
		b = append(b, name...)
		b = append(b, '=')
		b = appendAttributeKey(b, d.Attributes[resourceapi.QualifiedName(name)])
	}
	names = buf[:0]
	for name := range d.Capacity {
		names = append(names, string(name))
	}
	slices.Sort(names)
	for _, name := range names {
		c := d.Capacity[resourceapi.QualifiedName(name)]
		b = append(b, "\x00c:"...)
		b = append(b, name...)
		b = append(b, '=')
		b = append(b, c.Value.String()...)
	}
	return string(b)
}

// appendAttributeKey appends an attribute's type and value unambiguously.
func appendAttributeKey(b []byte, a resourceapi.DeviceAttribute) []byte {
	switch {
	case a.IntValue != nil:
		return strconv.AppendInt(append(b, 'i'), *a.IntValue, 10)
	case a.BoolValue != nil:
		return strconv.AppendBool(append(b, 'b'), *a.BoolValue)
	case a.StringValue != nil:
		return strconv.AppendQuote(append(b, 's'), *a.StringValue)
	case a.VersionValue != nil:
		return strconv.AppendQuote(append(b, 'v'), *a.VersionValue)
	default:
		return fmt.Appendf(append(b, 'l'), "%q%v%v%q", a.StringValues, a.IntValues, a.BoolValues, a.VersionValues)
	}
}

// filterOrFail is filter that also keeps devices for which a selector
// fails to evaluate.
func (n *nodeCtx) filterOrFail(idx []int, selectors []resourceapi.DeviceSelector) []int {
	out := idx
	for _, s := range selectors {
		if s.CEL == nil {
			continue
		}
		r, errs := n.eval(s.CEL.Expression), n.errs[s.CEL.Expression]
		next := make([]int, 0, len(out))
		for _, i := range out {
			if r[i] || errs[i] != "" {
				next = append(next, i)
			}
		}
		out = next
	}
	return out
}

// everyDevice returns the indices of all of the node's devices.
func (n *nodeCtx) everyDevice() []int {
	all := make([]int, len(n.devices))
	for i := range all {
		all[i] = i
	}
	return all
}

// filter returns the devices among idx for which every selector is true.
func (n *nodeCtx) filter(idx []int, selectors []resourceapi.DeviceSelector) []int {
	out := idx
	for _, s := range selectors {
		if s.CEL == nil {
			continue
		}
		r := n.eval(s.CEL.Expression)
		next := make([]int, 0, len(out))
		for _, i := range out {
			if r[i] {
				next = append(next, i)
			}
		}
		out = next
	}
	return out
}

// termsOf splits a CEL expression at its top-level && into terms, so that
// an explanation can say which part is false. An expression that does not
// parse is one term.
func (e *engine) termsOf(expr string) []string {
	if t, ok := e.terms.Load(expr); ok {
		return t.([]string)
	}
	terms := []string{expr}
	compiled := e.cel.GetOrCompile(expr)
	if compiled.Error == nil && compiled.Environment != nil {
		if ast, iss := compiled.Environment.Parse(expr); iss.Err() == nil {
			native := ast.NativeRep()
			var split []string
			var walk func(x celast.Expr) bool
			walk = func(x celast.Expr) bool {
				if x.Kind() == celast.CallKind && x.AsCall().FunctionName() == operators.LogicalAnd {
					for _, arg := range x.AsCall().Args() {
						if !walk(arg) {
							return false
						}
					}
					return true
				}
				s, err := parser.Unparse(x, native.SourceInfo())
				if err != nil {
					return false
				}
				split = append(split, s)
				return true
			}
			if walk(native.Expr()) && len(split) > 0 {
				terms = split
			}
		}
	}
	e.terms.Store(expr, terms)
	return terms
}

// selectorReport evaluates every term of the selectors on the devices idx
// and reports the devices with the most true terms.
func (n *nodeCtx) selectorReport(source string, selectors []resourceapi.DeviceSelector, idx []int) *SelectorReport {
	rep := &SelectorReport{Source: source, Devices: len(idx)}
	var terms []string
	for _, s := range selectors {
		if s.CEL == nil {
			continue
		}
		rep.Expressions = append(rep.Expressions, s.CEL.Expression)
		terms = append(terms, n.termsOf(s.CEL.Expression)...)
	}
	type scored struct {
		i    int
		true int
	}
	all := make([]scored, 0, len(idx))
	for _, i := range idx {
		s := scored{i: i}
		for _, t := range terms {
			if n.eval(t)[i] {
				s.true++
			}
		}
		all = append(all, s)
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].true > all[b].true })
	for _, s := range all[:min(n.o.closest, len(all))] {
		d := n.devices[s.i]
		m := DeviceMismatch{Device: d.id.String(), True: s.true}
		for _, t := range terms {
			if n.eval(t)[s.i] {
				continue
			}
			m.False = append(m.False, TermResult{Term: t, Error: n.errs[t][s.i], Values: valuesRead(t, d)})
		}
		rep.Closest = append(rep.Closest, m)
	}
	return rep
}

var (
	reAttr     = regexp.MustCompile(`device\.(attributes|capacity)\["([^"]+)"\](?:\.([A-Za-z_][A-Za-z0-9_]*)|\["([^"]+)"\])`)
	reDriver   = regexp.MustCompile(`device\.driver\b`)
	missingVal = "<missing>"
)

// valuesRead returns the device's values of the attributes and capacities
// a term reads (found by their device.attributes["domain"].name form).
func valuesRead(term string, d devInfo) map[string]string {
	out := map[string]string{}
	if reDriver.MatchString(term) {
		out["driver"] = d.id.Driver.String()
	}
	for _, m := range reAttr.FindAllStringSubmatch(term, -1) {
		domain, id := m[2], m[3]
		if id == "" {
			id = m[4]
		}
		key := domain + "/" + id
		if m[1] == "attributes" {
			if a, ok := lookupAttribute(d, domain, id); ok {
				out[key] = formatAttribute(a)
			} else {
				out[key] = missingVal
			}
			continue
		}
		c, ok := d.dev.Capacity[resourceapi.QualifiedName(key)]
		if !ok && domain == d.id.Driver.String() {
			c, ok = d.dev.Capacity[resourceapi.QualifiedName(id)]
		}
		if ok {
			out["capacity "+key] = c.Value.String()
		} else {
			out["capacity "+key] = missingVal
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// lookupAttribute finds attribute domain/id of a device; attributes of
// the driver's own domain may be stored without it.
func lookupAttribute(d devInfo, domain, id string) (resourceapi.DeviceAttribute, bool) {
	if a, ok := d.dev.Attributes[resourceapi.QualifiedName(domain+"/"+id)]; ok {
		return a, true
	}
	if domain == d.id.Driver.String() {
		a, ok := d.dev.Attributes[resourceapi.QualifiedName(id)]
		return a, ok
	}
	return resourceapi.DeviceAttribute{}, false
}

// lookupQualified finds an attribute by its fully qualified name.
func lookupQualified(d devInfo, name resourceapi.FullyQualifiedName) (resourceapi.DeviceAttribute, bool) {
	domain, id, ok := strings.Cut(string(name), "/")
	if !ok {
		return resourceapi.DeviceAttribute{}, false
	}
	return lookupAttribute(d, domain, id)
}

func formatAttribute(a resourceapi.DeviceAttribute) string {
	switch {
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.StringValue != nil:
		return fmt.Sprintf("%q", *a.StringValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.IntValues != nil:
		return fmt.Sprint(a.IntValues)
	case a.BoolValues != nil:
		return fmt.Sprint(a.BoolValues)
	case a.StringValues != nil:
		return fmt.Sprintf("%q", a.StringValues)
	case a.VersionValues != nil:
		return fmt.Sprint(a.VersionValues)
	}
	return "<empty>"
}

// why returns ": TERM is false (DEVICE has VALUES)" for the closest
// device's first false term, or "".
func (r *SelectorReport) why() string {
	if len(r.Closest) == 0 || len(r.Closest[0].False) == 0 {
		return ""
	}
	d, t := r.Closest[0], r.Closest[0].False[0]
	s := fmt.Sprintf(": %s is false", t.Term)
	if t.Error != "" {
		s = fmt.Sprintf(": %s fails (%s)", t.Term, t.Error)
	}
	if len(t.Values) > 0 {
		s += fmt.Sprintf(" (closest device %s has %s)", d.Device, formatValues(t.Values))
	}
	return s
}
