package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/cluster/clustertest"
	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

// TestModesOnCluster publishes an instinct-like node of two cards through
// device.Inventory to a real API server (which checks the API's limits)
// and lets the real kube-scheduler allocate. A claim any device of the
// driver satisfies gets a partition, not a whole card (the planner's
// order, fit-only). Then, with every device published in the static
// order (card 0's first), a claim for a partition of another mode must
// go to card 1: only the mode counters keep it off card 0.
func TestModesOnCluster(t *testing.T) {
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const node = "accel-node"
	if err := c.AddFakeNode(ctx, node, nil, nil); err != nil {
		t.Fatal(err)
	}
	s := instinctLike(t)
	fleet := []partition.FleetCard{{Node: node, Index: 0, Scheme: s}, {Node: node, Index: 1, Scheme: s}}
	cards, err := partition.ModelCards(fleet)
	if err != nil {
		t.Fatal(err)
	}
	m, err := partition.NewCounterModel(cards)
	if err != nil {
		t.Fatal(err)
	}
	sliceAPI := c.Client.ResourceV1().ResourceSlices()
	var published []string
	publish := func(pools []device.Pool, generation int64) {
		t.Helper()
		for _, n := range published {
			if err := sliceAPI.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		published = nil
		inv := &device.Inventory{Driver: testDriver, Pools: pools}
		if err := inv.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, sl := range inv.ResourceSlices(node) {
			sl.Spec.Pool.Generation = generation
			if _, err := sliceAPI.Create(ctx, sl, metav1.CreateOptions{}); err != nil {
				t.Fatalf("API server rejects slice %s: %v", sl.Name, err)
			}
			published = append(published, sl.Name)
		}
	}
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "any.accel.example.com"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", testDriver)}}}},
	}
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := func(name, selector string) partition.DeviceRef {
		t.Helper()
		req := &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}
		if selector != "" {
			req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		cl := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "xcp", Exactly: req}}}},
		}
		if _, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, cl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "xcp"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "xcp", ResourceClaimName: &cl.Name}},
			},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var dev string
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := c.Client.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) == 0 {
				return false, err
			}
			dev = got.Status.Allocation.Devices.Results[0].Device
			return true, nil
		})
		if err != nil {
			t.Fatalf("claim %s not allocated: %v", name, err)
		}
		ref, err := s.ParseDeviceName(dev)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}

	pools, err := m.PreferredPools(node, fleet, partition.WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	publish(pools, 1)
	first := run("any", "")
	if first.Profile == "" {
		t.Fatalf("a claim any device satisfies got whole card %d", first.Card)
	}
	if first.Card != 0 {
		t.Fatalf("the first partition went to card %d: card 0, whose devices come first in the static order, must hold it for the test to prove anything", first.Card)
	}
	fleet[first.Card].Layout = partition.Layout{{Profile: first.Profile, Start: first.Start, InUse: true}}

	other := "CPX/NPS4"
	if first.Profile == other {
		other = "CPX/NPS1"
	}
	publish(m.Pools(node), 2)
	attr := func(n string) string { return fmt.Sprintf("device.attributes[%q].%s", testDriver, n) }
	// The type first: the whole cards have no profile attribute, and a
	// selector that reads a missing attribute fails the claim.
	second := run("other-mode", fmt.Sprintf(`%s == %q && %s == %q`, attr(s.Names.TypeAttribute), s.Names.PartitionType, attr(s.Names.ProfileAttribute), other))
	if second.Card == first.Card {
		t.Errorf("a %s partition went to card %d beside the %s one: %+v", other, first.Card, first.Profile, second)
	}
}
