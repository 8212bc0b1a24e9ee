package deploy_test

import (
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/testenv"
)

// defragNS is the namespace of the defragmentation scenario.
const defragNS = "defrag"

// defragScene builds the scenario's objects on the real node.
type defragScene struct {
	t   *testing.T
	ctx context.Context
	env *testenv.Env
}

func celAttr(name string) string {
	return fmt.Sprintf("device.attributes[%q].%s", nvdriver.DriverName, name)
}

// at selects one dynamic GPU's placement.
func at(gpu, start int) string {
	return fmt.Sprintf("%s == %d && %s == %d", celAttr("index"), gpu, celAttr("placementStart"), start)
}

const dynamicOnly = `device.attributes["` + nvdriver.DriverName + `"].migMode == "dynamic"`

func (s *defragScene) template(name, profile, selector string) {
	s.t.Helper()
	req := resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.ProfileClass(profile),
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: defragNS},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &req}}}}},
	}
	if _, err := s.env.Client.ResourceV1().ResourceClaimTemplates(defragNS).Create(s.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *defragScene) spec(tmpl string) corev1.PodSpec {
	return corev1.PodSpec{
		HostNetwork:                   true,
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{
			Name: "ctr", Image: s.env.BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "mig"}}},
		}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: ptr.To(tmpl)}},
	}
}

