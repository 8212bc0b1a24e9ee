package explain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/explain"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

const (
	e2eDriver = "gpu.e2e.drakit.dev"
	e2eClass  = "gpu.e2e.drakit.dev"
	nicDriver = "nic.e2e.drakit.dev"
	caseLabel = "explain.drakit.dev/case"
)

func attrs(kv ...any) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for i := 0; i < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case string:
			out[resourceapi.QualifiedName(kv[i].(string))] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
		case int:
			out[resourceapi.QualifiedName(kv[i].(string))] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(v))}
		}
	}
	return out
}

func gpu(name, model string, numa int) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: attrs("model", model, "type", "full", "numa", numa)}
}

// publish creates one pool of slices for node, as a driver does.
func publish(ctx context.Context, t *testing.T, client kubernetes.Interface, driver, node string, counters []resourceapi.CounterSet, devices ...resourceapi.Device) {
	t.Helper()
	var specs []resourceapi.ResourceSliceSpec
	if len(counters) > 0 {
		specs = append(specs, resourceapi.ResourceSliceSpec{SharedCounters: counters})
	}
	specs = append(specs, resourceapi.ResourceSliceSpec{Devices: devices})
	for i, spec := range specs {
		spec.Driver, spec.NodeName = driver, ptr.To(node)
		spec.Pool = resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(specs))}
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", node, strings.Split(driver, ".")[0], i)}, Spec: spec}
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("publish slice %s: %v", s.Name, err)
		}
	}
}

// request asks for count devices of the test class with selector.
func request(name string, count int64, selector string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: e2eClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	if selector != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	return r
}

func sel(attr, value string) string {
	return fmt.Sprintf("device.attributes[%q].%s == %q", e2eDriver, attr, value)
}

// createPod creates a claim with spec and a pod using it, pinned to the
// nodes labelled with the case.
func createPod(ctx context.Context, t *testing.T, client kubernetes.Interface, name, pinnedCase string, spec resourceapi.ResourceClaimSpec) *corev1.Pod {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podFor(name, pinnedCase)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: ptr.To(name)}}
	created, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func podFor(name, pinnedCase string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{caseLabel: pinnedCase},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devices"}}}}},
		},
	}
}

// waitPod polls until cond holds for the pod and returns it.
func waitPod(ctx context.Context, t *testing.T, client kubernetes.Interface, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s never %s: %v (status %+v)", name, what, err, pod.Status)
	}
	return pod
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func bound(p *corev1.Pod) bool { return p.Spec.NodeName != "" }

