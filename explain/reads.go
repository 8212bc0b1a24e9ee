package explain

import (
	"slices"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	resourceapi "k8s.io/api/resource/v1"
)

// reads is what a CEL selector reads of a device: the driver, the
// allowMultipleAllocations flag and the attributes and capacities it
// names as device.attributes["DOMAIN"].NAME (or ["NAME"]). all is true
// when the expression uses the device in any other way (a whole
// attributes map, a comprehension over it): then everything counts.
type reads struct {
	all  bool
	refs []string // "a DOMAIN/NAME", "c DOMAIN/NAME", "driver", "multi"; sorted
}

// readsOf finds what expr reads. An expression that does not parse reads
// everything.
func (e *engine) readsOf(expr string) reads {
	if r, ok := e.reads.Load(expr); ok {
		return r.(reads)
	}
	r := reads{all: true}
	compiled := e.cel.GetOrCompile(expr)
	if compiled.Error == nil && compiled.Environment != nil {
		if ast, iss := compiled.Environment.Parse(expr); iss.Err() == nil {
			refs := map[string]bool{}
			if walkReads(ast.NativeRep().Expr(), refs) {
				r = reads{refs: make([]string, 0, len(refs))}
				for k := range refs {
					r.refs = append(r.refs, k)
				}
				slices.Sort(r.refs)
			}
		}
	}
	e.reads.Store(expr, r)
	return r
}

// walkReads records in refs what x reads of the device; it returns false
// when x uses the device in a way it does not follow.
func walkReads(x celast.Expr, refs map[string]bool) bool {
	if ref, ok := deviceRead(x); ok {
		refs[ref] = true
		return true
	}
	switch x.Kind() {
	case celast.IdentKind:
		return x.AsIdent() != "device"
	case celast.SelectKind:
		return walkReads(x.AsSelect().Operand(), refs)
	case celast.CallKind:
		c := x.AsCall()
		if c.IsMemberFunction() && !walkReads(c.Target(), refs) {
			return false
		}
		for _, a := range c.Args() {
			if !walkReads(a, refs) {
				return false
			}
		}
		return true
	case celast.ListKind:
		for _, el := range x.AsList().Elements() {
			if !walkReads(el, refs) {
				return false
			}
		}
		return true
	case celast.MapKind:
		for _, en := range x.AsMap().Entries() {
			m := en.AsMapEntry()
			if !walkReads(m.Key(), refs) || !walkReads(m.Value(), refs) {
				return false
			}
		}
		return true
	case celast.StructKind:
		for _, f := range x.AsStruct().Fields() {
			if !walkReads(f.AsStructField().Value(), refs) {
				return false
			}
		}
		return true
	case celast.ComprehensionKind:
		c := x.AsComprehension()
		if c.IterVar() == "device" || c.AccuVar() == "device" || (c.HasIterVar2() && c.IterVar2() == "device") {
			return false
		}
		for _, sub := range []celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			if !walkReads(sub, refs) {
				return false
			}
		}
		return true
	}
	return true // literals, unspecified
}

// deviceRead matches device.driver, device.allowMultipleAllocations,
// device.attributes["D"].N, device.attributes["D"]["N"] and the same for
// capacity (also under has()).
func deviceRead(x celast.Expr) (string, bool) {
	if x.Kind() == celast.SelectKind {
		s := x.AsSelect()
		if isIdent(s.Operand(), "device") {
			switch s.FieldName() {
			case "driver":
				return "driver", true
			case "allowMultipleAllocations":
				return "multi", true
			}
			return "", false
		}
		if kind, domain, ok := domainMap(s.Operand()); ok {
			return kind + " " + domain + "/" + s.FieldName(), true
		}
		return "", false
	}
	if x.Kind() == celast.CallKind && x.AsCall().FunctionName() == operators.Index && len(x.AsCall().Args()) == 2 {
		args := x.AsCall().Args()
		if kind, domain, ok := domainMap(args[0]); ok {
			if name, ok := stringLiteral(args[1]); ok {
				return kind + " " + domain + "/" + name, true
			}
		}
	}
	return "", false
}

// domainMap matches device.attributes["D"] or device.capacity["D"].
func domainMap(x celast.Expr) (kind, domain string, ok bool) {
	if x.Kind() != celast.CallKind || x.AsCall().FunctionName() != operators.Index || len(x.AsCall().Args()) != 2 {
		return "", "", false
	}
	args := x.AsCall().Args()
	if args[0].Kind() != celast.SelectKind || !isIdent(args[0].AsSelect().Operand(), "device") {
		return "", "", false
	}
	switch args[0].AsSelect().FieldName() {
	case "attributes":
		kind = "a"
	case "capacity":
		kind = "c"
	default:
		return "", "", false
	}
	domain, ok = stringLiteral(args[1])
	return kind, domain, ok
}

func isIdent(x celast.Expr, name string) bool {
	return x.Kind() == celast.IdentKind && x.AsIdent() == name
}

func stringLiteral(x celast.Expr) (string, bool) {
	if x.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := x.AsLiteral().(types.String)
	return string(s), ok
}

// projectedKey is the text of what r reads of d: devices with equal keys
// get equal results from an expression with reads r. Missing attributes
// are part of the key (CEL fails on them).
func projectedKey(r reads, d *devInfo) string {
	if r.all {
		if d.key == "" {
			d.key = celKeyOf(d.id.Driver.String(), d.dev)
		}
		return d.key
	}
	b := make([]byte, 0, 64)
	b = append(b, d.id.Driver.String()...)
	for _, ref := range r.refs {
		b = append(b, 0)
		b = append(b, ref...)
		b = append(b, '=')
		switch {
		case ref == "driver":
		case ref == "multi":
			if d.dev.AllowMultipleAllocations != nil && *d.dev.AllowMultipleAllocations {
				b = append(b, 't')
			}
		case strings.HasPrefix(ref, "a "):
			domain, id, _ := strings.Cut(ref[2:], "/")
			if a, ok := lookupAttribute(*d, domain, id); ok {
				b = appendAttributeKey(b, a)
			} else {
				b = append(b, '-')
			}
		case strings.HasPrefix(ref, "c "):
			domain, id, _ := strings.Cut(ref[2:], "/")
			c, ok := d.dev.Capacity[resourceapi.QualifiedName(domain+"/"+id)]
			if !ok && domain == d.id.Driver.String() {
				c, ok = d.dev.Capacity[resourceapi.QualifiedName(id)]
			}
			if ok {
				b = append(b, c.Value.String()...)
			} else {
				b = append(b, '-')
			}
		}
	}
	return string(b)
}
