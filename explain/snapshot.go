package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Snapshot is the state of a cluster that an explanation is computed
// against. It is read, never modified.
type Snapshot struct {
	// Nodes are the candidate nodes. Nodes named by a ResourceSlice's
	// nodeName but missing here are added with only their name (no
	// labels, no taints), so that a snapshot of slices alone is enough
	// for a what-if.
	Nodes []*corev1.Node `json:"nodes,omitempty"`
	// Slices are the ResourceSlices of every driver.
	Slices []*resourceapi.ResourceSlice `json:"slices,omitempty"`
	// Classes are the DeviceClasses.
	Classes []*resourceapi.DeviceClass `json:"classes,omitempty"`
	// Claims are the ResourceClaims. Allocated claims make their devices
	// unavailable (as in the scheduler); pods' claims are looked up here.
	Claims []*resourceapi.ResourceClaim `json:"claims,omitempty"`
	// Templates are the ResourceClaimTemplates pods may refer to.
	Templates []*resourceapi.ResourceClaimTemplate `json:"templates,omitempty"`
	// TaintRules are DeviceTaintRules: taints an admin puts on published
	// devices. They are applied to the slices' devices as the scheduler
	// does.
	TaintRules []*resourceapi.DeviceTaintRule `json:"taintRules,omitempty"`
	// Pods are pods read from files (Load); FromCluster leaves it empty.
	Pods []*corev1.Pod `json:"pods,omitempty"`
}

// FromCluster lists nodes, ResourceSlices, DeviceClasses, ResourceClaims
// (all namespaces), ResourceClaimTemplates and DeviceTaintRules from a
// live API server.
func FromCluster(ctx context.Context, client kubernetes.Interface) (*Snapshot, error) {
	s := &Snapshot{}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		s.Nodes = append(s.Nodes, &nodes.Items[i])
	}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	for i := range slices.Items {
		s.Slices = append(s.Slices, &slices.Items[i])
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list device classes: %w", err)
	}
	for i := range classes.Items {
		s.Classes = append(s.Classes, &classes.Items[i])
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	for i := range claims.Items {
		s.Claims = append(s.Claims, &claims.Items[i])
	}
	templates, err := client.ResourceV1().ResourceClaimTemplates("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource claim templates: %w", err)
	}
	for i := range templates.Items {
		s.Templates = append(s.Templates, &templates.Items[i])
	}
	rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// A cluster that does not serve DeviceTaintRules has none.
	case err != nil:
		return nil, fmt.Errorf("list device taint rules: %w", err)
	default:
		for i := range rules.Items {
			s.TaintRules = append(s.TaintRules, &rules.Items[i])
		}
	}
	return s, nil
}

// ErrUnknownKind is returned (wrapped) by Decode for an object whose kind
// a snapshot cannot hold.
var ErrUnknownKind = errors.New("kind not supported")

// Load reads snapshot objects from files (see Decode) into one Snapshot.
func Load(files ...string) (*Snapshot, error) {
	s := &Snapshot{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read snapshot: %w", err)
		}
		if err := s.Decode(data); err != nil {
			return nil, fmt.Errorf("decode %s: %w", f, err)
		}
	}
	return s, nil
}

// Decode adds the objects in data to s. data holds YAML or JSON
// documents separated by "---" lines, each a Node, ResourceSlice,
// DeviceClass, ResourceClaim, ResourceClaimTemplate, DeviceTaintRule or
// Pod, or a List of
// them (what "kubectl get -o yaml" prints). Unknown fields are errors, so
// that a typo does not silently change the answer.
func (s *Snapshot) Decode(data []byte) error {
	for i, doc := range splitDocuments(data) {
		if err := s.decodeObject(doc); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
	}
	return nil
}

