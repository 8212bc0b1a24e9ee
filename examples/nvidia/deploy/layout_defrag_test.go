package deploy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/mig/defrag/defragtest"
	pdefrag "github.com/drakit/drakit/partition/defrag"
	"github.com/drakit/drakit/testenv"
)

// testLayoutDefrag is the MIG defragmenter with the chart's default
// publication, the layout (run by TestE2E on its cluster, after its
// story): three dynamic GPUs run a 7g each (not movable), the fourth two
// opted-in 1g pods, one in each half, so that no 4g.71gb fits anywhere.
// A 4g pod waits; once it has waited the planner's aging (5 s here) the
// planner reserves that GPU for 4g (its node opens nothing else there).
// The administrator switches the chart's defragmenter on: it evicts the
// one 1g pod in the half the 4g goes to (plan.Defragment pinned to
// the reserved card), the reservation keeps that half, the 4g pod runs
// there, the evicted pod's replacement runs once the 4g is placed, and
// the other 1g pod is untouched.
func testLayoutDefrag(t *testing.T, ctx context.Context, env *testenv.Env) {
	const ns = "defrag-layout"
	s := &defragtest.Scene{
		T:         t,
		Ctx:       ctx,
		Client:    env.Client,
		Namespace: ns,
		Class:     nvdriver.ProfileClass,
		Running:   true,
		Timeout:   2 * time.Minute,
		PodSpec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "ctr", Image: env.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
	t0 := time.Now()
	defer func() {
		t.Logf("the layout defragmentation scenario took %s", time.Since(t0).Round(time.Second))
	}()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The planner's aging short, so that the reservation comes soon.
	setValues(t, env, "planner.aging=5s")
	gpuOf := func(device string) int {
		ref, err := mig.ParseDeviceName(device)
		if err != nil {
			t.Fatal(err)
		}
		return ref.GPU
	}
	keep := map[int]string{}
	for i := range 3 {
		app := fmt.Sprintf("keep-%d", i)
		s.Deployment(app, "7g.141gb", dynamicOnly, false)
		keep[gpuOf(s.WaitPlaced(app).Device)] = app
	}
	small := map[string]defragtest.Placed{}
	for i := range 7 {
		app := fmt.Sprintf("small-%d", i)
		s.Deployment(app, "1g.18gb", dynamicOnly, true)
		small[app] = s.WaitPlaced(app)
	}
	g := gpuOf(small["small-0"].Device)
	if _, kept := keep[g]; kept || len(keep) != 3 {
		t.Fatalf("7g pods on GPUs %v, the 1g pods on GPU %d: want them apart", keep, g)
	}
	// Keep one 1g in each half of GPU g: the lowest start below 4 and the
	// highest at 4 or above.
	low, high := "", ""
	for app, p := range small {
		ref, _ := mig.ParseDeviceName(p.Device)
		if ref.GPU != g {
			t.Fatalf("%s on %s, want GPU %d", app, p.Device, g)
		}
		if ref.Start < 4 && (low == "" || ref.Start < mustStart(small[low].Device)) {
			low = app
		}
		if ref.Start >= 4 && (high == "" || ref.Start > mustStart(small[high].Device)) {
			high = app
		}
	}
	if low == "" || high == "" {
		t.Fatalf("the 1g pods %v leave no half of GPU %d", small, g)
	}
	for app := range small {
		if app == low || app == high {
			continue
		}
		err := env.Client.AppsV1().Deployments(ns).Delete(ctx, app, metav1.DeleteOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Pod("big", "4g.71gb", dynamicOnly)
	s.WaitUnschedulable("big")
	// The planner reserves GPU g for 4g once big has waited its aging.
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		want := fmt.Sprintf(`"reserved":[{"card":%d,"profile":"4g.71gb"}]`, g)
		return strings.Contains(ledgerJSON(t, ctx, env), want), nil
	}); err != nil {
		t.Fatalf("the planner reserved no GPU for big: %v\n%s", err, ledgerJSON(t, ctx, env))
	}

	enableDefrag(t, env)
	var bigRun defragtest.Placed
	if err := poll(ctx, 3*time.Minute, func(context.Context) (bool, error) {
		got := s.Placed("big")
		if len(got) == 1 {
			bigRun = got[0]
			return true, nil
		}
		return false, nil
	}); err != nil {
		p, _ := env.Client.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{})
		t.Logf("the defragmenter's log:\n%s", defragLog(ctx, env))
		t.Fatalf(
			"big does not run (%+v; events %v): %v\n%s",
			p.Status.Conditions,
			s.Events("big"),
			err,
			ledgerJSON(t, ctx, env),
		)
	}
	if ref, _ := mig.ParseDeviceName(bigRun.Device); ref.GPU != g || ref.Profile != "4g.71gb" {
		t.Errorf("big runs on %s, want a 4g.71gb of GPU %d", bigRun.Device, g)
	}
	moved := low
	if mustStart(bigRun.Device) >= 4 {
		moved = high
	}
	stayed := low + high
	stayed = strings.Replace(stayed, moved, "", 1)
	if got := s.Placed(stayed); len(got) != 1 || got[0] != small[stayed] {
		t.Errorf("%s: running %v, want %v untouched", stayed, got, small[stayed])
	}
	if ev := s.Events("big")[pdefrag.ReasonDefragmenting]; !strings.Contains(ev, small[moved].Pod) {
		t.Errorf(
			"big's %s event %q does not name %s",
			pdefrag.ReasonDefragmenting,
			ev,
			small[moved].Pod,
		)
	}
	// The evicted pod's replacement runs once big is placed.
	again := s.WaitPlaced(moved)
	if again.UID == small[moved].UID {
		t.Errorf("%s was not moved: %v", moved, again)
	}
	t.Logf(
		"big on %s; %s moved from %s to %s",
		bigRun.Device,
		moved,
		small[moved].Device,
		again.Device,
	)
	if !slices.Contains([]string{"1g.18gb"}, mustProfile(again.Device)) {
		t.Errorf("the replacement got %s", again.Device)
	}
}

func mustStart(device string) int {
	ref, err := mig.ParseDeviceName(device)
	if err != nil {
		return -1
	}
	return ref.Start
}

func mustProfile(device string) string {
	ref, err := mig.ParseDeviceName(device)
	if err != nil {
		return ""
	}
	return ref.Profile
}

// ledgerJSON is the node's layout ledger as stored (for messages).
func ledgerJSON(t *testing.T, ctx context.Context, env *testenv.Env) string {
	t.Helper()
	l, err := env.Client.CoreV1().ConfigMaps(deploy.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, cm := range l.Items {
		if strings.HasPrefix(cm.Name, "layout-") {
			out = append(out, cm.Data["ledger.json"])
		}
	}
	return strings.Join(out, "\n")
}
