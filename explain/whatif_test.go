package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func load(t *testing.T, files ...string) *Snapshot {
	t.Helper()
	s, err := Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func node(t *testing.T, rep *Report, name string) NodeReport {
	t.Helper()
	for _, n := range rep.Nodes {
		if n.Node == name {
			return n
		}
	}
	t.Fatalf("no node %s in the report", name)
	return NodeReport{}
}

// reasons returns the node's reasons and those of its failing requests
// (and their alternatives), in order.
func reasons(n NodeReport) []Reason {
	out := append([]Reason(nil), n.Reasons...)
	var walk func([]RequestReport)
	walk = func(rs []RequestReport) {
		for _, r := range rs {
			out = append(out, r.Reasons...)
			walk(r.Alternatives)
		}
	}
	walk(n.Requests)
	return out
}

func kinds(n NodeReport) []Kind {
	var out []Kind
	for _, r := range reasons(n) {
		out = append(out, r.Kind)
	}
	return out
}

// TestWhatIfClaim explains a claim for two H100s on one NUMA node against
// a fleet with one node per reason: every node gets its reason, with the
// objects that cause it, and the fitting node comes first with the
// allocator's choice.
func TestWhatIfClaim(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	claim := load(t, "testdata/train-claim.yaml").Claims[0]
	rep, err := Claim(context.Background(), snap, claim)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Fits || rep.NodesFit != 1 {
		t.Errorf("Fits=%v NodesFit=%d, want true 1", rep.Fits, rep.NodesFit)
	}
	var order []string
	for _, n := range rep.Nodes {
		order = append(order, n.Node)
	}
	// Fitting first; busy devices and counters before constraints, taints,
	// missing devices.
	if diff := cmp.Diff([]string{"node-h", "node-b", "node-g", "node-f", "node-c", "node-d", "node-a", "node-e"}, order); diff != "" {
		t.Errorf("node order (-want +got):\n%s", diff)
	}
	h := node(t, rep, "node-h")
	want := []PickedDevice{
		{Claim: "default/train", Request: "gpus", Driver: "gpu.example.com", Pool: "node-h", Device: "gpu-0"},
		{Claim: "default/train", Request: "gpus", Driver: "gpu.example.com", Pool: "node-h", Device: "gpu-1"},
	}
	if diff := cmp.Diff(want, h.Allocation); diff != "" || !h.Fits {
		t.Errorf("node-h: fits=%v, allocation (-want +got):\n%s", h.Fits, diff)
	}
	for _, tc := range []struct {
		node string
		kind Kind
		// check inspects the reason's details.
		check func(r Reason) string
	}{
		{"node-b", Allocated, func(r Reason) string {
			return cmp.Diff([]Holder{{Claim: "default/busy", Pods: []string{"default/busy-pod"}, Devices: []string{"node-b/gpu-0", "node-b/gpu-1"}}}, r.Holders)
		}},
		{"node-g", CounterExhausted, func(r Reason) string {
			if len(r.Counters) != 2 {
				return "want 2 short counters"
			}
			c := r.Counters[0]
			got := []string{c.CounterSet, c.Counter, c.Capacity, c.Left, c.Need, c.Holders[0].Claim, c.Holders[0].Devices[0]}
			return cmp.Diff([]string{"gpu-0-counters", "memory-slices", "8", "4", "8", "default/mig-user", "node-g/gpu-0-half-0"}, got)
		}},
		{"node-f", Constraint, func(r Reason) string {
			want := []AttributeGroup{{Value: "0", Devices: map[string]int{"gpus": 1}}, {Value: "1", Devices: map[string]int{"gpus": 1}}}
			return cmp.Diff(want, r.Groups) + cmp.Diff("matchAttribute gpu.example.com/numa", r.Constraint)
		}},
		{"node-c", DeviceTaint, func(r Reason) string {
			return cmp.Diff([]TaintReport{{Key: "example.com/maintenance", Value: "true", Effect: "NoSchedule", Devices: []string{"node-c/gpu-0", "node-c/gpu-1"}}}, r.Taints)
		}},
		{"node-d", TooMany, func(r Reason) string {
			if !strings.Contains(r.Message, "asks for 2 devices; the node has only 1") {
				return "message: " + r.Message
			}
			return ""
		}},
		{"node-a", SelectorFalse, func(r Reason) string {
			s := r.Selectors
			if s == nil || len(s.Closest) == 0 || len(s.Closest[0].False) != 1 {
				return "want a closest device with one false term"
			}
			f := s.Closest[0].False[0]
			return cmp.Diff(`device.attributes["gpu.example.com"].model == "H100"`, f.Term) +
				cmp.Diff(map[string]string{"gpu.example.com/model": `"A100"`}, f.Values)
		}},
		{"node-e", NoClassDevice, func(r Reason) string {
			if !strings.Contains(r.Message, "drivers here: nic.example.com") {
				return "message: " + r.Message
			}
			return ""
		}},
	} {
		n := node(t, rep, tc.node)
		rs := reasons(n)
		if n.Fits || len(rs) != 1 || rs[0].Kind != tc.kind {
			t.Errorf("%s: fits=%v, kinds %v, want [%s]", tc.node, n.Fits, kinds(n), tc.kind)
			continue
		}
		if d := tc.check(rs[0]); d != "" {
			t.Errorf("%s: %s: %s", tc.node, tc.kind, d)
		}
	}
}

// TestWhatIfPodTemplate explains a pod pinned to zone a whose template
// has a firstAvailable list: nodes outside the zone are excluded by the
// node selector; in zone a the second alternative fits. The template on
// its own (no pod, no node selector) shows each alternative's reason.
func TestWhatIfPodTemplate(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml", "testdata/pod-zone-a.yaml")
	rep, err := Pod(context.Background(), snap, snap.Pods[0])
	if err != nil {
		t.Fatal(err)
	}
	a := node(t, rep, "node-a")
	if !a.Fits || len(a.Allocation) != 1 || a.Allocation[0].Request != "gpu/a100" || a.Allocation[0].Device != "gpu-0" {
		t.Errorf("node-a: fits=%v allocation %+v, want gpu/a100 on gpu-0", a.Fits, a.Allocation)
	}
	if rep.Nodes[0].Node != "node-a" {
		t.Errorf("first node %s, want node-a", rep.Nodes[0].Node)
	}
	for _, name := range []string{"node-b", "node-h"} {
		n := node(t, rep, name)
		if k := kinds(n); len(k) != 1 || k[0] != NodeAffinity || !strings.Contains(n.Reasons[0].Message, "nodeSelector {zone=a}") {
			t.Errorf("%s: kinds %v (%+v), want [node-affinity] naming the node selector", name, k, n.Reasons)
		}
	}

	rep, err = Template(context.Background(), snap, snap.Templates[0])
	if err != nil {
		t.Fatal(err)
	}
	b := node(t, rep, "node-b")
	if len(b.Requests) != 1 || len(b.Requests[0].Alternatives) != 2 {
		t.Fatalf("node-b: want one request with two alternatives, got %+v", b.Requests)
	}
	var got []Kind
	for _, alt := range b.Requests[0].Alternatives {
		for _, r := range alt.Reasons {
			got = append(got, r.Kind)
		}
	}
	if diff := cmp.Diff([]Kind{Allocated, SelectorFalse}, got); diff != "" {
		t.Errorf("node-b alternatives (-want +got):\n%s", diff)
	}
}

// TestWhatIfTogether: two requests for one H100 each fit one by one on a
// node with one H100, not together.
func TestWhatIfTogether(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	claim := load(t, "testdata/two-requests.yaml").Claims[0]
	rep, err := Claim(context.Background(), snap, claim, WithNodes("node-d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Nodes) != 1 {
		t.Fatalf("want only node-d, got %d nodes", len(rep.Nodes))
	}
	d := rep.Nodes[0]
	if k := kinds(d); len(k) != 1 || k[0] != Together {
		t.Errorf("node-d: kinds %v, want [together]", k)
	}
	for _, r := range d.Requests {
		if !r.Fits {
			t.Errorf("request %s should fit on its own", r.Request)
		}
	}
}

// TestPodClaims: a pod's named claim comes from the snapshot; an
// allocated claim is not allocated again and keeps the pod on its node; a
// missing claim is ErrNotFound.
func TestPodClaims(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	busy := snap.claim("default", "busy")
	busy.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-b"}}},
	}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "busy-pod", Namespace: "default"},
		Spec:       corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("busy")}}},
	}
	rep, err := Pod(context.Background(), snap, pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Claims) != 0 || rep.NodesFit != 1 || rep.Nodes[0].Node != "node-b" {
		t.Errorf("claims %v, %d nodes fit, first %s; want none to allocate, node-b only", rep.Claims, rep.NodesFit, rep.Nodes[0].Node)
	}
	if k := kinds(node(t, rep, "node-h")); len(k) != 1 || k[0] != ClaimElsewhere {
		t.Errorf("node-h: kinds %v, want [claim-elsewhere]", k)
	}
	pod.Spec.ResourceClaims[0].ResourceClaimName = ptr.To("gone")
	if _, err := Pod(context.Background(), snap, pod); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing claim: err %v, want ErrNotFound", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown kind":  "kind: Deployment\n",
		"unknown field": "kind: ResourceClaim\nmetadata: {name: x}\nspec: {devices: {requets: []}}\n",
		"bad list item": "kind: List\nitems:\n- kind: Secret\n",
	} {
		var s Snapshot
		if err := s.Decode([]byte(doc)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	var s Snapshot
	if err := s.Decode([]byte("kind: Deployment\n")); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: err %v, want ErrUnknownKind", err)
	}
}

