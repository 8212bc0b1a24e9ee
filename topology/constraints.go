package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// ErrInvalidClaim is returned (wrapped) when a claim built by this package
// would be rejected by the API server; the message names the field.
var ErrInvalidClaim = errors.New("invalid claim")

// Request is one request of an aligned claim: Count devices of a
// DeviceClass, optionally narrowed by CEL selectors.
type Request struct {
	// Name is the request's name, a DNS label unique in the claim. A
	// constraint names the requests it aligns by this name.
	Name string
	// DeviceClassName is the DeviceClass to allocate from. It may be
	// empty in a spec that is completed later (conformance.Config's
	// ExtraClaims give such requests the suite's class); the API server
	// rejects a claim whose request names no class.
	DeviceClassName string
	// Count is how many devices; 0 means 1.
	Count int64
	// Selectors are CEL expressions each device must satisfy, e.g.
	// `device.attributes["gpu.example.com"].model == "H100"`.
	Selectors []string
}

// maxConstraintRequests is the API's limit on Requests in one constraint.
const maxConstraintRequests = 32

var cIdentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// SameAttribute returns a constraint that all devices allocated for the
// named requests (all requests of the claim when none are named) have the
// attribute attr, with one value: the vendor's own "same card" or "same
// NVLink domain", as SamePCIeRoot is for the standard PCIe root. attr
// must be fully qualified ("<domain>/<name>"); ClaimSpec checks it and
// the request names, as the API server would.
func SameAttribute(attr resourceapi.FullyQualifiedName, requests ...string) resourceapi.DeviceConstraint {
	a := attr
	return resourceapi.DeviceConstraint{Requests: append([]string(nil), requests...), MatchAttribute: &a}
}

// MatchAttribute is SameAttribute with the attribute name and the number
// of requests checked at once.
//
// Deprecated: use SameAttribute (no error; ClaimSpec checks the
// constraint). MatchAttribute will be removed in the next release.
func MatchAttribute(attr resourceapi.FullyQualifiedName, requests ...string) (resourceapi.DeviceConstraint, error) {
	if err := validateAttrName(attr); err != nil {
		return resourceapi.DeviceConstraint{}, fmt.Errorf("build matchAttribute constraint: %w", err)
	}
	if len(requests) > maxConstraintRequests {
		return resourceapi.DeviceConstraint{}, fmt.Errorf("build matchAttribute constraint: %w: requests: %d entries, at most %d", ErrInvalidClaim, len(requests), maxConstraintRequests)
	}
	a := attr
	return resourceapi.DeviceConstraint{Requests: append([]string(nil), requests...), MatchAttribute: &a}, nil
}

// SamePCIeRoot returns a constraint that the devices of the named requests
// (all requests when none are named) sit on one PCIe root complex, e.g. a
// GPU and the NIC next to it. Request names are checked by ClaimSpec.
func SamePCIeRoot(requests ...string) resourceapi.DeviceConstraint {
	a := PCIeRoot
	return resourceapi.DeviceConstraint{Requests: append([]string(nil), requests...), MatchAttribute: &a}
}

// SameNUMANode returns a constraint that the devices of the named requests
// (all requests when none are named) are on one NUMA node. Devices with no
// NUMA affinity have no numaNode attribute and never satisfy it. Request
// names are checked by ClaimSpec.
func SameNUMANode(requests ...string) resourceapi.DeviceConstraint {
	a := NUMANode
	return resourceapi.DeviceConstraint{Requests: append([]string(nil), requests...), MatchAttribute: &a}
}

