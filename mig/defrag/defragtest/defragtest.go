package defragtest

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig/defrag"
	pdefrag "github.com/drakit/drakit/partition/defrag"
)

// ClaimName is the pod claim of every pod a Scene makes; its template is
// named after the pod's app.
const ClaimName = "mig"

// Scene makes a scenario's objects in one namespace and reads them back.
// Its methods fail the test (T.Fatal) when the API server refuses a
// request or a wait runs out; they must be called from the test's
// goroutine.
type Scene struct {
	T      testing.TB
	Ctx    context.Context
	Client kubernetes.Interface
	// Namespace holds every object the scene makes; it must exist.
	Namespace string
	// Class returns the DeviceClass that selects a MIG profile's devices.
	Class func(profile string) string
	// PodSpec is what every pod starts from, with at least one container;
	// the scene adds the pod claim ClaimName to the spec and to the first
	// container's resources.
	PodSpec corev1.PodSpec
	// Running makes a pod count as placed only once it runs (a real
	// node). Otherwise a pod counts once it is bound to a node with its
	// claim allocated (a fake node, where no pod runs).
	Running bool
	// Timeout bounds each wait; a minute when zero.
	Timeout time.Duration
	// Domain is the controller's Vendor.Domain (package partition/defrag):
	// its pods' opt-in annotation, its Events' component and its rules'
	// label. When empty, mig/defrag's (Domain), and TaintedDevices lists
	// every rule of the cluster.
	Domain string
}

// domain is the controller's domain.
func (s *Scene) domain() string {
	if s.Domain != "" {
		return s.Domain
	}
	return defrag.Domain
}

// Placed is a pod of an app and the device its claim got.
type Placed struct {
	Pod    string
	UID    types.UID
	Device string
}

func (s *Scene) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return time.Minute
}

func (s *Scene) poll(cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(s.Ctx, 100*time.Millisecond, s.timeout(), true, cond)
}

// Template makes the ResourceClaimTemplate name: one device of profile's
// class, selected by the CEL expression selector unless it is empty.
func (s *Scene) Template(name, profile, selector string) {
	s.T.Helper()
	req := resourceapi.ExactDeviceRequest{DeviceClassName: s.Class(profile)}
	if selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &req}},
		}}},
	}
	if _, err := s.Client.ResourceV1().ResourceClaimTemplates(s.Namespace).Create(s.Ctx, tmpl, metav1.CreateOptions{}); err != nil {
		s.T.Fatalf("create ResourceClaimTemplate %s: %v", name, err)
	}
}

// spec is PodSpec with the pod claim from template tmpl.
func (s *Scene) spec(tmpl string) corev1.PodSpec {
	spec := *s.PodSpec.DeepCopy()
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: ClaimName, ResourceClaimTemplateName: ptr.To(tmpl)})
	if len(spec.Containers) > 0 {
		c := &spec.Containers[0]
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: ClaimName})
	}
	return spec
}

// Deployment makes a one-replica Deployment app (pods labelled app=<app>)
// whose pod asks for one device of profile (see Template). optIn
// annotates its pods with the opt-in annotation (defrag.AnnotationDefrag
// for mig/defrag's Domain): pdefrag.AllowValue.
func (s *Scene) Deployment(app, profile, selector string, optIn bool) {
	s.T.Helper()
	s.Template(app, profile, selector)
	labels := map[string]string{"app": app}
	ann := map[string]string{}
	if optIn {
		ann[s.domain()+"/defrag"] = pdefrag.AllowValue
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: s.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: s.spec(app)},
		},
	}
	if _, err := s.Client.AppsV1().Deployments(s.Namespace).Create(s.Ctx, d, metav1.CreateOptions{}); err != nil {
		s.T.Fatalf("create Deployment %s: %v", app, err)
	}
}

// Pod makes the pod app (labelled app=<app>, restart policy Never, owned
// by nothing, so never moved) that asks for one device of profile (see
// Template).
func (s *Scene) Pod(app, profile, selector string) {
	s.T.Helper()
	s.Template(app, profile, selector)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: s.Namespace, Labels: map[string]string{"app": app}}, Spec: s.spec(app)}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := s.Client.CoreV1().Pods(s.Namespace).Create(s.Ctx, p, metav1.CreateOptions{}); err != nil {
		s.T.Fatalf("create pod %s: %v", app, err)
	}
}

