package topology_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/topology"
	"github.com/drakit/drakit/topology/topologytest"
)

// One cluster serves every integration test of the package: started on
// first use (so unit tests alone start nothing), stopped in TestMain.
var (
	shared     *cluster.Cluster
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop local cluster: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// localCluster returns the shared cluster, with gang scheduling on (it does
// not change how plain pods are scheduled). It skips under -short.
func localCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real cluster; skipped with -short")
	}
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared, sharedErr = cluster.Start(ctx, cluster.WithGangScheduling())
	})
	if sharedErr != nil {
		t.Fatalf("start local cluster (run hack/setup.sh if the binaries are missing): %v", sharedErr)
	}
	return shared
}

// addFakeNode is cluster.AddFakeNode retried on write conflicts: a
// controller may touch the new node between its create and status update.
func addFakeNode(ctx context.Context, c *cluster.Cluster, name string, labels map[string]string, alloc corev1.ResourceList) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return c.AddFakeNode(ctx, name, labels, alloc) })
}

func createNamespace(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The default ServiceAccount must exist before pods can be created.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("wait for default ServiceAccount in %s: %v", name, err)
	}
}

// pausePod is a pod that only needs scheduling: fake nodes run nothing.
func pausePod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", ImagePullPolicy: corev1.PullNever}},
		},
	}
}

// waitPod waits until cond holds for the pod and returns the pod.
func waitPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("wait for pod %s/%s to be %s: %v; last seen: %+v\n%s", ns, name, what, err, podSummary(pod), diagnose(cs, ns))
	}
	return pod
}

// diagnose lists the namespace's events and claims for a failure message.
func diagnose(cs kubernetes.Interface, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "event %s/%s: %s %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	if cl, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range cl.Items {
			fmt.Fprintf(&b, "claim %s: allocated=%t reservedFor=%d\n", c.Name, c.Status.Allocation != nil, len(c.Status.ReservedFor))
		}
	}
	return b.String()
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func podSummary(p *corev1.Pod) string {
	if p == nil {
		return "<none>"
	}
	return fmt.Sprintf("node=%q conditions=%+v", p.Spec.NodeName, p.Status.Conditions)
}

// publish runs one test driver's ResourceSlice controller (the component a
// real driver uses) for node, with the devices read from sysfs.
func publish(t *testing.T, ctx context.Context, cs kubernetes.Interface, driver, node string, devices []resourceapi.Device) {
	t.Helper()
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: driver,
		KubeClient: cs,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
		Resources: &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
			node: {Slices: []resourceslice.Slice{{Devices: devices}}},
		}},
	})
	if err != nil {
		t.Fatalf("start slice controller of %s: %v", driver, err)
	}
	t.Cleanup(ctrl.Stop)
}

// pciDevices builds API devices for the named PCI functions from sysfs,
// in the order given.
func pciDevices(t *testing.T, root string, names, busIDs []string) []resourceapi.Device {
	t.Helper()
	var out []resourceapi.Device
	for i, id := range busIDs {
		d, err := topology.ReadPCIDevice(id, topology.WithSysfsRoot(root))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resourceapi.Device{Name: names[i], Attributes: d.Attributes})
	}
	return out
}

