package defrag_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/mig/defrag/defragtest"
)

// driver and ns are TestLandingAgreesWithScheduler's, on a cluster of its
// own; the other tests take theirs from sharedEnv.
const (
	driver = "mig.example.com"
	ns     = "default"
)

func (e *env) attr(name string) string {
	return fmt.Sprintf("device.attributes[%q].%s", e.Driver, name)
}

func (e *env) className(profile string) string {
	return "mig-" + strings.NewReplacer(".", "-", "+", "-").Replace(profile) + "." + e.Driver
}

// pinned is a CEL selector for one GPU index and placement.
func (e *env) pinned(gpu, start int) string {
	return fmt.Sprintf("%s == %d && %s == %d", e.attr(mig.AttrIndex), gpu, e.attr(mig.AttrPlacementStart), start)
}

// publish creates the slices of mig's counter model for gpus on node, as
// the driver would.
func (e *env) publish(t *testing.T, ctx context.Context, node string, gpus ...mig.GPU) {
	t.Helper()
	m, err := mig.NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Slices(e.Driver, node, node, 1) {
		if _, err := e.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// makeClasses creates a DeviceClass per profile of product.
func (e *env) makeClasses(t *testing.T, ctx context.Context, product *mig.Product) {
	t.Helper()
	for _, p := range product.Profiles {
		c := &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: e.className(p.Name)},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].?%s.orValue(\"\") == %q", e.Driver, e.Driver, mig.AttrProfile, p.Name)}}}},
		}
		if _, err := e.Client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// kubelet plays the fake node's kubelet for terminating pods: it
