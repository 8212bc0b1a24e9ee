package deploy_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/testenv"
)

// helmInstall installs the chart onto env with set as --set values,
// without --wait: the DaemonSet's pods on fake nodes never run.
func helmInstall(t *testing.T, ctx context.Context, env *testenv.Env, set ...string) {
	t.Helper()
	args := []string{"install", deploy.Release, "chart", "--kubeconfig", env.Kubeconfig,
		"--namespace", deploy.Namespace, "--create-namespace"}
	for _, v := range set {
		args = append(args, "--set", v)
	}
	if out, err := exec.CommandContext(ctx, helm(t), args...).CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
}

// driverPods waits until the DaemonSet has scheduled a pod on each of
// nodes, and none elsewhere, and returns them by node.
func driverPods(
	t *testing.T,
	ctx context.Context,
	env *testenv.Env,
	nodes ...string,
) map[string]*corev1.Pod {
	t.Helper()
	var byNode map[string]*corev1.Pod
	var last string
	err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		ds, err := env.Client.AppsV1().
			DaemonSets(deploy.Namespace).
			Get(ctx, deploy.DaemonSet, metav1.GetOptions{})
		if err != nil || ds.Status.ObservedGeneration < ds.Generation {
			return false, nil
		}
		pods, err := env.Client.CoreV1().
			Pods(deploy.Namespace).
			List(ctx, metav1.ListOptions{LabelSelector: deploy.PodSelector})
		if err != nil {
			return false, nil
		}
		byNode = map[string]*corev1.Pod{}
		var on []string
		for i := range pods.Items {
			p := &pods.Items[i]
			byNode[p.Spec.NodeName] = p
			on = append(on, p.Spec.NodeName)
		}
		last = strings.Join(on, ",")
		if int(ds.Status.DesiredNumberScheduled) != len(nodes) || len(byNode) != len(nodes) {
			return false, nil
		}
		for _, n := range nodes {
			if byNode[n] == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the DaemonSet's pods are on nodes [%s], want exactly %v: %v", last, nodes, err)
	}
	return byNode
}

// TestChartDefaultsNoGPU installs the chart with its default values, as
// an administrator who reads nothing would, onto a cluster with a node
// without GPUs (no nvidia.com/gpu.present label) and a node labelled as a
// GPU node. The driver is scheduled onto the GPU node only; nothing is
// published for the node without GPUs; no DeviceClass claims the device
// plugin's nvidia.com/gpu; and a pod that asks for nvidia.com/gpu: 1 the
// old way is not scheduled. With the chart's former defaults (a simulated
// DGX H200 on every node, extended resources on), the driver's pod landed
// on the node without GPUs and nvidia.com/gpu was served by the classes.
func TestChartDefaultsNoGPU(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := env.AddFakeNode(
		ctx, "gpu-node", map[string]string{"nvidia.com/gpu.present": "true"},
	); err != nil {
		t.Fatal(err)
	}
	helmInstall(t, ctx, env) // no values at all

	driverPods(t, ctx, env, "gpu-node")
	classes, err := env.Client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(classes.Items) == 0 {
		t.Error("the chart made no DeviceClasses")
	}
	for _, c := range classes.Items {
		if c.Spec.ExtendedResourceName != nil {
			t.Errorf(
				"DeviceClass %s serves extended resource %s by default",
				c.Name,
				*c.Spec.ExtendedResourceName,
			)
		}
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "old-way", Namespace: storyNS},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "c", Image: "busybox", Command: []string{"true"},
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						nvdriver.ExtendedResourceGPU: resource.MustParse("1"),
					},
				},
			}},
		},
	}
	if _, err := env.Client.CoreV1().Pods(storyNS).Create(
		ctx, pod, metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(storyNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("the nvidia.com/gpu pod was scheduled onto %s", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse &&
				c.Reason == corev1.PodReasonUnschedulable {
				reason = c.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the nvidia.com/gpu pod is not reported unschedulable: %v", err)
	}
	if !strings.Contains(reason, "nvidia.com/gpu") {
		t.Errorf("the pod is unschedulable for %q, want a lack of nvidia.com/gpu", reason)
	}
	// Read last: the scheduler has had the whole wait to see slices.
	l, err := env.Client.ResourceV1().
		ResourceSlices().
		List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + nvdriver.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 0 {
		t.Errorf("%d ResourceSlices published on a cluster without GPUs", len(l.Items))
	}
	t.Logf("the pod that asks for nvidia.com/gpu: %s", reason)
}

// slice is a ResourceSlice of the driver for node with one device.
func slice(name, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   nvdriver.DriverName,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{{Name: "gpu-0"}},
		},
	}
}

