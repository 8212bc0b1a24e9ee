package claimwatch_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/claimwatch"
	"github.com/drakit/drakit/partition/plan"
	"github.com/drakit/drakit/testenv"
)

const (
	drv       = "accel.example.com"
	class1    = "small.accel.example.com"
	classCard = "card.accel.example.com"
	ext1      = corev1.ResourceName("example.com/small")
)

// TestWatcher drives claims and pods through a real API server and
// checks, after each step, what the Watcher says is allocated and asked
// for.
func TestWatcher(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := claimwatch.New(env.Client, drv, claimwatch.WithClass(class1, "small"), claimwatch.WithClass(classCard, partition.WholeCard),
		claimwatch.WithExtendedResource(ext1, "small"), claimwatch.WithPublished(env.NodeName), claimwatch.WithMaxPerClaim(func(p string) int {
			if p == partition.WholeCard {
				return 8 // a claim for nine whole cards fits on no node
			}
			return 100
		}))
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan struct{}, 1000)
	w.OnChange(func() { changes <- struct{}{} })
	claims := env.Client.ResourceV1().ResourceClaims("default")

	// A claim from before the start counts once the Watcher has synced.
	if _, err := claims.Create(ctx, claim("before", req("a", class1, 2)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What an earlier process published on the node: this driver's
	// slice is read, another driver's and another node's are not.
	for _, sl := range []*resourceapi.ResourceSlice{
		slice("mine", drv, env.NodeName, "node-a", "card-1", "card-0-small-0"),
		slice("theirs", "other.example.com", env.NodeName, "node-a", "x"),
		slice("elsewhere", drv, "node-b", "node-b", "card-0"),
	} {
		if _, err := env.Client.ResourceV1().ResourceSlices().Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.Published("node-a"); !slices.Equal(got, []string{"card-0-small-0", "card-1"}) {
		t.Errorf("Published(node-a) = %v", got)
	}
	if got := w.Published("node-b"); got != nil {
		t.Errorf("Published(node-b) = %v, another node's", got)
	}
	if err := w.Start(ctx); err == nil {
		t.Error("a second Start did not fail")
	}
	expect(t, w, "synced", plan.Demand{"small": 2}, nil)

	// Requests: exact counts, a whole card, subrequests (the first mapped
	// one counts), classes not mapped (nothing).
	sub := resourceapi.DeviceRequest{Name: "b", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "x", DeviceClassName: "other.example.com"},
		{Name: "y", DeviceClassName: classCard},
		{Name: "z", DeviceClassName: class1}}}
	for _, c := range []*resourceapi.ResourceClaim{
		claim("mixed", req("a", class1, 1), sub),
		claim("other", req("a", "other.example.com", 3)),
		claim("huge", req("a", classCard, 9), req("b", class1, 1)),
	} {
		if _, err := claims.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// "huge" asks for more whole cards than a node has: only its small
	// partition counts.
	expect(t, w, "created", plan.Demand{"small": 4, partition.WholeCard: 1}, nil)
	if len(changes) == 0 {
		t.Error("no change was notified")
	}

	// Allocating a claim moves it from the demand to Allocated, with only
	// this driver's devices.
	c, err := claims.Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "a", Driver: drv, Pool: "node-a", Device: "card-0-small-1"},
		{Request: "a", Driver: drv, Pool: "node-a", Device: "card-0-small-0"},
	}}}
	if c, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	m, err := claims.Get(ctx, "mixed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "a", Driver: drv, Pool: "node-a", Device: "card-0-small-1"}, // shared with "before" (admin access)
		{Request: "b/y", Driver: "other.example.com", Pool: "node-a", Device: "card-1"},
	}}}
	if m, err = claims.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "allocated", plan.Demand{"small": 1}, map[string][]string{"node-a": {"card-0-small-0", "card-0-small-1"}})

	// A device two claims hold stays allocated until both let it go.
	c.Status.Allocation = nil
	if _, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "deallocated", plan.Demand{"small": 3}, map[string][]string{"node-a": {"card-0-small-1"}})
	if err := claims.Delete(ctx, "mixed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"before", "huge"} {
		if err := claims.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, w, "deleted", nil, nil)

	// Unscheduled pods' extended resources count until a node is bound.
	pods := env.Client.CoreV1().Pods("default")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "i", Image: "busybox", Resources: limits(ext1, 3)}},
		Containers: []corev1.Container{
			{Name: "a", Image: "busybox", Resources: limits(ext1, 1)},
			{Name: "b", Image: "busybox", Resources: limits(ext1, 1)},
			{Name: "c", Image: "busybox"},
		}}}
	// The scheduler would bind it to a node nobody serves: it must stay
	// unscheduled while the test looks at it, so it names a scheduler
	// that does not run.
	pod.Spec.SchedulerName = "nobody"
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "pod pending", plan.Demand{"small": 3}, nil)
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Target: corev1.ObjectReference{Kind: "Node", Name: env.NodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "pod bound", nil, nil)
}

func TestNewErrors(t *testing.T) {
	for name, f := range map[string]func() error{
		"nil client": func() error { _, err := claimwatch.New(nil, drv); return err },
		"no driver":  func() error { _, err := claimwatch.New(fakeClient(), ""); return err },
		"no class":   func() error { _, err := claimwatch.New(fakeClient(), drv, claimwatch.WithClass("", "x")); return err },
		"no resource": func() error {
			_, err := claimwatch.New(fakeClient(), drv, claimwatch.WithExtendedResource("", "x"))
			return err
		},
	} {
		if err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// expect waits until the Watcher says demand and allocated (per pool),
// or fails with what it says.
func expect(t *testing.T, w *claimwatch.Watcher, step string, demand plan.Demand, allocated map[string][]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := w.Demand()
		got := map[string][]string{}
		for _, pool := range []string{"node-a", "node-b"} {
			if a := w.Allocated(pool); len(a) > 0 {
				got[pool] = a
			}
		}
		if maps.Equal(d, demand) || len(d) == 0 && len(demand) == 0 {
			if maps.EqualFunc(got, allocated, slices.Equal) || len(got) == 0 && len(allocated) == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: demand %v, allocated %v; want %v, %v", step, d, got, demand, allocated)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func slice(name, driver, node, pool string, devices ...string) *resourceapi.ResourceSlice {
	sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1}}}
	for _, d := range devices {
		sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: d})
	}
	return sl
}

func claim(name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}
}

func req(name, class string, n int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n}}
}

func limits(name corev1.ResourceName, n int64) corev1.ResourceRequirements {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return corev1.ResourceRequirements{Limits: corev1.ResourceList{name: q}, Requests: corev1.ResourceList{name: q}}
}

// fakeClient is a client of an address nothing serves: New never calls it.
func fakeClient() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
}
