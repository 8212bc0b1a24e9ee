package deploy_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/mig/defrag/defragtest"
	pdefrag "github.com/drakit/drakit/partition/defrag"
	"github.com/drakit/drakit/testenv"
)

// defragLog is what the chart's defragmenter printed (its current pod).
func defragLog(ctx context.Context, env *testenv.Env) string {
	pods, err := env.Client.CoreV1().
		Pods(deploy.Namespace).
		List(
			ctx,
			metav1.ListOptions{
				LabelSelector: "app.kubernetes.io/name=" + deploy.Release + "-defrag",
			},
		)
	if err != nil || len(pods.Items) == 0 {
		return fmt.Sprintf("(no defragmenter pod: %v)", err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		log, err := env.ContainerLog(ctx, p.Namespace, p.Name, "defrag")
		fmt.Fprintf(&b, "pod %s (%v):\n%s\n", p.Name, err, log)
	}
	return b.String()
}

// defragNS is the namespace of the defragmentation scenario.
const defragNS = "defrag"

func celAttr(name string) string {
	return fmt.Sprintf("device.attributes[%q].%s", nvdriver.DriverName, name)
}

// at selects one dynamic GPU's placement.
func at(gpu, start int) string {
	return fmt.Sprintf(
		"%s == %d && %s == %d",
		celAttr("index"),
		gpu,
		celAttr("placementStart"),
		start,
	)
}

const dynamicOnly = `device.attributes["` + nvdriver.DriverName + `"].migMode == "dynamic"`

// testDefrag is the MIG defragmenter on the real node with the reference
// driver (run by TestE2E on its cluster, after its story): dynamic GPU 4
// holds four opted-in 1g.18gb pods at placements 0, 2, 4 and 6, each a
// Deployment's; GPUs 5-7 each hold a 3g.71gb pod at placement 0 that did
// not opt in (moving one of them would free a 4g.71gb with one
// eviction). A 4g.71gb pod on a dynamic GPU waits. While a
// PodDisruptionBudget forbids disrupting the pod at placement 0, the
// controller evicts nothing. Without it, an administrator switches the
// chart's defragmenter on (helm upgrade --set defrag.enabled=true: its
// Deployment, with the chart's RBAC, admission policies, leader election
// and taint-rule owner); it moves the pods at 0 and 2, the 4g.71gb pod
// runs on GPU 4's placement 0, the moved pods run again elsewhere, and
// nothing else is touched. Switched off again, it leaves no taint rule.
func testDefrag(t *testing.T, ctx context.Context, env *testenv.Env) {
	s := &defragtest.Scene{
		T:         t,
		Ctx:       ctx,
		Client:    env.Client,
		Namespace: defragNS,
		Class:     nvdriver.ProfileClass,
		Running:   true,
		Timeout:   3 * time.Minute,
		PodSpec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:            "ctr",
				Image:           env.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "3600"},
			}},
		},
	}
	t0 := time.Now()
	defer func() {
		t.Logf("the defragmentation scenario took %s", time.Since(t0).Round(time.Second))
	}()
	if _, err := env.Client.CoreV1().Namespaces().Create(
		ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: defragNS}},
		metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().ServiceAccounts(defragNS).Get(
			ctx, "default", metav1.GetOptions{},
		)
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	keep := map[string]defragtest.Placed{}
	for g := 5; g <= 7; g++ {
		app := fmt.Sprintf("keep-%d", g)
		s.Deployment(app, "3g.71gb", at(g, 0), false)
		keep[app] = s.WaitPlaced(app)
	}
	for _, st := range []int{1, 3, 5} {
		app := fmt.Sprintf("filler-%d", st)
		s.Pod(app, "1g.18gb", at(4, st))
		s.WaitPlaced(app)
	}
	small := map[string]defragtest.Placed{}
	byDevice := map[string]string{}
	for i := range 4 {
		app := fmt.Sprintf("small-%d", i)
		s.Deployment(app, "1g.18gb", dynamicOnly, true)
		small[app] = s.WaitPlaced(app)
		byDevice[small[app].Device] = app
	}
	var devs []string
	for d := range byDevice {
		devs = append(devs, d)
	}
	sort.Strings(devs)
	if strings.Join(
		devs,
		" ",
	) != "gpu-4-1g-18gb-0 gpu-4-1g-18gb-2 gpu-4-1g-18gb-4 gpu-4-1g-18gb-6" {
		t.Fatalf("the opted-in pods are on %v, want GPU 4's placements 0, 2, 4 and 6", devs)
	}
	for _, st := range []int{1, 3, 5} {
		if err := env.Client.CoreV1().Pods(defragNS).Delete(
			ctx,
			fmt.Sprintf("filler-%d", st),
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		); err != nil {
			t.Fatal(err)
		}
	}
	at0, at2 := byDevice["gpu-4-1g-18gb-0"], byDevice["gpu-4-1g-18gb-2"]
	s.Budget(at0)
	s.Pod("big", "4g.71gb", dynamicOnly)
	s.WaitUnschedulable("big")
	untouched := func(apps ...string) {
		t.Helper()
		for _, app := range apps {
			want, ok := keep[app]
			if !ok {
				want = small[app]
			}
			if got := s.Placed(app); len(got) != 1 || got[0] != want {
				t.Errorf("%s: running %v, want %v untouched", app, got, want)
			}
		}
	}
	c, err := defrag.New(env.Client, nvdriver.DriverName,
		pdefrag.WithInterval(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if op, err := c.Step(ctx); err != nil || op != nil {
			t.Fatalf("with %s's budget: Step = %+v, %v; want nothing", at0, op, err)
		}
	}
	untouched("keep-5", "keep-6", "keep-7", "small-0", "small-1", "small-2", "small-3")
	if n := len(s.TaintedDevices()); n != 0 {
		t.Fatalf("%d taint rules, want none", n)
	}

	if err := env.Client.PolicyV1().PodDisruptionBudgets(defragNS).Delete(
		ctx, at0, metav1.DeleteOptions{},
	); err != nil {
		t.Fatal(err)
	}
	// An administrator switches the chart's defragmenter on: its
	// Deployment, with the chart's RBAC, admission policies, leader
	// election and taint-rule owner, does the rest.
	t1 := time.Now()
	enableDefrag(t, env)
	t.Logf("helm upgrade --set defrag.enabled=true: %s", time.Since(t1).Round(time.Millisecond))
	var bigRun defragtest.Placed
	if err := poll(ctx, 4*time.Minute, func(context.Context) (bool, error) {
		got := s.Placed("big")
		if len(got) == 1 && len(s.TaintedDevices()) == 0 {
			bigRun = got[0]
			return true, nil
		}
		return false, nil
	}); err != nil {
		p, _ := env.Client.CoreV1().Pods(defragNS).Get(ctx, "big", metav1.GetOptions{})
		t.Logf("the defragmenter's log:\n%s", defragLog(ctx, env))
		t.Fatalf(
			"big does not run (%+v; events %v; %d taint rules): %v",
			p.Status.Conditions,
			s.Events("big"),
			len(s.TaintedDevices()),
			err,
		)
	}
	if log := defragLog(ctx, env); !strings.Contains(log, "Defragmentation done") {
		t.Errorf("the chart's defragmenter did not log the operation:\n%s", log)
	}
	if bigRun.Device != "gpu-4-4g-71gb-0" {
		t.Errorf("big runs on %s, want gpu-4-4g-71gb-0", bigRun.Device)
	}
	ev := s.Events("big")
	// The evictions in the planner's order of moves, which is not fixed.
	a, b := "defrag/"+small[at0].Pod, "defrag/"+small[at2].Pod
	const freed = " to free 4g.71gb at GPU 4 placement 0"
	if got := ev[pdefrag.ReasonDefragmenting]; !strings.Contains(got, "evicting "+a+", "+b+freed) &&
		!strings.Contains(got, "evicting "+b+", "+a+freed) {
		t.Errorf("big's %s event %q, want it to evict %s and %s%s",
			pdefrag.ReasonDefragmenting, got, a, b, freed)
	}
	for _, r := range []string{pdefrag.ReasonAllocated, pdefrag.ReasonPlaced} {
		if ev[r] == "" {
			t.Errorf("no %s event on big: %v", r, ev)
		}
	}
	for _, app := range []string{at0, at2} {
		if got := s.Events(small[app].Pod)[pdefrag.ReasonEvicted]; !strings.Contains(
			got,
			"evicted to make room for defrag/big",
		) {
			t.Errorf("%s's pod: %s event %q", app, pdefrag.ReasonEvicted, got)
		}
		moved := s.WaitPlaced(app)
		if moved.UID == small[app].UID {
			t.Errorf("%s was not moved", app)
		}
		t.Logf("%s moved from %s to %s", app, small[app].Device, moved.Device)
	}
	var stay []string
	for app := range small {
		if app != at0 && app != at2 {
			stay = append(stay, app)
		}
	}
	untouched(append([]string{"keep-5", "keep-6", "keep-7"}, stay...)...)

	// Switched off again: its Deployment, ClusterRole and policies go,
	// and no taint rule stays behind.
	setValues(t, env, "defrag.enabled=false")
	if _, err := env.Client.AppsV1().Deployments(deploy.Namespace).Get(
		ctx, deploy.Release+"-defrag", metav1.GetOptions{},
	); !apierrors.IsNotFound(
		err,
	) {
		t.Errorf("the defragmenter's Deployment after defrag.enabled=false: %v, want gone", err)
	}
	if n := len(s.TaintedDevices()); n != 0 {
		t.Errorf("%d taint rules after the defragmenter was switched off, want none", n)
	}

	if err := env.Client.CoreV1().Namespaces().Delete(
		ctx, defragNS, metav1.DeleteOptions{},
	); err != nil {
		t.Error(err)
	}
}

// enableDefrag switches the chart's defragmenter on, as an administrator
// does (helm upgrade --reuse-values), on the host's network and taking a
// step every 500 ms, and waits for its Deployment.
func enableDefrag(t *testing.T, env *testenv.Env) {
	t.Helper()
	setValues(t, env, "defrag.enabled=true", "defrag.hostNetwork=true", "defrag.interval=500ms")
}

// setValues changes the installed release's values, as an administrator
// does (helm upgrade --reuse-values --set ...), and waits (3 minutes at
// most) for what it changed.
func setValues(t *testing.T, env *testenv.Env, sets ...string) {
	t.Helper()
	args := []string{"upgrade", deploy.Release, "chart", "--kubeconfig", env.Kubeconfig,
		"--namespace", deploy.Namespace, "--reuse-values", "--wait", "--timeout", "3m"}
	for _, v := range sets {
		args = append(args, "--set", v)
	}
	runHelm(t, args...)
}