// TestResourceSlicePolicy installs the chart onto a cluster of two nodes
// and acts as the driver's pod on the first (a token of the driver's
// ServiceAccount bound to that pod, the token a kubelet gives it): RBAC
// grants every node's ResourceSlices, the chart's
// ValidatingAdmissionPolicy narrows that to its own node. It may create,
// update and delete its node's slices; updating, deleting or creating
// another node's slice is refused with the policy's message, and so is
// any slice write with a token that names no node.
func TestResourceSlicePolicy(t *testing.T) {
	const other = "node-b"
	env := testenv.Start(t, testenv.WithFakeNodes(other))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	helmInstall(t, ctx, env, deploy.SimulatorValues()...)
	pod := driverPods(t, ctx, env, env.NodeName, other)[env.NodeName]

	as := func(bound bool) kubernetes.Interface {
		t.Helper()
		req := &authv1.TokenRequest{
			Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}
		if bound {
			req.Spec.BoundObjectRef = &authv1.BoundObjectReference{
				Kind:       "Pod",
				APIVersion: "v1",
				Name:       pod.Name,
				UID:        pod.UID,
			}
		}
		tok, err := env.Client.CoreV1().
			ServiceAccounts(deploy.Namespace).
			CreateToken(ctx, pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for the driver's ServiceAccount: %v", err)
		}
		cfg := rest.AnonymousClientConfig(env.RESTConfig)
		cfg.BearerToken = tok.Status.Token
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	drv := as(true)
	admin := env.Client.ResourceV1().ResourceSlices()
	slices := drv.ResourceV1().ResourceSlices()

	theirs, err := admin.Create(ctx, slice("theirs", other), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := theirs.DeepCopy()
	forged.Spec.Devices = []resourceapi.Device{{Name: "forged"}}
	// The API server loads a new policy within a second or so: wait for
	// the first refusal (of a dry run, which admission sees too) before
	// checking the rest.
	if err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := slices.Update(
			ctx, forged, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}},
		)
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatalf("the driver on %s may update node %s's slice: %v", env.NodeName, other, err)
	}
	_, refused := slices.Update(ctx, forged, metav1.UpdateOptions{})
	wantMsg := "the driver on node " + env.NodeName +
		" may write only its own node's ResourceSlices, not those of node " + other
	check := func(what string, err error, msg string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: allowed", what)
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), msg):
			t.Errorf("%s: %v, want Forbidden: %s", what, err, msg)
		}
	}
	check("update another node's slice", refused, wantMsg)
	check(
		"delete another node's slice",
		slices.Delete(ctx, theirs.Name, metav1.DeleteOptions{}),
		wantMsg,
	)
	_, err = slices.Create(ctx, slice("forged", other), metav1.CreateOptions{})
	check("create a slice for another node", err, wantMsg)
	// Moving another node's slice onto its own is no way round.
	cur, err := admin.Get(ctx, theirs.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.NodeName = ptr.To(env.NodeName)
	_, err = slices.Update(ctx, cur, metav1.UpdateOptions{})
	if err == nil {
		t.Error("moving node-b's slice to the driver's node: allowed")
	}
	noNode := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "all-nodes"},
		Spec: resourceapi.ResourceSliceSpec{Driver: nvdriver.DriverName, AllNodes: ptr.To(true),
			Pool: resourceapi.ResourcePool{
				Name:               "shared",
				ResourceSliceCount: 1,
			}, Devices: []resourceapi.Device{{Name: "gpu-0"}}},
	}
	_, err = slices.Create(ctx, noNode, metav1.CreateOptions{})
	check("create a slice for all nodes", err, "not a slice without spec.nodeName")
	_, err = as(
		false,
	).ResourceV1().
		ResourceSlices().
		Create(ctx, slice("unbound", env.NodeName), metav1.CreateOptions{})
	check("create with a token bound to no pod", err, "only with a token bound to a pod on a node")

	// Its own node's slices: create, update, delete.
	mine, err := slices.Create(ctx, slice("mine", env.NodeName), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the driver cannot create its own node's slice: %v", err)
	}
	mine.Spec.Devices = append(mine.Spec.Devices, resourceapi.Device{Name: "gpu-1"})
	if _, err := slices.Update(ctx, mine, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the driver cannot update its own node's slice: %v", err)
	}
	if err := slices.Delete(ctx, mine.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the driver cannot delete its own node's slice: %v", err)
	}
	if got, err := admin.Get(ctx, theirs.Name, metav1.GetOptions{}); err != nil ||
		len(got.Spec.Devices) != 1 ||
		got.Spec.Devices[0].Name != "gpu-0" ||
		*got.Spec.NodeName != other {
		t.Errorf("node %s's slice after the refused writes: %+v, %v", other, got, err)
	}
	t.Logf("refused: %v", refused)
}
