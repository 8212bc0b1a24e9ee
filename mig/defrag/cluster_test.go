package defrag_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/testenv"
)

const (
	driver = "mig.example.com"
	ns     = "default"
)

// fixture is the objects of the cluster test.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	node   string
}

func attr(name string) string { return fmt.Sprintf("device.attributes[%q].%s", driver, name) }

func className(profile string) string {
	return "mig-" + strings.NewReplacer(".", "-", "+", "-").Replace(profile) + "." + driver
}

// pinned is a CEL selector for one GPU index and placement.
func pinned(gpu, start int) string {
	return fmt.Sprintf("%s == %d && %s == %d", attr(mig.AttrIndex), gpu, attr(mig.AttrPlacementStart), start)
}

// podSpec is a pod spec with one claim from template tmpl.
func podSpec(tmpl string) corev1.PodSpec {
	return corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "c", Image: "none", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "mig"}}}}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: ptr.To(tmpl)}},
	}
}

func (f *fixture) template(name, profile, selector string) {
	f.t.Helper()
	req := resourceapi.ExactDeviceRequest{DeviceClassName: className(profile)}
	if selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &req}},
		}}},
	}
	if _, err := f.client.ResourceV1().ResourceClaimTemplates(ns).Create(f.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// deployment makes a one-replica Deployment whose pod asks for profile;
// optIn annotates its pods with mig.drakit.dev/defrag: allow.
func (f *fixture) deployment(name, profile, selector string, optIn bool) {
	f.t.Helper()
	f.template(name, profile, selector)
	labels := map[string]string{"app": name}
	ann := map[string]string{}
	if optIn {
		ann[defrag.AnnotationDefrag] = defrag.AllowValue
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: podSpec(name)},
		},
	}
	if _, err := f.client.AppsV1().Deployments(ns).Create(f.ctx, d, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) pod(name, profile, selector string) {
	f.t.Helper()
	f.template(name, profile, selector)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}}, Spec: podSpec(name)}
	if _, err := f.client.CoreV1().Pods(ns).Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// placed is a pod of app with its allocated device.
type placed struct {
	pod    string
	uid    types.UID
	device string
}

// placedPods are the live (not terminating) pods of app whose claims are
// allocated.
func (f *fixture) placedPods(app string) []placed {
	pods, err := f.client.CoreV1().Pods(ns).List(f.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []placed
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			continue
		}
		c, err := f.client.ResourceV1().ResourceClaims(ns).Get(f.ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || p.Spec.NodeName == "" {
			continue
		}
		out = append(out, placed{p.Name, p.UID, c.Status.Allocation.Devices.Results[0].Device})
	}
	return out
}

