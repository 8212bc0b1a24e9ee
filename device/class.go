package device

import (
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Class describes a DeviceClass a driver ships with its deployment (a
// Helm template or a manifest applied next to the DaemonSet): users name
// it in their claims, and, with ExtendedResourceName, unchanged pods that
// ask for an extended resource in resources.limits get devices of it.
//
// A driver ships its classes as objects built here, rendered with
// [ClassesYAML] into its chart or manifests, and a test of the driver
// compares the chart's classes with the function that builds them, so
// the two cannot drift.
type Class struct {
	// Name is the DeviceClass name, a DNS subdomain; by convention in the
	// driver's domain ("gpu.example.com", "half.gpu.example.com").
	Name string
	// Driver is the driver name; the class selects only its devices
	// (device.driver == Driver, always the first selector).
	Driver string
	// Selectors are CEL expressions over device, each of which a device
	// of the class must satisfy, e.g.
	// `device.attributes["gpu.example.com"].type == "half"`. Guard an
	// attribute that only some of the driver's devices have (`"x" in
	// device.attributes["gpu.example.com"] && ...`): a selector that
	// fails to evaluate on any device fails the claim's allocation.
	Selectors []string
	// ExtendedResourceName, when set, serves old-style requests
	// (`resources.limits: {example.com/gpu: 1}`, KEP-5004): the scheduler
	// allocates one device of this class per unit. It must be an extended
	// resource name (a domain-qualified name outside kubernetes.io), and
	// no device plugin on the same nodes may serve it, or one pod's
	// request is counted twice. At most one class should name it.
	ExtendedResourceName string
}

// ErrInvalidClass is wrapped by the errors of [Class.DeviceClass].
var ErrInvalidClass = errors.New("invalid DeviceClass")

// DeviceClass returns the resource.k8s.io/v1 DeviceClass c describes,
// with TypeMeta set so it renders as a manifest. It checks the name, the
// driver name and the extended resource name as the API server does and
// returns an error wrapping ErrInvalidClass naming the field at fault;
// the CEL selectors are compiled by the API server.
func (c Class) DeviceClass() (*resourceapi.DeviceClass, error) {
	var errs []string
	for _, msg := range validation.IsDNS1123Subdomain(c.Name) {
		errs = append(errs, fmt.Sprintf("name %q: %s", c.Name, msg))
	}
	for _, msg := range validation.IsDNS1123Subdomain(c.Driver) {
		errs = append(errs, fmt.Sprintf("driver %q: %s", c.Driver, msg))
	}
	if c.ExtendedResourceName != "" {
		if msg := extendedResourceNameProblem(c.ExtendedResourceName); msg != "" {
			errs = append(errs, fmt.Sprintf("extendedResourceName %q: %s", c.ExtendedResourceName, msg))
		}
	}
	for i, s := range c.Selectors {
		if strings.TrimSpace(s) == "" {
			errs = append(errs, fmt.Sprintf("selectors[%d]: empty", i))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w %s: %s", ErrInvalidClass, c.Name, strings.Join(errs, "; "))
	}
	sel := []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", c.Driver)}}}
	for _, s := range c.Selectors {
		sel = append(sel, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	dc := &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: sel},
	}
	if c.ExtendedResourceName != "" {
		name := c.ExtendedResourceName
		dc.Spec.ExtendedResourceName = &name
	}
	return dc, nil
}

// extendedResourceNameProblem says why name is not an extended resource
// name, by the rule the API server applies to
// DeviceClass.spec.extendedResourceName (a name with a domain outside
// kubernetes.io, that stays a qualified name with "requests." in front);
// "" when it is one.
func extendedResourceNameProblem(name string) string {
	switch {
	case !strings.Contains(name, "/"):
		return "must be domain-qualified (example.com/gpu)"
	case strings.Contains(name, "kubernetes.io/"):
		return "the kubernetes.io domains are reserved for native resources"
	case strings.HasPrefix(name, "requests."):
		return `must not start with "requests."`
	}
	if msgs := validation.IsQualifiedName("requests." + name); len(msgs) > 0 {
		return strings.Join(msgs, "; ")
	}
	return ""
}

// ClassesYAML renders classes as one YAML stream of documents separated
// by "---", in the given order: what a chart's template or
// `kubectl apply -f` takes.
func ClassesYAML(classes ...*resourceapi.DeviceClass) ([]byte, error) {
	var b strings.Builder
	for i, c := range classes {
		out, err := yaml.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("render DeviceClass %s: %w", c.Name, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(out)
	}
	return []byte(b.String()), nil
}
