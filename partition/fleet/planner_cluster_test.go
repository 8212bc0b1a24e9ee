package fleet_test

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/fleet"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
	"github.com/drakit/drakit/testenv"
)

const (
	driverName = "gpu.example.com"
	ledgerNS   = "ledgers"
	workNS     = "work"
)

// TestPlannerOnAPIServer runs Planner.Step on a real API server (its
// scheduler leaves the pods pending: their DeviceClasses do not exist)
// with three nodes' agents, each of two H100-80GB:
//
//   - the first Step seeds the agents' ledgers, and nothing is asked;
//   - a pod with a node selector gets its claim's three 1g devices laid
//     out on the one node it selects;
//   - a pod that selects only the tainted node is planned there with a
//     toleration and nowhere without; a whole card is planned too;
//   - a pod with a scheduling gate, or without a claim of a mapped class,
//     is not planned;
//   - a Held entry of a claim the API server does not have goes (read by
//     name, not trusted to the informer), one of a claim that exists with
//     its allocation stays;
//   - a Step that changes nothing writes nothing.
func TestPlannerOnAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.WithNodeName("n1"), testenv.WithFakeNodes("n2", "n3"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ns := range []string{ledgerNS, workNS} {
		if _, err := env.Client.CoreV1().Namespaces().Create(
			ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	scheme := p.Scheme()
	schemes := func(string) (*partition.Scheme, error) { return scheme, nil }
	client := kubernetes.NewForConfigOrDie(env.RESTConfig)
	store, err := ledger.NewStore(client, ledgerNS, driverName)
	if err != nil {
		t.Fatal(err)
	}
	cards := []ledger.AgentCard{{Index: 0, Scheme: scheme}, {Index: 1, Scheme: scheme}}
	agents := map[string]*ledger.Agent{}
	sync := func(node string) *ledger.Ledger {
		t.Helper()
		if agents[node] == nil {
			if agents[node], err = ledger.NewAgent(store, node); err != nil {
				t.Fatal(err)
			}
		}
		l, _, _, err := agents[node].Sync(ctx, cards)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		sync(n)
	}

	// The nodes: n2 in zone b, n3 in zone c and tainted.
	patch := func(name string, f func(*corev1.Node)) {
		t.Helper()
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(n)
		if _, err := env.Client.CoreV1().Nodes().Update(
			ctx, n, metav1.UpdateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	patch("n2", func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["zone"] = "b"
	})
	patch("n3", func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["zone"] = "c"
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{
			Key: "gpu", Value: "reserved", Effect: corev1.TaintEffectNoSchedule,
		})
	})

	planner, err := fleet.New(client, store, driverName,
		fleet.WithSchemes(schemes),
		fleet.WithClassProfile(func(class string) (string, bool) {
			switch class {
			case "mig-1g":
				return "1g.10gb", true
			case "gpu":
				return partition.WholeCard, true
			}
			return "", false
		}))
	if err != nil {
		t.Fatal(err)
	}
	step := func() fleet.StepResult {
		t.Helper()
		r, err := planner.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	demands := func() map[string]plan.Demand {
		t.Helper()
		ls, err := store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]plan.Demand{}
		for n, l := range ls {
			if len(l.Demand) > 0 {
				out[n] = l.Demand
			}
		}
		return out
	}
	equal := func(a, b map[string]plan.Demand) bool {
		return maps.EqualFunc(a, b, func(x, y plan.Demand) bool { return maps.Equal(x, y) })
	}

	if r := step(); r.Seeded != 3 || r.Pending != 0 {
		t.Fatalf("first step: %+v, want 3 ledgers seeded, nothing pending", r)
	}
	ls, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n, l := range ls {
		if !l.Seeded || len(l.Demand) != 0 {
			t.Errorf("%s: seeded %v, demand %v", n, l.Seeded, l.Demand)
		}
	}

	// A pod selecting zone b, three 1g devices.
	newPod := func(name string, claim *resourceapi.ResourceClaim, f func(*corev1.Pod)) {
		t.Helper()
		if claim != nil {
			if _, err := env.Client.ResourceV1().ResourceClaims(workNS).Create(
				ctx, claim, metav1.CreateOptions{},
			); err != nil {
				t.Fatal(err)
			}
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workNS},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers:                   []corev1.Container{{Name: "c", Image: "busybox"}},
			},
		}
		if claim != nil {
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)},
			}
		}
		if f != nil {
			f(pod)
		}
		if _, err := env.Client.CoreV1().Pods(workNS).Create(
			ctx, pod, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(name, class string, count int64) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workNS},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount,
					Count: count,
				}}},
			}},
		}
	}
	// waitStep steps until the planner's informers show want pending
	// requests (they lag the API server) and returns the result.
	waitStep := func(want int) fleet.StepResult {
		t.Helper()
		var r fleet.StepResult
		for i := 0; i < 100; i++ {
			if r = step(); r.Pending == want {
				return r
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("pending %d, want %d (%+v)", r.Pending, want, r)
		return r
	}

	newPod("zone-b", claim("zone-b", "mig-1g", 3), func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"zone": "b"}
	})
	waitStep(1)
	if got, want := demands(), map[string]plan.Demand{"n2": {"1g.10gb": 3}}; !equal(got, want) {
		t.Errorf("a pod selecting zone b: demand %v, want %v", got, want)
	}

	// Pods that are not planned: gated, no mapped class, no claim made.
	newPod("gated", claim("gated", "mig-1g", 1), func(p *corev1.Pod) {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
	})
	newPod("other-class", claim("other-class", "other", 1), nil)
	newPod("no-claim", nil, nil)
	// A whole card; a 1g for zone c (n3, tainted) without a toleration,
	// and one with.
	newPod("whole", claim("whole", "gpu", 1), nil)
	newPod("untolerated", claim("untolerated", "mig-1g", 1), func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"zone": "c"}
	})
	newPod("tolerant", claim("tolerant", "mig-1g", 1), func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"zone": "c"}
		p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
	})
	if r := waitStep(4); r.Unplaced != 1 {
		t.Errorf("%d requests unplaced, want the untolerated pod's", r.Unplaced)
	}
	got := demands()
	if want := (plan.Demand{"1g.10gb": 1}); !maps.Equal(got["n3"], want) {
		t.Errorf("the tainted n3's demand %v, want the tolerant pod's %v", got["n3"], want)
	}
	total := plan.Demand{}
	for _, d := range got {
		for p, n := range d {
			total[p] += n
		}
	}
	if want := (plan.Demand{"1g.10gb": 4, partition.WholeCard: 1}); !maps.Equal(total, want) {
		t.Errorf("demand over the fleet %v (per node %v), want %v", total, got, want)
	}
	if r := step(); r.Writes != 0 {
		t.Errorf("a step with nothing new wrote %d ledgers", r.Writes)
	}

	// Held entries: one of a claim the API server does not have, one of
	// a claim it has (with that allocation).
	l := sync("n1")
	if len(l.Open) < 2 {
		t.Fatalf("n1 opens %v", l.Open)
	}
	kept := claim("kept", "mig-1g", 1)
	claims := env.Client.ResourceV1().ResourceClaims(workNS)
	kept, err = claims.Create(ctx, kept, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keptDev, goneDev := l.Open[0], l.Open[1]
	kept.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "r", Driver: driverName, Pool: keptDev.Pool, Device: keptDev.Name,
		}},
	}}
	kept, err = claims.UpdateStatus(ctx, kept, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gone := ledger.ClaimRef{UID: types.UID("gone"), Namespace: workNS, Name: "gone"}
	if _, err := store.Update(ctx, "n1", false, func(l *ledger.Ledger) error {
		if err := l.Admit(ledger.ClaimRef{UID: kept.UID, Namespace: workNS, Name: "kept"},
			kept.ResourceVersion, []ledger.Device{keptDev}); err != nil {
			return err
		}
		return l.Admit(gone, "1", []ledger.Device{goneDev})
	}); err != nil {
		t.Fatal(err)
	}
	var r fleet.StepResult
	for i := 0; i < 100 && r.Resolved == 0; i++ {
		r = step()
		time.Sleep(50 * time.Millisecond)
	}
	if r.Resolved != 1 {
		t.Fatalf("Held entries resolved: %+v, want the gone claim's", r)
	}
	l, _, err = store.Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if h := l.HeldDevices(); len(h) != 1 || h[0] != keptDev {
		t.Errorf("n1 holds %v, want only %v (the existing claim's)", h, keptDev)
	}
}
