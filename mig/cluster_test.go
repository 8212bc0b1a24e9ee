package mig

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// TestCounterModelOnCluster publishes the counter model of an 8 x H100
// node, in the planner's order, to a real API server (which validates the
// API limits) and lets the real kube-scheduler allocate a 1g.10gb claim:
// it must get the planner's placement, not NVIDIA's static first fit.
func TestCounterModelOnCluster(t *testing.T) {
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const node, driver = "gpu-node", "gpu.drakit.io"
	if err := c.AddFakeNode(ctx, node, nil, nil); err != nil {
		t.Fatal(err)
	}
	var fleet []FleetGPU
	for i := 0; i < 8; i++ {
		fleet = append(fleet, FleetGPU{Node: node, Index: i, Product: testProduct("NVIDIA H100 80GB HBM3")})
	}
	fleet[0].Layout = Layout{{Profile: "4g.40gb", Start: 0, InUse: true}}
	gpus, err := ModelGPUs(fleet)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	names, err := Preference(fleet)
	if err != nil {
		t.Fatal(err)
	}
	ordered, err := m.Reorder(names)
	if err != nil {
		t.Fatal(err)
	}
	slices := ordered.Slices(driver, node, node, 1)
	for _, s := range slices {
		if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("API server rejects slice %s (%d devices, %d counter sets): %v", s.Name, len(s.Spec.Devices), len(s.Spec.SharedCounters), err)
		}
	}
	attr := func(n string) string { return fmt.Sprintf("device.attributes[%q].%s", driver, n) }
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "mig.drakit.io"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q && %s == \"mig\"", driver, attr(AttrType))},
		}}},
	}
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The 4g.40gb on GPU 0 is in use: a claim holds it.
	inUse := newClaim("in-use", class.Name, fmt.Sprintf(`%s == 0 && %s == "4g.40gb"`, attr(AttrIndex), attr(AttrProfile)))
	want1g := ""
	for _, n := range names {
		if r, _ := ParseDeviceName(n); r.Profile == "1g.10gb" && r.GPU == 0 {
			want1g = n // the first fitting 1g.10gb of GPU 0 in the planner's order
			break
		}
	}
	if want1g != "gpu-0-1g-10gb-6" {
		t.Fatalf("planner's first 1g.10gb is %s, want gpu-0-1g-10gb-6", want1g)
	}
	for i, cl := range []*resourceapi.ResourceClaim{inUse, newClaim("small", class.Name, fmt.Sprintf(`%s == "1g.10gb"`, attr(AttrProfile)))} {
		if _, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, cl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: cl.Name, Namespace: "default"},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cl.Name}},
			},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitAllocated(ctx, t, c.Client.ResourceV1().ResourceClaims("default").Get, cl.Name)
		want := []string{"gpu-0-4g-40gb-0", want1g}[i]
		if got != want {
			t.Errorf("scheduler allocated %s to claim %s, want %s", got, cl.Name, want)
		}
	}
}

func newClaim(name, class, selector string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class,
				Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}},
			},
		}}}},
	}
}

func waitAllocated(ctx context.Context, t *testing.T, get func(context.Context, string, metav1.GetOptions) (*resourceapi.ResourceClaim, error), name string) string {
	t.Helper()
	var dev string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cl, err := get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if cl.Status.Allocation == nil || len(cl.Status.Allocation.Devices.Results) == 0 {
			return false, nil
		}
		dev = cl.Status.Allocation.Devices.Results[0].Device
		return true, nil
	})
	if err != nil {
		t.Fatalf("claim %s not allocated: %v", name, err)
	}
	return dev
}