// confirms their deletion.
func kubelet(s *defragtest.Scene) {
	pods, err := s.Client.CoreV1().Pods(s.Namespace).List(s.Ctx, metav1.ListOptions{})
	if err != nil {
		s.T.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			_ = s.Client.CoreV1().Pods(s.Namespace).Delete(s.Ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
}

func poll(ctx context.Context, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, cond)
}

// TestController runs the controller against a real API server,
// scheduler and controller manager with a fake node of two H100s that
// publishes mig's counter model. GPU 0 holds four opted-in 1g.10gb pods
// at placements 0, 2, 4 and 6 (each a Deployment's), GPU 1 a 3g.40gb pod
// at placement 0 that did not opt in and two bare 1g.10gb pods at 4 and
// 5, so that the only room for a moved 1g.10gb is GPU 0 placement 5 and
// GPU 1 placement 6; a 4g.40gb pod waits. While the pod at placement 0
// has a PodDisruptionBudget that allows no disruption, nothing is
// evicted (moving the 3g.40gb pod, one eviction, would do, but it did not
// opt in). Without the budget a dry run prints the plan and changes
// nothing; then the controller taints the region and the two
// destinations, evicts the pods at 0 and 2 with Events. A higher-priority
// pod asking 1g.10gb comes after the evictions and gets neither
// destination: the controller allocates each replacement's claim to its
// destination, the waiting claim GPU 0's 4g.40gb, the scheduler binds
// them, the taints go; no other pod is touched.
func TestController(t *testing.T) {
	env := sharedEnv(t)
	env.Domain = defrag.Domain // mig/defrag's New, NVIDIA's names
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f := &defragtest.Scene{T: t, Ctx: ctx, Client: env.Client, Namespace: env.Namespace, Class: env.className,
		Domain: env.Domain, PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}

	h100, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	env.publish(t, ctx, env.NodeName, mig.GPU{Index: 0, Product: h100}, mig.GPU{Index: 1, Product: h100})
	env.makeClasses(t, ctx, h100)

	// GPU 1: a 3g.40gb at 0 that did not opt in; GPU 0: fillers at 1, 3
	// and 5, so that the opted-in 1g.10gb pods land at 0, 2, 4 and 6.
	f.Deployment("keep", "3g.40gb", env.pinned(1, 0), false)
	keep := f.WaitPlaced("keep")
	for _, s := range []int{4, 5} {
		f.Pod(fmt.Sprintf("gpu1-%d", s), "1g.10gb", env.pinned(1, s))
		f.WaitPlaced(fmt.Sprintf("gpu1-%d", s))
	}
	for _, s := range []int{1, 3, 5} {
		f.Pod(fmt.Sprintf("filler-%d", s), "1g.10gb", env.pinned(0, s))
		f.WaitPlaced(fmt.Sprintf("filler-%d", s))
	}
	small := map[string]defragtest.Placed{}
	for i := range 4 {
		name := fmt.Sprintf("small-%d", i)
		f.Deployment(name, "1g.10gb", "", true)
		small[name] = f.WaitPlaced(name)
	}
	for i, want := range []string{"gpu-0-1g-10gb-0", "gpu-0-1g-10gb-2", "gpu-0-1g-10gb-4", "gpu-0-1g-10gb-6"} {
		if got := small[fmt.Sprintf("small-%d", i)].Device; got != want {
			t.Fatalf("small-%d is on %s, want %s", i, got, want)
		}
	}
	for _, s := range []int{1, 3, 5} {
		if err := env.Client.CoreV1().Pods(env.Namespace).Delete(ctx, fmt.Sprintf("filler-%d", s), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	f.Budget("small-0")
	f.Pod("big", "4g.40gb", "")
	f.WaitUnschedulable("big")

	c, err := defrag.New(env.Client, env.Driver)
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
			if got := f.Placed(app); len(got) != 1 || got[0] != want {
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
	if r := f.TaintedDevices(); len(r) != 0 {
		t.Fatalf("taint rules %v, want none", r)
	}

	// Without the budget: the dry run prints the plan and changes nothing.
	if err := env.Client.PolicyV1().PodDisruptionBudgets(env.Namespace).Delete(ctx, "small-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	dry, err := defrag.New(env.Client, env.Driver, defrag.WithDryRun(&out))
	if err != nil {
		t.Fatal(err)
	}
	op, err := dry.Step(ctx)
	if err != nil || op == nil {
		t.Fatalf("dry run: %+v, %v", op, err)
	}
	for _, want := range []string{"pod " + env.Namespace + "/big waits for 4g.40gb: would evict " + env.Namespace + "/" + small["small-0"].Pod + ", " + env.Namespace + "/" + small["small-1"].Pod,
		"to free 4g.40gb at GPU 0 placement 0 on node " + env.NodeName, "allocate claim " + env.Namespace + "/big-mig"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run printed\n%s\nwant %q", out.String(), want)
		}
	}
	untouched("keep", "small-0", "small-1", "small-2", "small-3")
	if r := f.TaintedDevices(); len(r) != 0 {
		t.Fatalf("dry run made taint rules %v", r)
	}
	if e := f.Events("big"); len(e) != 0 {
		t.Fatalf("dry run recorded events %v", e)
	}

	// The real thing.
	if op, err = c.Step(ctx); err != nil || op == nil {
		t.Fatalf("Step: %+v, %v", op, err)
	}
	wantRegion := []string{"gpu-0", "gpu-0-1g-10gb-0", "gpu-0-1g-10gb-1", "gpu-0-1g-10gb-2", "gpu-0-1g-10gb-3", "gpu-0-1g-10gb-me-0", "gpu-0-1g-10gb-me-1",
		"gpu-0-1g-10gb-me-2", "gpu-0-1g-10gb-me-3", "gpu-0-1g-20gb-0", "gpu-0-1g-20gb-2", "gpu-0-2g-20gb-0", "gpu-0-2g-20gb-2", "gpu-0-3g-40gb-0", "gpu-0-4g-40gb-0", "gpu-0-7g-80gb-0"}
	// The region and each destination are tainted.
	tainted := map[string]bool{}
	for _, d := range f.TaintedDevices() {
		tainted[d] = true
	}
	wantTainted := append([]string(nil), wantRegion...)
	dest := map[string]string{} // evicted pod -> destination device
	for _, e := range op.Evictions {
		dest[e.Pod.Name] = e.ToDevice
		wantTainted = append(wantTainted, e.ToDevice)
	}
	if want := map[string]bool{"gpu-0-1g-10gb-5": true, "gpu-1-1g-10gb-6": true}; len(dest) != 2 || !want[dest[small["small-0"].Pod]] || !want[dest[small["small-1"].Pod]] || dest[small["small-0"].Pod] == dest[small["small-1"].Pod] {
		t.Errorf("destinations %v, want gpu-0-1g-10gb-5 and gpu-1-1g-10gb-6", dest)
	}
	for _, d := range wantTainted {
		if !tainted[d] {
			t.Errorf("%s is not tainted (tainted: %v)", d, f.TaintedDevices())
		}
	}
	// A pod that asks 1g.10gb comes first in the scheduler's queue: the
	// destinations are not for it.
	if _, err := env.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder"}, Value: 1000, PreemptionPolicy: ptr.To(corev1.PreemptNever),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.PodSpec.PriorityClassName = "intruder"
	f.Pod("intruder", "1g.10gb", "")
	f.PodSpec.PriorityClassName = ""
	if got := f.Events("big")[defrag.ReasonDefragmenting]; !strings.Contains(got, "evicting "+env.Namespace+"/"+small["small-0"].Pod+", "+env.Namespace+"/"+small["small-1"].Pod+" to free 4g.40gb at GPU 0 placement 0") {
		t.Errorf("event on big: %q", got)
	}
	for _, app := range []string{"small-0", "small-1"} {
		if got := f.Events(small[app].Pod)[defrag.ReasonEvicted]; !strings.Contains(got, "evicted to make room for "+env.Namespace+"/big") {
			t.Errorf("event on %s: %q", app, got)
		}
	}
	untouched("keep", "small-2", "small-3")

	// The fake node's kubelet lets the evicted pods go; the controller
	// allocates the claim once the region is free, the scheduler binds.
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		kubelet(f)
		if _, err := c.Step(ctx); err != nil {
			return false, err
		}
		p, err := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, "big", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "" && len(f.TaintedDevices()) == 0, err
	}); err != nil {
		p, _ := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, "big", metav1.GetOptions{})
		t.Fatalf("big is not placed (%+v), or the taints stay (%v): %v", p.Status.Conditions, f.TaintedDevices(), err)
	}
	if got := f.Placed("big"); len(got) != 1 || got[0].Device != "gpu-0-4g-40gb-0" {
		t.Errorf("big got %v, want gpu-0-4g-40gb-0", got)
	}
	for _, reason := range []string{defrag.ReasonAllocated, defrag.ReasonPlaced} {
		if _, ok := f.Events("big")[reason]; !ok {
			t.Errorf("no %s event on big: %v", reason, f.Events("big"))
		}
	}
	// The replacements run again, outside the freed region.
	for _, app := range []string{"small-0", "small-1"} {
		var got []defragtest.Placed
		if err := poll(ctx, time.Minute, func(context.Context) (bool, error) {
			got = f.Placed(app)
			return len(got) == 1, nil
		}); err != nil {
			t.Fatalf("%s: no replacement placed: %v", app, err)
		}
		if got[0].UID == small[app].UID {
			t.Errorf("%s was not moved", app)
		}
		if want := dest[small[app].Pod]; got[0].Device != want {
			t.Errorf("%s's replacement took %s, want its destination %s", app, got[0].Device, want)
		}
		if got := f.Events(got[0].Pod)[defrag.ReasonReplacementAllocated]; !strings.Contains(got, "replaces "+env.Namespace+"/"+small[app].Pod) {
			t.Errorf("event on %s's replacement: %q", app, got)
		}
	}
	untouched("keep", "small-2", "small-3")
	if got := f.Placed("intruder"); len(got) != 0 {
		t.Errorf("intruder placed: %v", got)
	}
	if r := f.TaintedDevices(); len(r) != 0 {
		t.Errorf("taint rules left: %v", r)
	}
	if _, err := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, small["small-0"].Pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("evicted pod %s: %v, want gone", small["small-0"].Pod, err)
	}
}

