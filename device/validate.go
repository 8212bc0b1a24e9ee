package device

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Scope says who can see a problem.
type Scope string

const (
	// ScopeObject problems break the rules of one API object: the API
	// server rejects the object.
	ScopeObject Scope = "object"
	// ScopePool problems are ones the API server does not reject: they
	// span the slices of a pool (a duplicate device name in two slices, a
	// counter set that is consumed but not published), or make a device
	// unusable or different from what was sent (an attribute given both
	// bare and with the driver's domain, a name with two '/', a field of
	// a feature that is off by default and that the server drops). The
	// scheduler then refuses the pool or cannot select the device.
	ScopePool Scope = "pool"
)

// Problem is one broken rule.
type Problem struct {
	// Field is the path of the offending field, in the inventory
	// ("pools[0].devices[2].attributes[model].string") or in the slice
	// ("spec.devices[2].attributes[model].string").
	Field string
	// Type is the kind of rule broken, as the API server names it
	// (FieldValueRequired, FieldValueInvalid, FieldValueTooLong,
	// FieldValueTooMany, FieldValueDuplicate, FieldValueForbidden,
	// FieldValueNotSupported, FieldValueNotFound).
	Type field.ErrorType
	// Detail explains the rule.
	Detail string
	// Value is the offending value, printed; empty when not helpful.
	Value string
	// Slice is the index of the slice in the argument of [Validate]; -1
	// for inventory problems.
	Slice int
	// Scope is who can see the problem.
	Scope Scope
}

// String returns "field: type: detail".
func (p Problem) String() string {
	var b strings.Builder
	if p.Slice >= 0 {
		fmt.Fprintf(&b, "slice %d: ", p.Slice)
	}
	b.WriteString(p.Field)
	b.WriteString(": ")
	b.WriteString(p.Type.String())
	if p.Value != "" {
		fmt.Fprintf(&b, " %s", p.Value)
	}
	if p.Detail != "" {
		b.WriteString(": ")
		b.WriteString(p.Detail)
	}
	return b.String()
}

// ValidationError lists every problem found. Callers branch on it with
// errors.As.
type ValidationError struct {
	Problems []Problem
}

// Error joins the problems, one per line after the first.
func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid devices: " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid devices: %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// ObjectProblems returns the problems of scope [ScopeObject].
func (e *ValidationError) ObjectProblems() []Problem {
	var out []Problem
	for _, p := range e.Problems {
		if p.Scope == ScopeObject {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks ResourceSlice objects against the rules of the
// resource.k8s.io/v1 API in Kubernetes 1.37 with its default feature gates
// (the rules the API server enforces, problems of [ScopeObject]), and the
// slices that share a driver and pool against each other ([ScopePool]).
// It returns nil or a *[ValidationError] with every problem, in a stable
// order. Metadata is checked for the name (or generateName) only. It is
// the zero [Validator]'s Validate.
func Validate(slices ...*resourceapi.ResourceSlice) error {
	return Validator{}.Validate(slices...)
}

// Validator validates ResourceSlices as an API server configured in a
// particular way does. The zero value is a kube-apiserver 1.37 with
// default flags.
type Validator struct {
	// FractionalCapacityRange is the DRAFractionalCapacityRange feature
	// of the API server: with it, a capacity's request policy range
	// (default, min, max, step) is checked in milli units, so that a
	// default of 1500m with min 1 and step 1 is refused; without it,
	// quantities are rounded up to integers first, and that default
	// passes. Its 1.37 default is on only at emulated version 1.37, and
	// an API server 1.37.2 with default flags runs at 1.36: off.
	FractionalCapacityRange bool
}

// Validate checks slices as [Validate] does, with v's API server
// behaviour.
func (v Validator) Validate(slices ...*resourceapi.ResourceSlice) error {
	c := &checker{v: v}
	for i, s := range slices {
		c.slice = i
		if s == nil {
			c.obj(field.Required(field.NewPath(""), "nil ResourceSlice"))
			continue
		}
		mp := field.NewPath("metadata")
		switch {
		case s.Name != "":
			c.dnsSubdomain(s.Name, mp.Child("name"))
		case s.GenerateName != "":
			// The server appends 5 characters, truncating the prefix
			// to 58; what remains must be a DNS subdomain.
			prefix := s.GenerateName
			if len(prefix) > validation.DNS1123SubdomainMaxLength-5 {
				prefix = prefix[:validation.DNS1123SubdomainMaxLength-5]
			}
			for _, msg := range validation.IsDNS1123Subdomain(prefix + "x") {
				c.obj(field.Invalid(mp.Child("generateName"), s.GenerateName, msg))
			}
		default:
			c.obj(field.Required(mp.Child("name"), "name or generateName is required"))
		}
		c.sliceSpec(&s.Spec, field.NewPath("spec"))
	}
	c.poolConsistency(slices)
	return c.err()
}

// Validate checks the inventory: every rule the API server applies to the
// slices it becomes, and the pool-wide rules (unique device and counter
// set names, consumed counters exist). It returns nil or a
// *[ValidationError] with paths into the inventory.
func (inv *Inventory) Validate() error {
	_, err := inv.convertChecked()
	return err
}