// ClaimSpec builds a ResourceClaimSpec with one exactly-counted request per
// element of requests and the given constraints. It checks what the API
// server would check for these fields (names, counts, references from
// constraints to requests, attribute names), except that a request may
// name no DeviceClass (see [Request]), and returns an error wrapping
// ErrInvalidClaim that names the field at fault.
func ClaimSpec(requests []Request, constraints ...resourceapi.DeviceConstraint) (resourceapi.ResourceClaimSpec, error) {
	var spec resourceapi.ResourceClaimSpec
	if len(requests) == 0 {
		return spec, fmt.Errorf("build claim spec: %w: spec.devices.requests: at least one request is needed", ErrInvalidClaim)
	}
	if len(requests) > resourceapi.DeviceRequestsMaxSize {
		return spec, fmt.Errorf("build claim spec: %w: spec.devices.requests: %d entries, at most %d", ErrInvalidClaim, len(requests), resourceapi.DeviceRequestsMaxSize)
	}
	names := map[string]bool{}
	for i, r := range requests {
		field := fmt.Sprintf("spec.devices.requests[%d]", i)
		if errs := validation.IsDNS1123Label(r.Name); len(errs) > 0 {
			return spec, fmt.Errorf("build claim spec: %w: %s.name %q: %s", ErrInvalidClaim, field, r.Name, strings.Join(errs, "; "))
		}
		if names[r.Name] {
			return spec, fmt.Errorf("build claim spec: %w: %s.name %q: duplicate", ErrInvalidClaim, field, r.Name)
		}
		names[r.Name] = true
		if errs := validation.IsDNS1123Subdomain(r.DeviceClassName); r.DeviceClassName != "" && len(errs) > 0 {
			return spec, fmt.Errorf("build claim spec: %w: %s.exactly.deviceClassName %q: %s", ErrInvalidClaim, field, r.DeviceClassName, strings.Join(errs, "; "))
		}
		count := r.Count
		if count == 0 {
			count = 1
		}
		if count < 0 || count > resourceapi.AllocationResultsMaxSize {
			return spec, fmt.Errorf("build claim spec: %w: %s.exactly.count %d: must be 1..%d", ErrInvalidClaim, field, r.Count, resourceapi.AllocationResultsMaxSize)
		}
		req := resourceapi.DeviceRequest{
			Name: r.Name,
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: r.DeviceClassName,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           count,
			},
		}
		for j, sel := range r.Selectors {
			if strings.TrimSpace(sel) == "" {
				return spec, fmt.Errorf("build claim spec: %w: %s.exactly.selectors[%d]: empty CEL expression", ErrInvalidClaim, field, j)
			}
			req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: sel}})
		}
		spec.Devices.Requests = append(spec.Devices.Requests, req)
	}
	for i, c := range constraints {
		field := fmt.Sprintf("spec.devices.constraints[%d]", i)
		if c.MatchAttribute == nil {
			return spec, fmt.Errorf("build claim spec: %w: %s.matchAttribute: must be set", ErrInvalidClaim, field)
		}
		if err := validateAttrName(*c.MatchAttribute); err != nil {
			return spec, fmt.Errorf("build claim spec: %s: %w", field, err)
		}
		if len(c.Requests) > maxConstraintRequests {
			return spec, fmt.Errorf("build claim spec: %w: %s.requests: %d entries, at most %d", ErrInvalidClaim, field, len(c.Requests), maxConstraintRequests)
		}
		seen := map[string]bool{}
		for j, name := range c.Requests {
			main, _, _ := strings.Cut(name, "/")
			if !names[main] {
				return spec, fmt.Errorf("build claim spec: %w: %s.requests[%d] %q: no such request", ErrInvalidClaim, field, j, name)
			}
			if seen[name] {
				return spec, fmt.Errorf("build claim spec: %w: %s.requests[%d] %q: duplicate", ErrInvalidClaim, field, j, name)
			}
			seen[name] = true
		}
		spec.Devices.Constraints = append(spec.Devices.Constraints, *c.DeepCopy())
	}
	if len(spec.Devices.Constraints) > resourceapi.DeviceConstraintsMaxSize {
		return spec, fmt.Errorf("build claim spec: %w: spec.devices.constraints: %d entries, at most %d", ErrInvalidClaim, len(spec.Devices.Constraints), resourceapi.DeviceConstraintsMaxSize)
	}
	return spec, nil
}

// Claim wraps spec in a ResourceClaim with kind, apiVersion, namespace and
// name set, ready to create or to render with YAML.
func Claim(namespace, name string, spec resourceapi.ResourceClaimSpec) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       *spec.DeepCopy(),
	}
}

// ClaimTemplate wraps spec in a ResourceClaimTemplate (one claim per pod)
// with kind, apiVersion, namespace and name set.
func ClaimTemplate(namespace, name string, spec resourceapi.ResourceClaimSpec) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: *spec.DeepCopy()},
	}
}

// YAML renders obj (a claim, template, spec or constraint from this
// package) as YAML without empty metadata noise such as
// "creationTimestamp: null", suitable for kubectl apply.
func YAML(obj any) ([]byte, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("render YAML: %w", err)
	}
	var m any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("render YAML: %w", err)
	}
	prune(m)
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("render YAML: %w", err)
	}
	return out, nil
}

// prune drops null values and empty objects left by zero-valued structs
// (metadata.creationTimestamp, status: {}).
func prune(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		for k, c := range t {
			if prune(c) {
				delete(t, k)
			}
		}
		return len(t) == 0
	case []any:
		for _, c := range t {
			prune(c)
		}
	}
	return false
}

func validateAttrName(attr resourceapi.FullyQualifiedName) error {
	domain, name, ok := strings.Cut(string(attr), "/")
	if !ok || domain == "" {
		return fmt.Errorf("%w: matchAttribute %q: must be <domain>/<name>", ErrInvalidClaim, attr)
	}
	if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
		return fmt.Errorf("%w: matchAttribute %q: domain: %s", ErrInvalidClaim, attr, strings.Join(errs, "; "))
	}
	if len(name) == 0 || len(name) > resourceapi.DeviceMaxIDLength || !cIdentRE.MatchString(name) {
		return fmt.Errorf("%w: matchAttribute %q: name must be a C identifier of at most %d characters", ErrInvalidClaim, attr, resourceapi.DeviceMaxIDLength)
	}
	return nil
}