// TestExplainOnCluster runs the real kube-scheduler against fake nodes
// whose slices are published through the API as drivers do: one pod per
// reason stays pending (the scheduler says so), and the explanation names
// that reason on the pod's node with the objects that cause it. A pod
// that fits gets the devices the scheduler then allocates.
func TestExplainOnCluster(t *testing.T) {
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := c.Client

	for _, n := range []string{"selector", "nic", "busy", "counters", "constraint", "tainted", "ruled", "small", "free"} {
		if err := c.AddFakeNode(ctx, "node-"+n, map[string]string{caseLabel: n}, nil); err != nil {
			t.Fatal(err)
		}
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: e2eClass}, Spec: resourceapi.DeviceClassSpec{
		ExtendedResourceName: ptr.To(e2eDriver + "/gpu"),
		Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", e2eDriver)}}}}}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	publish(ctx, t, client, e2eDriver, "node-selector", nil, gpu("gpu-0", "A100", 0), gpu("gpu-1", "A100", 0))
	publish(ctx, t, client, nicDriver, "node-nic", nil, resourceapi.Device{Name: "nic-0", Attributes: attrs("model", "CX7")})
	publish(ctx, t, client, e2eDriver, "node-busy", nil, gpu("gpu-0", "H100", 0))
	half := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: attrs("model", "H100", "type", "half", "numa", 0),
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters", Counters: map[string]resourceapi.Counter{"memory-slices": {Value: resource.MustParse("4")}}}}}
	}
	full := gpu("gpu-0", "H100", 0)
	full.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters", Counters: map[string]resourceapi.Counter{"memory-slices": {Value: resource.MustParse("8")}}}}
	publish(ctx, t, client, e2eDriver, "node-counters",
		[]resourceapi.CounterSet{{Name: "gpu-0-counters", Counters: map[string]resourceapi.Counter{"memory-slices": {Value: resource.MustParse("8")}}}},
		full, half("gpu-0-half-0"), half("gpu-0-half-1"))
	publish(ctx, t, client, e2eDriver, "node-constraint", nil, gpu("gpu-0", "H100", 0), gpu("gpu-1", "H100", 1))
	tainted := gpu("gpu-0", "H100", 0)
	tainted.Taints = []resourceapi.DeviceTaint{{Key: "example.com/maintenance", Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	publish(ctx, t, client, e2eDriver, "node-tainted", nil, tainted)
	publish(ctx, t, client, e2eDriver, "node-ruled", nil, gpu("gpu-0", "H100", 0))
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "drain-node-ruled"}, Spec: resourceapi.DeviceTaintRuleSpec{
		DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(e2eDriver), Pool: ptr.To("node-ruled")},
		Taint:          resourceapi.DeviceTaint{Key: "example.com/drain", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	}}
	if _, err := client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	publish(ctx, t, client, e2eDriver, "node-small", nil, gpu("gpu-0", "H100", 0))
	publish(ctx, t, client, e2eDriver, "node-free", nil, gpu("gpu-0", "A100", 0), gpu("gpu-1", "H100", 0), gpu("gpu-2", "H100", 0))

	// Holders: pods the scheduler places first, whose claims then hold
	// node-busy's GPU and half of node-counters' GPU.
	for _, h := range []struct{ name, pin, selector string }{{"holder", "busy", ""}, {"half-holder", "counters", sel("type", "half")}} {
		createPod(ctx, t, client, h.name, h.pin, resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("gpu", 1, h.selector)}}})
		waitPod(ctx, t, client, h.name, "scheduled", bound)
	}

	one := func(reqs ...resourceapi.DeviceRequest) resourceapi.ResourceClaimSpec {
		return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}
	}
	numa := resourceapi.FullyQualifiedName(e2eDriver + "/numa")
	firstAvailable := resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "h100", DeviceClassName: e2eClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: sel("model", "H100")}}}},
		{Name: "four", DeviceClassName: e2eClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
	}}
	cases := []struct {
		pod, pin string
		spec     resourceapi.ResourceClaimSpec
		// want checks the explanation of the pod's node ("" when fine).
		want func(n explain.NodeReport) string
	}{
		{"wants-h100", "selector", one(request("gpu", 1, sel("model", "H100"))), func(n explain.NodeReport) string {
			r := only(n, explain.SelectorFalse)
			if r == nil || len(r.Selectors.Closest) == 0 {
				return "no selector reason with closest devices"
			}
			return cmp.Diff(map[string]string{e2eDriver + "/model": `"A100"`}, r.Selectors.Closest[0].False[0].Values)
		}},
		{"wants-gpu-on-nic-node", "nic", one(request("gpu", 1, "")), func(n explain.NodeReport) string {
			if r := only(n, explain.NoClassDevice); r == nil || !strings.Contains(r.Message, "drivers here: "+nicDriver) {
				return "want no-class-device naming the NIC driver"
			}
			return ""
		}},
		{"wants-busy", "busy", one(request("gpu", 1, "")), func(n explain.NodeReport) string {
			r := only(n, explain.Allocated)
			if r == nil || len(r.Holders) != 1 {
				return "want one holder"
			}
			return cmp.Diff(explain.Holder{Claim: "default/holder", Pods: []string{"default/holder"}, Devices: []string{"node-busy/gpu-0"}}, r.Holders[0])
		}},
		{"wants-full-gpu", "counters", one(request("gpu", 1, sel("type", "full"))), func(n explain.NodeReport) string {
			r := only(n, explain.CounterExhausted)
			if r == nil || len(r.Counters) != 1 {
				return "want one short counter"
			}
			got := r.Counters[0]
			if got.CounterSet != "gpu-0-counters" || got.Left != "4" || got.Need != "8" || len(got.Holders) != 1 || got.Holders[0].Claim != "default/half-holder" {
				return fmt.Sprintf("counter %+v", got)
			}
			return ""
		}},
		{"wants-one-numa", "constraint", resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests:    []resourceapi.DeviceRequest{request("gpus", 2, "")},
			Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: &numa}},
		}}, func(n explain.NodeReport) string {
			r := only(n, explain.Constraint)
			if r == nil {
				return "no constraint reason"
			}
			return cmp.Diff([]explain.AttributeGroup{{Value: "0", Devices: map[string]int{"gpus": 1}}, {Value: "1", Devices: map[string]int{"gpus": 1}}}, r.Groups)
		}},
		{"wants-tainted", "tainted", one(request("gpu", 1, "")), func(n explain.NodeReport) string {
			r := only(n, explain.DeviceTaint)
			if r == nil || len(r.Taints) != 1 || r.Taints[0].Key != "example.com/maintenance" || !slices.Equal(r.Taints[0].Devices, []string{"node-tainted/gpu-0"}) {
				return "want the maintenance taint on node-tainted/gpu-0"
			}
			return ""
		}},
		{"wants-ruled", "ruled", one(request("gpu", 1, "")), func(n explain.NodeReport) string {
			r := only(n, explain.DeviceTaint)
			if r == nil || len(r.Taints) != 1 || r.Taints[0].Rule != "drain-node-ruled" || r.Taints[0].Key != "example.com/drain" {
				return "want the drain taint of DeviceTaintRule drain-node-ruled"
			}
			return ""
		}},
		{"wants-two", "small", one(request("gpus", 2, "")), func(n explain.NodeReport) string {
			if only(n, explain.TooMany) == nil {
				return "no too-many reason"
			}
			return ""
		}},
		{"wants-alternatives", "selector", one(firstAvailable), func(n explain.NodeReport) string {
			if len(n.Requests) != 1 || len(n.Requests[0].Alternatives) != 2 {
				return "want two alternatives"
			}
			var got []explain.Kind
			for _, a := range n.Requests[0].Alternatives {
				got = append(got, a.Reasons[0].Kind)
			}
			return cmp.Diff([]explain.Kind{explain.SelectorFalse, explain.TooMany}, got)
		}},
		{"wants-nowhere", "nowhere", one(request("gpu", 1, "")), nil},
		// No claim: "resources.limits: {gpu.e2e.drakit.dev/gpu: 2}",
		// served by the class's extendedResourceName (KEP-5004).
		{"wants-two-the-old-way", "small", resourceapi.ResourceClaimSpec{}, func(n explain.NodeReport) string {
			if r := only(n, explain.TooMany); r == nil || len(n.Requests) != 1 || n.Requests[0].Request != "container-0-request-0" {
				return "want too-many for container-0-request-0"
			}
			return ""
		}},
	}
	for _, tc := range cases {
		if len(tc.spec.Devices.Requests) > 0 || tc.want == nil {
			createPod(ctx, t, client, tc.pod, tc.pin, tc.spec)
			continue
		}
		pod := podFor(tc.pod, tc.pin)
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{e2eDriver + "/gpu": resource.MustParse("2")}}
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.pod, func(t *testing.T) {
			pod := waitPod(ctx, t, client, tc.pod, "reported unschedulable by the scheduler", unschedulable)
			rep := explainPod(ctx, t, client, pod)
			if rep.Fits {
				t.Fatalf("explanation says the pod fits on %d nodes", rep.NodesFit)
			}
			for _, n := range rep.Nodes {
				if n.Node == "node-"+tc.pin {
					if rep.Nodes[0].Node != n.Node {
						t.Errorf("first node %s, want the pod's node %s", rep.Nodes[0].Node, n.Node)
					}
					if d := tc.want(n); d != "" {
						t.Errorf("node %s: %s; explanation %+v", n.Node, d, n)
					}
					continue
				}
				if len(n.Reasons) != 1 || n.Reasons[0].Kind != explain.NodeAffinity || !strings.Contains(n.Reasons[0].Message, caseLabel+"="+tc.pin) {
					t.Errorf("node %s: want node-affinity naming the node selector, got %+v", n.Node, n)
				}
			}
		})
	}

	t.Run("fits", func(t *testing.T) {
		// A template, and a pod using it that does not exist yet: the
		// explanation (a what-if) says which devices the allocator picks;
		// then the real scheduler places the pod and allocates its claim.
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "two-h100", Namespace: "default"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: one(request("gpus", 2, sel("model", "H100")))}}
		if _, err := client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := podFor("fits", "free")
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: ptr.To(tmpl.Name)}}
		rep := explainPod(ctx, t, client, pod)
		if !rep.Fits || rep.NodesFit != 1 || rep.Nodes[0].Node != "node-free" {
			t.Fatalf("want node-free to fit, first: %+v", rep.Nodes[0])
		}
		var predicted []string
		for _, d := range rep.Nodes[0].Allocation {
			predicted = append(predicted, d.Pool+"/"+d.Device)
		}
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPod(ctx, t, client, "fits", "scheduled", bound)
		if got.Spec.NodeName != "node-free" || len(got.Status.ResourceClaimStatuses) != 1 {
			t.Fatalf("pod on %q with claim statuses %+v", got.Spec.NodeName, got.Status.ResourceClaimStatuses)
		}
		claim, err := client.ResourceV1().ResourceClaims("default").Get(ctx, *got.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var allocated []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			allocated = append(allocated, r.Pool+"/"+r.Device)
		}
		if diff := cmp.Diff(predicted, allocated); diff != "" {
			t.Errorf("explanation's pick vs the scheduler's allocation (-explain +scheduler):\n%s", diff)
		}
	})
}

// explainPod explains pod against a snapshot of the cluster and logs the
// text of the report's first three nodes (with -v).
func explainPod(ctx context.Context, t *testing.T, client kubernetes.Interface, pod *corev1.Pod) *explain.Report {
	t.Helper()
	snap, err := explain.FromCluster(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := explain.Pod(ctx, snap, pod)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := rep.WriteText(&text, explain.WithMaxNodes(3), explain.WithDetails(1)); err != nil {
		t.Fatal(err)
	}
	t.Logf("explanation:\n%s", text.String())
	return rep
}

// only returns the node's single reason (node or request level) when it
// is of kind k, else nil.
func only(n explain.NodeReport, k explain.Kind) *explain.Reason {
	var all []explain.Reason
	all = append(all, n.Reasons...)
	for _, r := range n.Requests {
		all = append(all, r.Reasons...)
	}
	if len(all) != 1 || all[0].Kind != k {
		return nil
	}
	return &all[0]
}