// TestAlignedAllocationOnCluster: a GPU-like and a NIC-like driver publish
// devices on two PCIe roots of a fake node. The real scheduler gives claims
// asking for a GPU and a NIC on one root only aligned pairs, and leaves the
// third such pod pending when no aligned pair is left. A second fake node
// with the same devices is the control: there a claim without the
// constraint gets a pair across roots, so the aligned results are the
// constraint's doing and not the drivers' device order.
//
// The claims are standalone ResourceClaims that the pods name, so the test
// needs only the scheduler, not the resource-claim controller.
func TestAlignedAllocationOnCluster(t *testing.T) {
	c := localCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := c.Client
	const (
		ns      = "topology-dra"
		node    = "topo-dra-0"
		control = "topo-dra-control"
		gpu     = "gpu.topology.drakit.dev"
		nic     = "nic.topology.drakit.dev"
	)
	createNamespace(t, ctx, cs, ns)

	// Root pci0000:00 has gpu-0 and nic-0, root pci0000:80 gpu-1 and
	// nic-1. The NIC driver lists nic-1 first, so first fit without the
	// constraint pairs gpu-0 with nic-1 across roots.
	sys, err := topologytest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []topologytest.PCIDevice{
		{BusID: "0000:03:00.0", Root: "pci0000:00", Bridges: []string{"0000:00:01.0", "0000:01:00.0", "0000:02:00.0"}, NUMANode: 0},
		{BusID: "0000:04:00.0", Root: "pci0000:00", Bridges: []string{"0000:00:01.0", "0000:01:00.0", "0000:02:01.0"}, NUMANode: 0},
		{BusID: "0000:83:00.0", Root: "pci0000:80", Bridges: []string{"0000:80:01.0", "0000:81:00.0", "0000:82:00.0"}, NUMANode: 1},
		{BusID: "0000:84:00.0", Root: "pci0000:80", Bridges: []string{"0000:80:01.0", "0000:81:00.0", "0000:82:01.0"}, NUMANode: 1},
	} {
		if err := sys.AddPCIDevice(d); err != nil {
			t.Fatal(err)
		}
	}
	rootOf := map[string]string{"gpu-0": "pci0000:00", "nic-0": "pci0000:00", "gpu-1": "pci0000:80", "nic-1": "pci0000:80"}
	gpus := pciDevices(t, sys.Root, []string{"gpu-0", "gpu-1"}, []string{"0000:03:00.0", "0000:83:00.0"})
	nics := pciDevices(t, sys.Root, []string{"nic-1", "nic-0"}, []string{"0000:84:00.0", "0000:04:00.0"})
	for _, n := range []string{node, control} {
		if err := addFakeNode(ctx, c, n, nil, nil); err != nil {
			t.Fatal(err)
		}
		publish(t, ctx, cs, gpu, n, gpus)
		publish(t, ctx, cs, nic, n, nics)
	}
	for _, class := range []string{gpu, nic} {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, driverClass(class), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.ResourceV1().DeviceClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
		})
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 4, nil
	}); err != nil {
		t.Fatalf("wait for the two drivers' slices on two nodes: %v", err)
	}

	requests := []topology.Request{{Name: "gpu", DeviceClassName: gpu}, {Name: "nic", DeviceClassName: nic}}
	loose, err := topology.ClaimSpec(requests)
	if err != nil {
		t.Fatal(err)
	}
	aligned, err := topology.ClaimSpec(requests, topology.SamePCIeRoot("gpu", "nic"))
	if err != nil {
		t.Fatal(err)
	}
	// start creates a claim with spec and a pod on onNode that uses it.
	start := func(name, onNode string, spec resourceapi.ResourceClaimSpec) {
		t.Helper()
		if _, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, topology.Claim(ns, name, spec), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := pausePod(ns, name)
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: onNode}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devs", ResourceClaimName: ptr.To(name)}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "devs"}}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// allocation returns the devices of the pod's claim once it is bound.
	allocation := func(name string) []string {
		t.Helper()
		waitPod(t, ctx, cs, ns, name, "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		claim, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if claim.Status.Allocation == nil {
			t.Fatalf("pod %s is bound but its claim is not allocated", name)
		}
		var devs []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			devs = append(devs, r.Device)
		}
		sort.Strings(devs)
		return devs
	}

	start("loose", control, loose)
	if devs := allocation("loose"); len(devs) != 2 || rootOf[devs[0]] == rootOf[devs[1]] {
		t.Fatalf("control pod without the constraint got %v; want a pair across roots (else this test proves nothing)", devs)
	}

	seen := map[string]bool{}
	for i := range 2 {
		name := fmt.Sprintf("aligned-%d", i)
		start(name, node, aligned)
		devs := allocation(name)
		if len(devs) != 2 || rootOf[devs[0]] != rootOf[devs[1]] {
			t.Errorf("pod %s got %v: not a GPU and a NIC on one PCIe root", name, devs)
		}
		for _, d := range devs {
			if seen[d] {
				t.Errorf("device %s allocated twice", d)
			}
			seen[d] = true
		}
	}
	start("aligned-2", node, aligned)
	p := waitPod(t, ctx, cs, ns, "aligned-2", "unschedulable", unschedulable)
	if p.Spec.NodeName != "" {
		t.Errorf("third aligned pod was bound to %s with no aligned pair left", p.Spec.NodeName)
	}
	claim, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, "aligned-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation != nil {
		t.Errorf("claim of the pending pod is allocated: %+v", claim.Status.Allocation.Devices.Results)
	}
}