// TestOutput: the JSON output carries the kinds as strings; the text
// output has a row per node and the details of the first ones.
func TestOutput(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	claim := load(t, "testdata/train-claim.yaml").Claims[0]
	rep, err := Claim(context.Background(), snap, claim)
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, &back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
	if !strings.Contains(js.String(), `"kind": "counter-exhausted"`) {
		t.Errorf("JSON lacks the counter-exhausted kind:\n%s", js.String())
	}
	var txt bytes.Buffer
	if err := rep.WriteText(&txt, WithMaxNodes(3), WithDetails(2)); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	for _, want := range []string{
		"claim default/train: 1 of 8 nodes can allocate its claims",
		"node-h  yes   train/gpus  would get node-h/gpu-0, node-h/gpu-1",
		"claim default/busy (pod default/busy-pod) holds node-b/gpu-0, node-b/gpu-1",
		"... and 5 more nodes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "memory-slices: 4 of 8 left") {
		t.Errorf("details of the third node written with WithDetails(2):\n%s", out)
	}
}

// TestAllocatedClaim: explaining an allocated claim ignores its own
// allocation, so its devices count as free.
func TestAllocatedClaim(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	rep, err := Claim(context.Background(), snap, snap.claim("default", "busy"), WithNodes("node-b"))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Fits {
		t.Errorf("claim default/busy does not fit on its own devices: %+v", rep.Nodes)
	}
}