// waitPlaced waits until app has one placed pod and returns it.
func (f *fixture) waitPlaced(app string) placed {
	f.t.Helper()
	var got []placed
	if err := poll(f.ctx, time.Minute, func(context.Context) (bool, error) {
		got = f.placedPods(app)
		return len(got) == 1, nil
	}); err != nil {
		pods, _ := f.client.CoreV1().Pods(ns).List(f.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		f.t.Fatalf("%s: no placed pod: %v (%v); pods %+v", app, err, got, podConds(pods))
	}
	return got[0]
}

// waitUnschedulable waits until the scheduler gave up on pod for now.
func (f *fixture) waitUnschedulable(name string) {
	f.t.Helper()
	if err := poll(f.ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := f.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
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
		f.t.Fatalf("pod %s is not unschedulable: %v", name, err)
	}
}

// kubelet plays the fake node's kubelet for terminating pods: it
// confirms their deletion.
func (f *fixture) kubelet() {
	pods, err := f.client.CoreV1().Pods(ns).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			_ = f.client.CoreV1().Pods(ns).Delete(f.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
}

func (f *fixture) taintRules() []string {
	l, err := f.client.ResourceV1().DeviceTaintRules().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, r := range l.Items {
		out = append(out, *r.Spec.DeviceSelector.Device)
	}
	sort.Strings(out)
	return out
}

// events are the messages of the controller's Events on pod, by reason.
func (f *fixture) events(pod string) map[string]string {
	l, err := f.client.CoreV1().Events(ns).List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range l.Items {
		if e.Source.Component == defrag.Component {
			out[e.Reason] = e.Message
		}
	}
	return out
}

func poll(ctx context.Context, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, cond)
}

// TestController runs the controller against a real API server,
// scheduler and controller manager with a fake node of two H100s that
// publishes mig's counter model. GPU 0 holds four opted-in 1g.10gb pods
// at placements 0, 2, 4 and 6 (each a Deployment's), GPU 1 a 3g.40gb pod
// at placement 0 that did not opt in; a 4g.40gb pod waits. While the pod
// at placement 0 has a PodDisruptionBudget that allows no disruption,
// nothing is evicted (moving the 3g.40gb pod, one eviction, would do,
// but it did not opt in). Without the budget a dry run prints the plan
// and changes nothing; then the controller taints the region, evicts the
// pods at 0 and 2 with Events, their replacements land outside the
// region, the waiting claim gets GPU 0's 4g.40gb from the controller, the
// scheduler binds the pod, the taints go; no other pod is touched.
func TestController(t *testing.T) {
	env := testenv.Start(t)
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f := &fixture{t: t, ctx: ctx, client: env.Client, node: env.NodeName}

	h100, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	m, err := mig.NewCounterModel([]mig.GPU{{Index: 0, Product: h100}, {Index: 1, Product: h100}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Slices(driver, env.NodeName, env.NodeName, 1) {
		if _, err := env.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range h100.Profiles {
		c := &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: className(p.Name)},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].?%s.orValue(\"\") == %q", driver, driver, mig.AttrProfile, p.Name)}}}},
		}
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// GPU 1: a 3g.40gb at 0 that did not opt in; GPU 0: fillers at 1, 3
	// and 5, so that the opted-in 1g.10gb pods land at 0, 2, 4 and 6.
	f.deployment("keep", "3g.40gb", pinned(1, 0), false)
	keep := f.waitPlaced("keep")
	for _, s := range []int{1, 3, 5} {
		f.pod(fmt.Sprintf("filler-%d", s), "1g.10gb", pinned(0, s))
		f.waitPlaced(fmt.Sprintf("filler-%d", s))
	}
	small := map[string]placed{}
	for i := range 4 {
		name := fmt.Sprintf("small-%d", i)
		f.deployment(name, "1g.10gb", "", true)
		small[name] = f.waitPlaced(name)
	}
	for i, want := range []string{"gpu-0-1g-10gb-0", "gpu-0-1g-10gb-2", "gpu-0-1g-10gb-4", "gpu-0-1g-10gb-6"} {
		if got := small[fmt.Sprintf("small-%d", i)].device; got != want {
			t.Fatalf("small-%d is on %s, want %s", i, got, want)
		}
	}
	for _, s := range []int{1, 3, 5} {
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("filler-%d", s), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "small-0", Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "small-0"}}},
	}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "small-0", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods == 1, err
	}); err != nil {
		t.Fatalf("the disruption controller did not count the budget's pods: %v", err)
	}
	f.pod("big", "4g.40gb", "")
	f.waitUnschedulable("big")

	c, err := defrag.New(env.Client, driver)
	if err != nil {
		t.Fatal(err)
	}
	untouched := func(apps ...string) {
		t.Helper()
		for _, app := range apps {
			want := keep
			if app != "keep" {
				want = small[app]
			}
			if got := f.placedPods(app); len(got) != 1 || got[0] != want {
				t.Errorf("%s: pods %v, want %v untouched", app, got, want)
			}
		}
	}

	// The budget forbids moving small-0, and the 3g.40gb did not opt in:
	// nothing to do.
	for range 2 {
		if op, err := c.Step(ctx); err != nil || op != nil {
			t.Fatalf("with small-0's budget: Step = %+v, %v; want nothing", op, err)
		}
	}
	untouched("keep", "small-0", "small-1", "small-2", "small-3")
	if r := f.taintRules(); len(r) != 0 {
		t.Fatalf("taint rules %v, want none", r)
	}

	// Without the budget: the dry run prints the plan and changes nothing.
	if err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "small-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	dry, err := defrag.New(env.Client, driver, defrag.WithDryRun(&out))
	if err != nil {
		t.Fatal(err)
	}
	op, err := dry.Step(ctx)
	if err != nil || op == nil {
		t.Fatalf("dry run: %+v, %v", op, err)
	}
	for _, want := range []string{"pod default/big waits for 4g.40gb: would evict default/" + small["small-0"].pod + ", default/" + small["small-1"].pod,
		"to free 4g.40gb at GPU 0 placement 0 on node " + env.NodeName, "allocate claim default/big-mig"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run printed\n%s\nwant %q", out.String(), want)
		}
	}
	untouched("keep", "small-0", "small-1", "small-2", "small-3")
	if r := f.taintRules(); len(r) != 0 {
		t.Fatalf("dry run made taint rules %v", r)
	}
	if e := f.events("big"); len(e) != 0 {
		t.Fatalf("dry run recorded events %v", e)
	}

	// The real thing.
	if op, err = c.Step(ctx); err != nil || op == nil {
		t.Fatalf("Step: %+v, %v", op, err)
	}
	wantRegion := []string{"gpu-0", "gpu-0-1g-10gb-0", "gpu-0-1g-10gb-1", "gpu-0-1g-10gb-2", "gpu-0-1g-10gb-3", "gpu-0-1g-10gb-me-0", "gpu-0-1g-10gb-me-1",
		"gpu-0-1g-10gb-me-2", "gpu-0-1g-10gb-me-3", "gpu-0-1g-20gb-0", "gpu-0-1g-20gb-2", "gpu-0-2g-20gb-0", "gpu-0-2g-20gb-2", "gpu-0-3g-40gb-0", "gpu-0-4g-40gb-0", "gpu-0-7g-80gb-0"}
	if got := f.taintRules(); strings.Join(got, " ") != strings.Join(wantRegion, " ") {
		t.Errorf("tainted %v, want %v", got, wantRegion)
	}
	if got := f.events("big")[defrag.ReasonDefragmenting]; !strings.Contains(got, "evicting default/"+small["small-0"].pod+", default/"+small["small-1"].pod+" to free 4g.40gb at GPU 0 placement 0") {
		t.Errorf("event on big: %q", got)
	}
	for _, app := range []string{"small-0", "small-1"} {
		if got := f.events(small[app].pod)[defrag.ReasonEvicted]; !strings.Contains(got, "evicted to make room for default/big") {
			t.Errorf("event on %s: %q", app, got)
		}
	}
	untouched("keep", "small-2", "small-3")

	// The fake node's kubelet lets the evicted pods go; the controller
	// allocates the claim once the region is free, the scheduler binds.
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		f.kubelet()
		if _, err := c.Step(ctx); err != nil {
			return false, err
		}
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "" && len(f.taintRules()) == 0, err
	}); err != nil {
		p, _ := env.Client.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{})
		t.Fatalf("big is not placed (%+v), or the taints stay (%v): %v", p.Status.Conditions, f.taintRules(), err)
	}
	if got := f.placedPods("big"); len(got) != 1 || got[0].device != "gpu-0-4g-40gb-0" {
		t.Errorf("big got %v, want gpu-0-4g-40gb-0", got)
	}
	for _, reason := range []string{defrag.ReasonAllocated, defrag.ReasonPlaced} {
		if _, ok := f.events("big")[reason]; !ok {
			t.Errorf("no %s event on big: %v", reason, f.events("big"))
		}
	}
	// The replacements run again, outside the freed region.
	for _, app := range []string{"small-0", "small-1"} {
		var got []placed
		if err := poll(ctx, time.Minute, func(context.Context) (bool, error) {
			got = f.placedPods(app)
			return len(got) == 1, nil
		}); err != nil {
			t.Fatalf("%s: no replacement placed: %v", app, err)
		}
		if got[0].uid == small[app].uid {
			t.Errorf("%s was not moved", app)
		}
		for _, r := range wantRegion {
			if got[0].device == r {
				t.Errorf("%s's replacement took %s, in the freed region", app, r)
			}
		}
	}
	untouched("keep", "small-2", "small-3")
	if _, err := env.Client.CoreV1().Pods(ns).Get(ctx, small["small-0"].pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("evicted pod %s: %v, want gone", small["small-0"].pod, err)
	}
}

func podConds(l *corev1.PodList) []string {
	var out []string
	for _, p := range l.Items {
		out = append(out, fmt.Sprintf("%s node %q: %+v", p.Name, p.Spec.NodeName, p.Status.Conditions))
	}
	return out
}