// deployment is a one-replica Deployment of app asking for profile;
// optIn annotates its pods mig.drakit.dev/defrag: allow.
func (s *defragScene) deployment(app, profile, selector string, optIn bool) {
	s.t.Helper()
	s.template(app, profile, selector)
	ann := map[string]string{}
	if optIn {
		ann[defrag.AnnotationDefrag] = defrag.AllowValue
	}
	labels := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: defragNS},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: s.spec(app)}},
	}
	if _, err := s.env.Client.AppsV1().Deployments(defragNS).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *defragScene) pod(app, profile, selector string) {
	s.t.Helper()
	s.template(app, profile, selector)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: defragNS, Labels: map[string]string{"app": app}}, Spec: s.spec(app)}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := s.env.Client.CoreV1().Pods(defragNS).Create(s.ctx, p, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// running is a running pod of an app and its device.
type running struct {
	pod    string
	uid    types.UID
	device string
}

// runningPods are app's running, not terminating pods whose claims are
// allocated.
func (s *defragScene) runningPods(app string) []running {
	pods, err := s.env.Client.CoreV1().Pods(defragNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []running
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		c, err := podClaim(s.ctx, s.env, &p)
		if err != nil || c.Status.Allocation == nil {
			continue
		}
		out = append(out, running{p.Name, p.UID, c.Status.Allocation.Devices.Results[0].Device})
	}
	return out
}

func (s *defragScene) waitRunning(app string) running {
	s.t.Helper()
	var got []running
	if err := poll(s.ctx, 3*time.Minute, func(context.Context) (bool, error) {
		got = s.runningPods(app)
		return len(got) == 1, nil
	}); err != nil {
		pods, _ := s.env.Client.CoreV1().Pods(defragNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		var st []string
		for _, p := range pods.Items {
			st = append(st, fmt.Sprintf("%s %s %+v", p.Name, p.Status.Phase, p.Status.Conditions))
		}
		s.t.Fatalf("%s does not run: %v (%v)", app, err, st)
	}
	return got[0]
}

func (s *defragScene) events(pod string) map[string]string {
	l, err := s.env.Client.CoreV1().Events(defragNS).List(s.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range l.Items {
		if e.Source.Component == defrag.Component {
			out[e.Reason] = e.Message
		}
	}
	return out
}

func (s *defragScene) taintRules() int {
	l, err := s.env.Client.ResourceV1().DeviceTaintRules().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return len(l.Items)
}

// testDefrag is the MIG defragmenter on the real node with the reference
// driver (run by TestE2E on its cluster, after its story): dynamic GPU 4
// holds four opted-in 1g.18gb pods at placements 0, 2, 4 and 6, each a
// Deployment's; GPUs 5-7 each hold a 3g.71gb pod at placement 0 that did
// not opt in (moving one of them would free a 4g.71gb with one
// eviction). A 4g.71gb pod on a dynamic GPU waits. While a
// PodDisruptionBudget forbids disrupting the pod at placement 0, the
// controller evicts nothing. Without it, the controller moves the pods at
// 0 and 2, the 4g.71gb pod runs on GPU 4's placement 0, the moved pods
// run again elsewhere, and nothing else is touched.
func testDefrag(t *testing.T, ctx context.Context, env *testenv.Env) {
	s := &defragScene{t: t, ctx: ctx, env: env}
	t0 := time.Now()
	defer func() { t.Logf("the defragmentation scenario took %s", time.Since(t0).Round(time.Second)) }()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: defragNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().ServiceAccounts(defragNS).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	keep := map[string]running{}
	for g := 5; g <= 7; g++ {
		app := fmt.Sprintf("keep-%d", g)
		s.deployment(app, "3g.71gb", at(g, 0), false)
		keep[app] = s.waitRunning(app)
	}
	for _, st := range []int{1, 3, 5} {
		app := fmt.Sprintf("filler-%d", st)
		s.pod(app, "1g.18gb", at(4, st))
		s.waitRunning(app)
	}
	small := map[string]running{}
	byDevice := map[string]string{}
	for i := range 4 {
		app := fmt.Sprintf("small-%d", i)
		s.deployment(app, "1g.18gb", dynamicOnly, true)
		small[app] = s.waitRunning(app)
		byDevice[small[app].device] = app
	}
	var devs []string
	for d := range byDevice {
		devs = append(devs, d)
	}
	sort.Strings(devs)
	if strings.Join(devs, " ") != "gpu-4-1g-18gb-0 gpu-4-1g-18gb-2 gpu-4-1g-18gb-4 gpu-4-1g-18gb-6" {
		t.Fatalf("the opted-in pods are on %v, want GPU 4's placements 0, 2, 4 and 6", devs)
	}
	for _, st := range []int{1, 3, 5} {
		if err := env.Client.CoreV1().Pods(defragNS).Delete(ctx, fmt.Sprintf("filler-%d", st), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	at0, at2 := byDevice["gpu-4-1g-18gb-0"], byDevice["gpu-4-1g-18gb-2"]
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: at0, Namespace: defragNS},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": at0}}},
	}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(defragNS).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := env.Client.PolicyV1().PodDisruptionBudgets(defragNS).Get(ctx, at0, metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1, err
	}); err != nil {
		t.Fatalf("the disruption controller did not count %s's pod: %v", at0, err)
	}
	s.pod("big", "4g.71gb", dynamicOnly)
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(defragNS).Get(ctx, "big", metav1.GetOptions{})
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
		t.Fatalf("big does not wait: %v", err)
	}
	untouched := func(apps ...string) {
		t.Helper()
		for _, app := range apps {
			want, ok := keep[app]
			if !ok {
				want = small[app]
			}
			if got := s.runningPods(app); len(got) != 1 || got[0] != want {
				t.Errorf("%s: running %v, want %v untouched", app, got, want)
			}
		}
	}
	c, err := defrag.New(env.Client, nvdriver.DriverName, defrag.WithInterval(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if op, err := c.Step(ctx); err != nil || op != nil {
			t.Fatalf("with %s's budget: Step = %+v, %v; want nothing", at0, op, err)
		}
	}
	untouched("keep-5", "keep-6", "keep-7", "small-0", "small-1", "small-2", "small-3")
	if n := s.taintRules(); n != 0 {
		t.Fatalf("%d taint rules, want none", n)
	}

	if err := env.Client.PolicyV1().PodDisruptionBudgets(defragNS).Delete(ctx, at0, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()
	var bigRun running
	if err := poll(ctx, 4*time.Minute, func(context.Context) (bool, error) {
		got := s.runningPods("big")
		if len(got) == 1 && s.taintRules() == 0 {
			bigRun = got[0]
			return true, nil
		}
		return false, nil
	}); err != nil {
		p, _ := env.Client.CoreV1().Pods(defragNS).Get(ctx, "big", metav1.GetOptions{})
		t.Fatalf("big does not run (%+v; events %v; %d taint rules): %v", p.Status.Conditions, s.events("big"), s.taintRules(), err)
	}
	if bigRun.device != "gpu-4-4g-71gb-0" {
		t.Errorf("big runs on %s, want gpu-4-4g-71gb-0", bigRun.device)
	}
	ev := s.events("big")
	if want := "evicting defrag/" + small[at0].pod + ", defrag/" + small[at2].pod + " to free 4g.71gb at GPU 4 placement 0"; !strings.Contains(ev[defrag.ReasonDefragmenting], want) {
		t.Errorf("big's %s event %q, want %q", defrag.ReasonDefragmenting, ev[defrag.ReasonDefragmenting], want)
	}
	for _, r := range []string{defrag.ReasonAllocated, defrag.ReasonPlaced} {
		if ev[r] == "" {
			t.Errorf("no %s event on big: %v", r, ev)
		}
	}
	for _, app := range []string{at0, at2} {
		if got := s.events(small[app].pod)[defrag.ReasonEvicted]; !strings.Contains(got, "evicted to make room for defrag/big") {
			t.Errorf("%s's pod: %s event %q", app, defrag.ReasonEvicted, got)
		}
		moved := s.waitRunning(app)
		if moved.uid == small[app].uid {
			t.Errorf("%s was not moved", app)
		}
		t.Logf("%s moved from %s to %s", app, small[app].device, moved.device)
	}
	var stay []string
	for app := range small {
		if app != at0 && app != at2 {
			stay = append(stay, app)
		}
	}
	untouched(append([]string{"keep-5", "keep-6", "keep-7"}, stay...)...)

	if err := env.Client.CoreV1().Namespaces().Delete(ctx, defragNS, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}