// TestGangInOneRackOnCluster: fake nodes in two racks, labelled by the
// Labeler from a cloud label; a PodGroup constrained to the rack key lands
// all in one rack, and a gang that fits the cluster but no single rack is
// not bound at all.
func TestGangInOneRackOnCluster(t *testing.T) {
	c := localCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := c.Client
	const ns = "topology-gang"
	createNamespace(t, ctx, cs, ns)

	// Two nodes per rack, two 1-CPU pods per node: four per rack. The
	// racks come from the AWS network label, as on EKS.
	twoCPUs := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	rackOf := map[string]string{}
	var nodes []string
	for _, rack := range []string{"a", "b"} {
		for i := range 2 {
			name := fmt.Sprintf("topo-gang-%s%d", rack, i)
			labels := map[string]string{"topology.k8s.aws/network-node-layer-3": "nn-" + rack, "topology-test": "gang"}
			if err := addFakeNode(ctx, c, name, labels, twoCPUs); err != nil {
				t.Fatal(err)
			}
			rackOf[name] = "nn-" + rack
			nodes = append(nodes, name)
		}
	}

	l, err := topology.NewLabeler()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		// Dry run first: the API server validates, nothing is stored.
		p, err := l.LabelNode(ctx, cs.CoreV1().Nodes(), n, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Changes) != 1 || p.Changes[0].Key != topology.RackLabel {
			t.Fatalf("plan for %s: %+v, want the rack label", n, p)
		}
		got, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got.Labels[topology.RackLabel]; ok {
			t.Fatalf("dry run wrote %s on %s", topology.RackLabel, n)
		}
		if _, err := l.LabelNode(ctx, cs.CoreV1().Nodes(), n, false); err != nil {
			t.Fatal(err)
		}
		got, err = cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels[topology.RackLabel] != rackOf[n] || got.Annotations[topology.OwnedLabelsAnnotation] != topology.RackLabel {
			t.Fatalf("node %s after labelling: labels %v, annotations %v", n, got.Labels, got.Annotations)
		}
		// Labelling again changes nothing.
		if p, err := l.LabelNode(ctx, cs.CoreV1().Nodes(), n, false); err != nil || !p.Empty() {
			t.Fatalf("second labelling of %s: %+v, %v", n, p, err)
		}
	}

	gang := func(name string, size int32) []string {
		t.Helper()
		pg, err := topology.PodGroup(ns, name, size, topology.LevelRack)
		if err != nil {
			t.Fatal(err)
		}
		created, err := cs.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The constraint is silently dropped when the gate is off.
		if created.Spec.SchedulingConstraints == nil || len(created.Spec.SchedulingConstraints.Topology) != 1 {
			t.Fatalf("PodGroup %s lost its topology constraint on write: %+v", name, created.Spec)
		}
		var pods []string
		for i := range size {
			p := pausePod(ns, fmt.Sprintf("%s-%d", name, i))
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
			p.Spec.NodeSelector = map[string]string{"topology-test": "gang"}
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p.Name)
		}
		return pods
	}

	// A gang of 3 fits in either rack: all land in one.
	racks := map[string]int{}
	for _, p := range gang("fits", 3) {
		pod := waitPod(t, ctx, cs, ns, p, "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		racks[rackOf[pod.Spec.NodeName]]++
	}
	if len(racks) != 1 {
		t.Errorf("gang constrained to one rack spread over racks %v", racks)
	}

	// Now one rack has 1 free slot and the other 4: a gang of 5 fits the
	// cluster (5 slots) but no rack, so none of its pods is bound.
	pods := gang("too-big", 5)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pg, err := cs.SchedulingV1beta1().PodGroups(ns).Get(ctx, "too-big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == schedulingv1beta1.PodGroupInitiallyScheduled && c.Status == metav1.ConditionFalse && c.Reason == schedulingv1beta1.PodGroupReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("wait for PodGroup too-big to be reported unschedulable: %v", err)
	}
	var bound []string
	for _, name := range pods {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			bound = append(bound, name+"@"+p.Spec.NodeName)
		}
	}
	if len(bound) > 0 {
		t.Errorf("gang that fits no rack has bound pods: %s", strings.Join(bound, ", "))
	}
}