// TestExtendedResources: a plain pod asking for gpu.example.com/gpu: 2,
// which a DeviceClass serves through extendedResourceName, is explained
// through the claim the scheduler would create for it.
func TestExtendedResources(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	snap.Classes[0].Spec.ExtendedResourceName = ptr.To("gpu.example.com/gpu")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"gpu.example.com/gpu": resource.MustParse("2")},
		}}}},
	}
	rep, err := Pod(context.Background(), snap, pod)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"default/legacy-extended-resources (extended resources)"}, rep.Claims); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if k := kinds(node(t, rep, "node-d")); len(k) != 1 || k[0] != TooMany {
		t.Errorf("node-d: kinds %v, want [too-many] (one GPU, two asked for)", k)
	}
	if k := kinds(node(t, rep, "node-b")); len(k) != 1 || k[0] != Allocated {
		t.Errorf("node-b: kinds %v, want [allocated]", k)
	}
}

func decode(t *testing.T, s *Snapshot, doc string) {
	t.Helper()
	if err := s.Decode([]byte(doc)); err != nil {
		t.Fatal(err)
	}
}

// TestPodClaimsTogether: a pod with two claims of one H100 each, on a node
// with one H100: each claim fits on its own, not both.
func TestPodClaimsTogether(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	for _, name := range []string{"one", "other"} {
		decode(t, snap, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: `+name+`}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.example.com
        selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "H100"'}}]
`)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "a", ResourceClaimName: ptr.To("one")}, {Name: "b", ResourceClaimName: ptr.To("other")},
	}}}
	rep, err := Pod(context.Background(), snap, pod, WithNodes("node-d", "node-h"))
	if err != nil {
		t.Fatal(err)
	}
	d := node(t, rep, "node-d")
	if k := kinds(d); len(k) != 1 || k[0] != Together || !strings.Contains(d.Reasons[0].Message, "default/one, default/other") {
		t.Errorf("node-d: %+v, want together naming both claims", d.Reasons)
	}
	if h := node(t, rep, "node-h"); !h.Fits || len(h.Allocation) != 2 {
		t.Errorf("node-h: fits=%v allocation %+v, want both claims allocated", h.Fits, h.Allocation)
	}
}

// TestPoolIncomplete: a pool whose slices are not all published is not
// used by the allocator; the explanation says so.
func TestPoolIncomplete(t *testing.T) {
	var snap Snapshot
	decode(t, &snap, `
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: half-a-pool}
spec:
  driver: gpu.example.com
  nodeName: node-1
  pool: {name: node-1, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu-0}]