func (s *Snapshot) decodeObject(doc []byte) error {
	var head struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	strict := func(into any) error { return yaml.UnmarshalStrict(doc, into) }
	switch head.Kind {
	case "Node":
		o := &corev1.Node{}
		if err := strict(o); err != nil {
			return err
		}
		s.Nodes = append(s.Nodes, o)
	case "ResourceSlice":
		o := &resourceapi.ResourceSlice{}
		if err := strict(o); err != nil {
			return err
		}
		s.Slices = append(s.Slices, o)
	case "DeviceClass":
		o := &resourceapi.DeviceClass{}
		if err := strict(o); err != nil {
			return err
		}
		s.Classes = append(s.Classes, o)
	case "ResourceClaim":
		o := &resourceapi.ResourceClaim{}
		if err := strict(o); err != nil {
			return err
		}
		defaultNamespace(&o.ObjectMeta)
		s.Claims = append(s.Claims, o)
	case "ResourceClaimTemplate":
		o := &resourceapi.ResourceClaimTemplate{}
		if err := strict(o); err != nil {
			return err
		}
		defaultNamespace(&o.ObjectMeta)
		s.Templates = append(s.Templates, o)
	case "DeviceTaintRule":
		o := &resourceapi.DeviceTaintRule{}
		if err := strict(o); err != nil {
			return err
		}
		s.TaintRules = append(s.TaintRules, o)
	case "Pod":
		o := &corev1.Pod{}
		if err := strict(o); err != nil {
			return err
		}
		defaultNamespace(&o.ObjectMeta)
		s.Pods = append(s.Pods, o)
	default:
		if !strings.HasSuffix(head.Kind, "List") {
			return fmt.Errorf("%w: %q", ErrUnknownKind, head.Kind)
		}
		for j, item := range head.Items {
			if err := s.decodeObject(item); err != nil {
				return fmt.Errorf("item %d: %w", j, err)
			}
		}
	}
	return nil
}

func defaultNamespace(m *metav1.ObjectMeta) {
	if m.Namespace == "" {
		m.Namespace = metav1.NamespaceDefault
	}
}

// splitDocuments splits a YAML stream at "---" lines, dropping empty
// documents.
func splitDocuments(data []byte) [][]byte {
	var out [][]byte
	for _, doc := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) > 0 {
			out = append(out, doc)
		}
	}
	return out
}

// claim returns the claim ns/name of the snapshot, or nil.
func (s *Snapshot) claim(ns, name string) *resourceapi.ResourceClaim {
	for _, c := range s.Claims {
		if c.Namespace == ns && c.Name == name {
			return c
		}
	}
	return nil
}

// template returns the template ns/name of the snapshot, or nil.
func (s *Snapshot) template(ns, name string) *resourceapi.ResourceClaimTemplate {
	for _, t := range s.Templates {
		if t.Namespace == ns && t.Name == name {
			return t
		}
	}
	return nil
}

// taintedSlices returns the slices with the taints of the rules added to
// the devices they select, as the scheduler's slice tracker does (a rule
// without a selector selects nothing; unset selector fields match
// anything). Slices no rule touches are returned as they are. ruleOf
// names the rule of each added taint.
func taintedSlices(slices []*resourceapi.ResourceSlice, rules []*resourceapi.DeviceTaintRule) (out []*resourceapi.ResourceSlice, ruleOf map[ruleTaint]string) {
	if len(rules) == 0 {
		return slices, nil
	}
	ruleOf = map[ruleTaint]string{}
	out = make([]*resourceapi.ResourceSlice, len(slices))
	for i, s := range slices {
		out[i] = s
		for _, r := range rules {
			sel := r.Spec.DeviceSelector
			if sel == nil || (sel.Driver != nil && *sel.Driver != s.Spec.Driver) || (sel.Pool != nil && *sel.Pool != s.Spec.Pool.Name) {
				continue
			}
			for d := range s.Spec.Devices {
				name := s.Spec.Devices[d].Name
				if sel.Device != nil && *sel.Device != name {
					continue
				}
				if out[i] == s {
					out[i] = s.DeepCopy()
				}
				t := r.Spec.Taint
				out[i].Spec.Devices[d].Taints = append(out[i].Spec.Devices[d].Taints, t)
				ruleOf[ruleTaint{s.Spec.Driver, s.Spec.Pool.Name, name, t.Key, t.Value, string(t.Effect)}] = r.Name
			}
		}
	}
	return out, ruleOf
}

// ruleTaint is one taint on one device.
type ruleTaint struct{ driver, pool, device, key, value, effect string }