// Budget makes the PodDisruptionBudget app that keeps app's one pod
// (minAvailable 1, so no disruption is allowed) and waits until the
// disruption controller counts the pod.
func (s *Scene) Budget(app string) {
	s.T.Helper()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: s.Namespace},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}
	if _, err := s.Client.PolicyV1().PodDisruptionBudgets(s.Namespace).Create(s.Ctx, pdb, metav1.CreateOptions{}); err != nil {
		s.T.Fatalf("create PodDisruptionBudget %s: %v", app, err)
	}
	if err := s.poll(func(ctx context.Context) (bool, error) {
		p, err := s.Client.PolicyV1().PodDisruptionBudgets(s.Namespace).Get(ctx, app, metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods == 1 && (!s.Running || p.Status.CurrentHealthy == 1), err
	}); err != nil {
		s.T.Fatalf("the disruption controller did not count %s's pod: %v", app, err)
	}
}

// Placed returns app's placed pods (see Scene.Running) that are not
// terminating, with their devices.
func (s *Scene) Placed(app string) []Placed {
	s.T.Helper()
	pods, err := s.Client.CoreV1().Pods(s.Namespace).List(s.Ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		s.T.Fatalf("list pods of %s: %v", app, err)
	}
	var out []Placed
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || (s.Running && p.Status.Phase != corev1.PodRunning) {
			continue
		}
		claim := ""
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.Name == ClaimName && st.ResourceClaimName != nil {
				claim = *st.ResourceClaimName
			}
		}
		if claim == "" {
			continue
		}
		c, err := s.Client.ResourceV1().ResourceClaims(s.Namespace).Get(s.Ctx, claim, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
			continue
		}
		out = append(out, Placed{Pod: p.Name, UID: p.UID, Device: c.Status.Allocation.Devices.Results[0].Device})
	}
	return out
}

// WaitPlaced waits until app has one placed pod and returns it.
func (s *Scene) WaitPlaced(app string) Placed {
	s.T.Helper()
	var got []Placed
	if err := s.poll(func(context.Context) (bool, error) {
		got = s.Placed(app)
		return len(got) == 1, nil
	}); err != nil {
		pods, _ := s.Client.CoreV1().Pods(s.Namespace).List(s.Ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		var st []string
		for _, p := range pods.Items {
			st = append(st, fmt.Sprintf("%s on node %q, %s: %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions))
		}
		s.T.Fatalf("%s: no placed pod: %v (placed %v; pods %v)", app, err, got, st)
	}
	return got[0]
}

// WaitUnschedulable waits until the scheduler has given up on pod for
// now (condition PodScheduled, reason Unschedulable).
func (s *Scene) WaitUnschedulable(pod string) {
	s.T.Helper()
	if err := s.poll(func(ctx context.Context) (bool, error) {
		p, err := s.Client.CoreV1().Pods(s.Namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		s.T.Fatalf("pod %s is not unschedulable: %v", pod, err)
	}
}

// Events returns the messages of the defragmenter's Events
// (defrag.Component for mig/defrag's Domain) on pod, by reason.
func (s *Scene) Events(pod string) map[string]string {
	s.T.Helper()
	l, err := s.Client.CoreV1().Events(s.Namespace).List(s.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		s.T.Fatalf("list events of %s: %v", pod, err)
	}
	out := map[string]string{}
	for _, e := range l.Items {
		if e.Source.Component == s.domain()+"/defrag" {
			out[e.Reason] = e.Message
		}
	}
	return out
}

// TaintedDevices returns, sorted, the device each of the cluster's
// DeviceTaintRules selects by name ("rule <name>" for a rule that names
// no device), one entry per rule; with Domain set, only the rules of
// that controller's operations.
func (s *Scene) TaintedDevices() []string {
	s.T.Helper()
	var opts metav1.ListOptions
	if s.Domain != "" {
		opts.LabelSelector = s.Domain + "/defrag-operation"
	}
	l, err := s.Client.ResourceV1().DeviceTaintRules().List(s.Ctx, opts)
	if err != nil {
		s.T.Fatalf("list DeviceTaintRules: %v", err)
	}
	var out []string
	for _, r := range l.Items {
		if d := r.Spec.DeviceSelector; d != nil && d.Device != nil {
			out = append(out, *d.Device)
		} else {
			out = append(out, "rule "+r.Name)
		}
	}
	sort.Strings(out)
	return out
}