`)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}}}
	rep, err := Claim(context.Background(), &snap, claim)
	if err != nil {
		t.Fatal(err)
	}
	n := node(t, rep, "node-1")
	if r := reasons(n); len(r) != 1 || r[0].Kind != PoolIncomplete || !strings.Contains(r[0].Message, "gpu.example.com/node-1 (1 of 2 slices)") {
		t.Errorf("node-1: %+v, want pool-incomplete naming the pool", r)
	}
}

// TestSelectorError: a selector that fails at runtime (an attribute the
// devices lack) stops the allocator, as in the scheduler; the explanation
// shows the allocator's error.
func TestSelectorError(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "gpu.example.com",
		Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.example.com"].memory > 10`}}},
	}}}
	rep, err := Claim(context.Background(), snap, claim, WithNodes("node-h"))
	if err != nil {
		t.Fatal(err)
	}
	if r := reasons(rep.Nodes[0]); len(r) != 1 || r[0].Kind != AllocatorError || !strings.Contains(r[0].Message, "memory") {
		t.Errorf("node-h: %+v, want the allocator's CEL error", r)
	}
}

// TestDeviceTaintRules: a rule's taint lands on the devices its selector
// picks (and is named in the explanation); a rule without a selector
// taints nothing.
func TestDeviceTaintRules(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	decode(t, snap, `
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: drain-gpu-1}
spec:
  deviceSelector: {driver: gpu.example.com, pool: node-h, device: gpu-1}
  taint: {key: example.com/drain, effect: NoSchedule}
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: selects-nothing}
spec:
  taint: {key: example.com/everything, effect: NoSchedule}
`)
	claim := load(t, "testdata/train-claim.yaml").Claims[0]
	rep, err := Claim(context.Background(), snap, claim, WithNodes("node-h", "node-f"))
	if err != nil {
		t.Fatal(err)
	}
	h := node(t, rep, "node-h")
	r := reasons(h)
	if len(r) != 1 || r[0].Kind != DeviceTaint {
		t.Fatalf("node-h: kinds %v, want [device-taint]", kinds(h))
	}
	want := []TaintReport{{Key: "example.com/drain", Effect: "NoSchedule", Devices: []string{"node-h/gpu-1"}, Rule: "drain-gpu-1"}}
	if diff := cmp.Diff(want, r[0].Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if k := kinds(node(t, rep, "node-f")); len(k) != 1 || k[0] != Constraint {
		t.Errorf("node-f: kinds %v, want [constraint] (the selector-less rule taints nothing)", k)
	}
	for _, s := range snap.Slices {
		if s.Name == "node-h-gpu" && len(s.Spec.Devices[1].Taints) != 0 {
			t.Error("applying rules changed the snapshot's slices")
		}
	}
}

// TestTogetherPairs: three requests on a node with two H100s: every two
// fit, all three do not; with a request for two H100s, the pairs that
// include it do not fit.
func TestTogetherPairs(t *testing.T) {
	snap := load(t, "testdata/fleet.yaml")
	h100 := `device.attributes["gpu.example.com"].model == "H100"`
	req := func(name string, count int64) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com", Count: count,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: h100}}}}}
	}
	for _, tc := range []struct {
		reqs []resourceapi.DeviceRequest
		want string
	}{
		{[]resourceapi.DeviceRequest{req("a", 1), req("b", 1), req("c", 1)}, "; every two of them fit together"},
		{[]resourceapi.DeviceRequest{req("a", 1), req("b", 1), req("both", 2)}, "; not together: a and both, b and both"},
	} {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"}}
		claim.Spec.Devices.Requests = tc.reqs
		rep, err := Claim(context.Background(), snap, claim, WithNodes("node-h"))
		if err != nil {
			t.Fatal(err)
		}
		r := reasons(rep.Nodes[0])
		if len(r) != 1 || r[0].Kind != Together || !strings.HasSuffix(r[0].Message, tc.want) {
			t.Errorf("%d requests: %+v, want together ending in %q", len(tc.reqs), r, tc.want)
		}
	}
}