// TestPreferredPoolsOnCluster publishes the chosen dynamic-MIG model of an
// 8 x H100 node the way a driver does (DefaultProfiles, PreferredPools
// with WithFitOnly, device.Inventory) to a real API server and lets the
// real kube-scheduler allocate: one 1g device, which must be the
// planner's pick, then, after the driver made it and republished, four 1g
// devices on one GPU as one request with a count and matchAttribute (the
// documented shape).
func TestPreferredPoolsOnCluster(t *testing.T) {
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const node, driver = "gpu-node", "gpu.drakit.io"
	if err := c.AddFakeNode(ctx, node, nil, nil); err != nil {
		t.Fatal(err)
	}
	p := testProduct("H100-80GB")
	var gpus []GPU
	var fleet []FleetGPU
	for i := 0; i < 8; i++ {
		gpus = append(gpus, GPU{Index: i, Product: p, UUID: fmt.Sprintf("GPU-%d", i), Profiles: DefaultProfiles(p)})
		fleet = append(fleet, FleetGPU{Node: node, Index: i, Product: p})
	}
	m, err := NewCounterModel(gpus)
	if err != nil {
		t.Fatal(err)
	}
	sliceAPI := c.Client.ResourceV1().ResourceSlices()
	var published []string
	publish := func(generation int64) {
		t.Helper()
		for _, n := range published {
			if err := sliceAPI.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		published = nil
		pools, err := m.PreferredPools(node, fleet, WithFitOnly())
		if err != nil {
			t.Fatal(err)
		}
		inv := &device.Inventory{Driver: driver, Pools: pools}
		if err := inv.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, s := range inv.ResourceSlices(node) {
			s.Spec.Pool.Generation = generation
			if _, err := sliceAPI.Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatalf("API server rejects slice %s (%d devices, %d counter sets): %v", s.Name, len(s.Spec.Devices), len(s.Spec.SharedCounters), err)
			}
			published = append(published, s.Name)
		}
	}
	publish(1)
	attr := func(n string) string { return fmt.Sprintf("device.attributes[%q].%s", driver, n) }
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "mig-1g-10gb.drakit.io"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && %s == "mig" && %s == "1g.10gb"`, driver, attr(AttrType), attr(AttrProfile))}}}},
	}
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := func(name string, count int64) []string {
		t.Helper()
		cl := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name, Count: count}}},
			}},
		}
		if count > 1 {
			cl.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(driver + "/" + AttrIndex))}}
		}
		if _, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, cl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "mig"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "mig", ResourceClaimName: &cl.Name}},
			},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAllocated(ctx, t, c.Client.ResourceV1().ResourceClaims("default").Get, name)
		got, err := c.Client.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var devs []string
		for _, r := range got.Status.Allocation.Devices.Results {
			devs = append(devs, r.Device)
		}
		return devs
	}
	// One 1g: the planner's pick, not the static first fit.
	pref, err := Preference(fleet, WithProfiles(DefaultProfiles), WithFitOnly())
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, n := range pref {
		if ref, _ := ParseDeviceName(n); ref.Profile == "1g.10gb" {
			want = n
			break
		}
	}
	if want == "gpu-0-1g-10gb-0" {
		t.Fatalf("the planner's pick is the static first fit %s: the test proves less than it should", want)
	}
	if got := run("first", 1); len(got) != 1 || got[0] != want {
		t.Fatalf("scheduler allocated %v, want the planner's %s", got, want)
	}
	// The driver makes the instance at prepare and republishes.
	ref, _ := ParseDeviceName(want)
	fleet[ref.GPU].Layout = append(fleet[ref.GPU].Layout, Instance{Profile: ref.Profile, Start: ref.Start, InUse: true})
	publish(2)
	// Four 1g on one GPU: one request with a count and matchAttribute.
	four := run("four", 4)
	if len(four) != 4 {
		t.Fatalf("claim for four got %v", four)
	}
	gpu := -1
	for _, d := range four {
		ref, err := ParseDeviceName(d)
		if err != nil || ref.Profile != "1g.10gb" || (gpu >= 0 && ref.GPU != gpu) || d == want {
			t.Fatalf("claim for four 1g.10gb on one GPU got %v (%s is in use)", four, want)
		}
		gpu = ref.GPU
	}
}