// TestControllerLanding checks that the controller evicts nothing when an
// evicted pod's replacement could not run where the plan moves it. Two
// fake nodes have one H100 each (UUIDs GPU-a and GPU-b). On each, opted-in
// 1g.10gb pods (Deployments) hold placements 0, 2, 4 and 6 and a 4g.40gb
// pod pinned to that GPU waits: freeing placement 0 moves two pods, and
// only one fits on their own GPU (placement 5), so each plan moves one to
// the other node. On node A the pods' claims only accept GPU-a (a CEL
// selector on the uuid attribute); on node B the pods' nodeSelector only
// accepts node B. Both plans are refused: no pod is evicted, no
// DeviceTaintRule is made, RefusedPlans counts them, and the log names
// the pods that could not land and why.
func TestControllerLanding(t *testing.T) {
	env := sharedEnv(t)
	nodeB := env.NodeName + "-b"
	if err := shared.c.AddFakeNode(context.Background(), nodeB, nil, nil); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f := &defragtest.Scene{T: t, Ctx: ctx, Client: env.Client, Namespace: env.Namespace, Class: env.className,
		Domain: env.Domain, PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	onB := *f
	onB.PodSpec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodeB}

	h100, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	env.publish(t, ctx, env.NodeName, mig.GPU{Index: 0, Product: h100, UUID: "GPU-a"})
	env.publish(t, ctx, nodeB, mig.GPU{Index: 0, Product: h100, UUID: "GPU-b"})
	env.makeClasses(t, ctx, h100)
	onGPU := func(uuid string) string { return fmt.Sprintf("%s == %q", env.attr(mig.AttrUUID), uuid) }
	at := func(uuid string, start int) string {
		return fmt.Sprintf("%s && %s == %d", onGPU(uuid), env.attr(mig.AttrPlacementStart), start)
	}

	// Fillers at 1, 3 and 5 of both GPUs, so that the opted-in pods land
	// at 0, 2, 4 and 6.
	for _, uuid := range []string{"GPU-a", "GPU-b"} {
		for _, s := range []int{1, 3, 5} {
			f.Pod(fmt.Sprintf("filler-%s-%d", strings.ToLower(uuid), s), "1g.10gb", at(uuid, s))
		}
	}
	placed := map[string]defragtest.Placed{}
	for i := range 4 {
		a, b := fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)
		f.Deployment(a, "1g.10gb", onGPU("GPU-a"), true)
		onB.Deployment(b, "1g.10gb", "", true)
		placed[a], placed[b] = f.WaitPlaced(a), f.WaitPlaced(b)
	}
	for i, want := range []string{"gpu-0-1g-10gb-0", "gpu-0-1g-10gb-2", "gpu-0-1g-10gb-4", "gpu-0-1g-10gb-6"} {
		for _, app := range []string{fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)} {
			if got := placed[app].Device; got != want {
				t.Fatalf("%s is on %s, want %s", app, got, want)
			}
		}
	}
	for _, uuid := range []string{"GPU-a", "GPU-b"} {
		for _, s := range []int{1, 3, 5} {
			if err := env.Client.CoreV1().Pods(env.Namespace).Delete(ctx, fmt.Sprintf("filler-%s-%d", strings.ToLower(uuid), s), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Pod("big-a", "4g.40gb", onGPU("GPU-a"))
	f.Pod("big-b", "4g.40gb", onGPU("GPU-b"))
	f.WaitUnschedulable("big-a")
	f.WaitUnschedulable("big-b")

	c, err := env.New()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if op, err := c.Step(ctx); err != nil || op != nil {
			t.Fatalf("Step = %+v, %v; want nothing", op, err)
		}
	}
	for app, want := range placed {
		if got := f.Placed(app); len(got) != 1 || got[0] != want {
			t.Errorf("%s: pods %v, want %v untouched", app, got, want)
		}
	}
	pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			t.Errorf("pod %s is being deleted", p.Name)
		}
	}
	if r := f.TaintedDevices(); len(r) != 0 {
		t.Errorf("taint rules %v, want none", r)
	}
	if n := c.RefusedPlans(); n < 2 {
		t.Errorf("RefusedPlans = %d, want at least 2 (one per node)", n)
	}
	log := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`No defragmentation for pod.*pod="` + env.Namespace + `/big-a".*pod ` + env.Namespace + `/a-[01]-\S+ cannot land at 1g.10gb at GPU 0 placement \d on node ` + nodeB + ` \(device gpu-0-1g-10gb-\d\): its claim a-[01]-\S+ does not take it`),
		regexp.MustCompile(`No defragmentation for pod.*pod="` + env.Namespace + `/big-b".*pod ` + env.Namespace + `/b-[01]-\S+ cannot land at 1g.10gb at GPU 0 placement \d on node ` + env.NodeName + `: its node selector or required node affinity excludes node ` + env.NodeName),
	} {
		if !want.MatchString(log) {
			t.Errorf("the log does not match %s", want)
		}
	}
}
