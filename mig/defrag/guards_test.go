package defrag_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/mig/defrag/defragtest"
)

// fragmented is TestController's scene: on a fake node of two H100s,
// GPU 1 holds a 3g.40gb pod ("keep") that did not opt in, GPU 0 four
// opted-in 1g.10gb Deployments' pods at placements 0, 2, 4 and 6, and
// pod "big" waits for a 4g.40gb. The one plan evicts small-0 and small-1.
type fragmented struct {
	env   *env
	f     *defragtest.Scene
	ctx   context.Context
	keep  defragtest.Placed
	small map[string]defragtest.Placed
}

// fragment makes the scene; smallPriority, when not empty, is the
// PriorityClass of the four small pods.
func fragment(t *testing.T, smallPriority string) *fragmented {
	t.Helper()
	env := sharedEnv(t)
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(cancel)
	f := &defragtest.Scene{T: t, Ctx: ctx, Client: env.Client, Namespace: env.Namespace, Class: env.className,
		Domain: env.Domain, PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	h100, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	env.publish(t, ctx, env.NodeName, mig.GPU{Index: 0, Product: h100}, mig.GPU{Index: 1, Product: h100})
	env.makeClasses(t, ctx, h100)
	for name, value := range map[string]int32{"low": 100, "high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := env.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	s := &fragmented{env: env, f: f, ctx: ctx, small: map[string]defragtest.Placed{}}
	f.Deployment("keep", "3g.40gb", env.pinned(1, 0), false)
	s.keep = f.WaitPlaced("keep")
	for _, p := range []int{1, 3, 5} {
		f.Pod(fmt.Sprintf("filler-%d", p), "1g.10gb", env.pinned(0, p))
		f.WaitPlaced(fmt.Sprintf("filler-%d", p))
	}
	f.PodSpec.PriorityClassName = smallPriority
	for i := range 4 {
		name := fmt.Sprintf("small-%d", i)
		f.Deployment(name, "1g.10gb", "", true)
		s.small[name] = f.WaitPlaced(name)
	}
	f.PodSpec.PriorityClassName = "low"
	for _, p := range []int{1, 3, 5} {
		if err := env.Client.CoreV1().Pods(env.Namespace).Delete(ctx, fmt.Sprintf("filler-%d", p), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	f.Pod("big", "4g.40gb", "")
	f.WaitUnschedulable("big")
	return s
}

// nothing asserts that c starts no operation and nothing changed.
func (s *fragmented) nothing(t *testing.T, c *defrag.Controller, what string) {
	t.Helper()
	for range 2 {
		if op, err := c.Step(s.ctx); err != nil || op != nil {
			t.Fatalf("%s: Step = %+v, %v; want nothing", what, op, err)
		}
	}
	s.untouched(t, "keep", "small-0", "small-1", "small-2", "small-3")
	if r := s.f.TaintedDevices(); len(r) != 0 {
		t.Fatalf("%s: taint rules %v, want none", what, r)
	}
}

func (s *fragmented) untouched(t *testing.T, apps ...string) {
	t.Helper()
	for _, app := range apps {
		want := s.keep
		if app != "keep" {
			want = s.small[app]
		}
		if got := s.f.Placed(app); len(got) != 1 || got[0] != want {
			t.Errorf("%s: pods %v, want %v untouched", app, got, want)
		}
	}
}

// finish steps c (playing the fake node's kubelet) until big is bound
// and no taint rule is left, then asserts the end state: big has the
// freed 4g.40gb, small-0 and small-1 were each evicted once and run
// again outside the region, the others are untouched, no operation was
// abandoned.
func (s *fragmented) finish(t *testing.T, c *defrag.Controller) {
	t.Helper()
	ctx, env, f := s.ctx, s.env, s.f
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		kubelet(f)
		if _, err := c.Step(ctx); err != nil {
			return false, err
		}
		p, err := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, "big", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "" && len(f.TaintedDevices()) == 0, err
	}); err != nil {
		p, _ := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, "big", metav1.GetOptions{})
		t.Fatalf("big is not placed (%+v), or the taints stay (%v): %v; events %v", p.Status.Conditions, f.TaintedDevices(), err, f.Events("big"))
	}
	if got := f.Placed("big"); len(got) != 1 || got[0].Device != "gpu-0-4g-40gb-0" {
		t.Errorf("big got %v, want gpu-0-4g-40gb-0", got)
	}
	if why, ok := f.Events("big")[defrag.ReasonAbandoned]; ok {
		t.Errorf("an operation was abandoned: %s", why)
	}
	for _, app := range []string{"small-0", "small-1"} {
		var got []defragtest.Placed
		if err := poll(ctx, time.Minute, func(context.Context) (bool, error) {
			got = f.Placed(app)
			return len(got) == 1, nil
		}); err != nil {
			t.Fatalf("%s: no replacement placed: %v", app, err)
		}
		if got[0].UID == s.small[app].UID {
			t.Errorf("%s was not moved", app)
		}
		if strings.HasPrefix(got[0].Device, "gpu-0-") && !strings.HasSuffix(got[0].Device, "-4") && !strings.HasSuffix(got[0].Device, "-5") &&
			!strings.HasSuffix(got[0].Device, "-6") {
			t.Errorf("%s's replacement took %s, in the freed region", app, got[0].Device)
		}
	}
	s.untouched(t, "keep", "small-2", "small-3")
	evictions := s.evictionEvents(t)
	if len(evictions) != 2 || evictions[s.small["small-0"].Pod] != 1 || evictions[s.small["small-1"].Pod] != 1 {
		t.Errorf("evictions %v, want small-0's and small-1's pods once each", evictions)
	}
}

// evictionEvents counts the controller's EvictedForDefrag Events per pod.
func (s *fragmented) evictionEvents(t *testing.T) map[string]int {
	t.Helper()
	l, err := s.env.Client.CoreV1().Events(s.env.Namespace).List(s.ctx, metav1.ListOptions{FieldSelector: "reason=" + defrag.ReasonEvicted})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range l.Items {
		out[e.InvolvedObject.Name]++
	}
	return out
}

// TestCrashPoints stops a controller at each step of an operation as a
// kill would (nothing after the point runs; the controller's memory is
// lost) and lets a new controller carry on from what the cluster holds:
// stopped while tainting, it rolls back at once and plans again; stopped
// after the last taint or between evictions, it evicts what is left;
// stopped after allocating, it removes the taints once the pod is bound.
// Every case ends with the waiting pod on the freed device, each planned
// pod evicted once, no taint rule and no abandoned operation.
func TestCrashPoints(t *testing.T) {
	for _, point := range []string{"tainted-1", "tainted", "evicted-1", "evicted-2", "allocated"} {
		t.Run(point, func(t *testing.T) {
			s := fragment(t, "")
			var mu sync.Mutex
			hit := false
			first, err := s.env.New(defrag.WithHook(func(p string) bool {
				mu.Lock()
				defer mu.Unlock()
				hit = hit || p == point
				return p == point
			}))
			if err != nil {
				t.Fatal(err)
			}
			if err := poll(s.ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
				if point == "allocated" {
					kubelet(s.f) // the region is freed before the allocation
				}
				_, err := first.Step(ctx)
				if errors.Is(err, defrag.ErrCrashed) {
					return true, nil
				}
				return false, err
			}); err != nil || !hit {
				t.Fatalf("the controller did not reach %s: %v", point, err)
			}
			rules := len(s.f.TaintedDevices())
			evicted := s.evictionEvents(t)
			t.Logf("stopped at %s: %d taint rules, evictions %v", point, rules, evicted)

			second, err := s.env.New()
			if err != nil {
				t.Fatal(err)
			}
			switch point {
			case "tainted-1":
				if rules != 1 || len(evicted) != 0 {
					t.Fatalf("stopped after the first taint: %d rules, evictions %v", rules, evicted)
				}
				// The next controller's first Step rolls back at once.
				if _, err := second.Step(s.ctx); err != nil {
					t.Fatal(err)
				}
				if r := s.f.TaintedDevices(); len(r) != 0 {
					t.Fatalf("after the first Step of the next controller: taint rules %v, want none (rolled back)", r)
				}
				if _, ok := s.f.Events("big")[defrag.ReasonRolledBack]; !ok {
					t.Errorf("no %s event on big: %v", defrag.ReasonRolledBack, s.f.Events("big"))
				}
				s.untouched(t, "keep", "small-0", "small-1", "small-2", "small-3")
			case "tainted", "evicted-1":
				want := map[string]int{"tainted": 0, "evicted-1": 1}[point]
				if len(evicted) != want {
					t.Fatalf("stopped at %s: evictions %v, want %d", point, evicted, want)
				}
				// The next controller's first Step evicts what is left.
				if _, err := second.Step(s.ctx); err != nil {
					t.Fatal(err)
				}
				if got := s.evictionEvents(t); len(got) != 2 {
					t.Fatalf("after the first Step of the next controller: evictions %v, want both planned pods", got)
				}
			}
			s.finish(t, second)

			// The next controller's eviction budget counts the two
			// evictions, on their node, from the Events.
			third, err := s.env.New(defrag.WithEvictionBudget(3, 10))
			if err != nil {
				t.Fatal(err)
			}
			if why, err := defrag.BudgetRefuses(s.ctx, third, s.env.NodeName, 2); err != nil || !strings.Contains(why, "3 evictions per hour and 2 were made in the last hour") {
				t.Errorf("budget of 3 per hour after 2 evictions, 2 more: %q, %v", why, err)
			}
			fourth, err := s.env.New(defrag.WithEvictionBudget(10, 3))
			if err != nil {
				t.Fatal(err)
			}
			if why, err := defrag.BudgetRefuses(s.ctx, fourth, s.env.NodeName, 2); err != nil || !strings.Contains(why, "3 evictions per node per hour and 2 were made on node "+s.env.NodeName) {
				t.Errorf("budget of 3 per node after 2 evictions, 2 more: %q, %v", why, err)
			}
			if why, err := defrag.BudgetRefuses(s.ctx, fourth, "another-node", 2); err != nil || why != "" {
				t.Errorf("budget of 3 per node, another node: %q, %v", why, err)
			}
		})
	}
}

// TestGuards: the namespace list, the eviction budget, leader election
// and the backoff after an abandoned operation each keep a controller
// from evicting where, without them, it would; the last step shows that
// it would.
func TestGuards(t *testing.T) {
	s := fragment(t, "")
	ctx, env := s.ctx, s.env
	newController := func(opts ...defrag.Option) *defrag.Controller {
		t.Helper()
		c, err := env.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Namespaces: only "other" may be evicted from.
	s.nothing(t, newController(defrag.WithNamespaces("other")), "namespaces other")

	// The budget: the plan evicts two pods of one node.
	s.nothing(t, newController(defrag.WithEvictionBudget(1, 10)), "one eviction per hour")
	s.nothing(t, newController(defrag.WithEvictionBudget(10, 1)), "one eviction per node per hour")

	// Leader election: a dry run that does not lead prints nothing.
	var out1, out2 syncBuffer
	ctx1, stop1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	leader := newController(defrag.WithDryRun(&out1), defrag.WithInterval(200*time.Millisecond), defrag.WithLeaderElection(env.Namespace, "defrag-test"))
	go func() { done1 <- leader.Run(ctx1) }()
	if err := poll(ctx, time.Minute, func(context.Context) (bool, error) { return out1.Len() > 0, nil }); err != nil {
		t.Fatalf("the first replica never led: %v", err)
	}
	ctx2, stop2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	follower := newController(defrag.WithDryRun(&out2), defrag.WithInterval(200*time.Millisecond), defrag.WithLeaderElection(env.Namespace, "defrag-test"))
	go func() { done2 <- follower.Run(ctx2) }()
	time.Sleep(3 * time.Second) // several of the follower's retry periods (2 s)
	if out2.Len() != 0 {
		t.Errorf("the second replica stepped while the first held the lease:\n%s", out2.String())
	}
	stop1() // releases the lease
	if err := <-done1; err != nil {
		t.Errorf("the leader's Run: %v", err)
	}
	if err := poll(ctx, time.Minute, func(context.Context) (bool, error) { return out2.Len() > 0, nil }); err != nil {
		t.Errorf("the second replica never took over: %v", err)
	}
	stop2()
	if err := <-done2; err != nil {
		t.Errorf("the second replica's Run: %v", err)
	}
	s.untouched(t, "keep", "small-0", "small-1", "small-2", "small-3")

	// The backoff: an operation abandoned because small-0's eviction is
	// refused (here by an admission policy; the pods of a fake node are
	// Pending, which the Eviction API evicts whatever their budgets say).
	refuse := refuseEvictions(t, ctx, env, "small-0")
	abandoning := newController()
	if _, err := abandoning.Step(ctx); err == nil || !strings.Contains(err.Error(), "eviction of "+env.Namespace+"/"+s.small["small-0"].Pod+" refused") {
		t.Fatalf("Step with small-0's eviction refused: %v, want the refusal", err)
	}
	if _, ok := s.f.Events("big")[defrag.ReasonAbandoned]; !ok {
		t.Fatalf("no %s event on big: %v", defrag.ReasonAbandoned, s.f.Events("big"))
	}
	refuse()
	s.nothing(t, abandoning, "the same controller during the backoff")
	s.nothing(t, newController(), "a new controller during the backoff (read from its Events)")

	// Without a backoff the same cluster gets an operation.
	if op, err := newController(defrag.WithBackoff(0)).Step(ctx); err != nil || op == nil {
		t.Fatalf("without a backoff: Step = %+v, %v; want an operation", op, err)
	}
}

// TestPriorityFloor: pods of a higher priority than the waiting pod are
// never evicted for it.
func TestPriorityFloor(t *testing.T) {
	s := fragment(t, "high")
	c, err := s.env.New()
	if err != nil {
		t.Fatal(err)
	}
	s.nothing(t, c, "small pods of priority 1000, big of 100")
	// A waiting pod of the same priority may have them moved.
	s.f.PodSpec.PriorityClassName = "high"
	s.f.Pod("bigger", "4g.40gb", "")
	s.f.WaitUnschedulable("bigger")
	if err := s.env.Client.CoreV1().Pods(s.env.Namespace).Delete(s.ctx, "big", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if op, err := c.Step(s.ctx); err != nil || op == nil || op.Pod.Name != "bigger" {
		t.Fatalf("for a pod of priority 1000: Step = %+v, %v; want an operation for bigger", op, err)
	}
}

// refuseEvictions makes the API server refuse evictions of the pods of
// app until the returned function is called.
func refuseEvictions(t *testing.T, ctx context.Context, env *env, app string) func() {
	t.Helper()
	name := "refuse-evictions-" + app
	pol := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("!object.metadata.name.startsWith(%q)", app+"-"), Message: "evictions of " + app + " are refused by the test"}},
		},
	}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait until the policy is in force: a dry-run eviction is refused.
	pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %v, %v", app, pods, err)
	}
	refused := func(ctx context.Context) bool {
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods.Items[0].Name, Namespace: env.Namespace}, DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}}
		err := env.Client.PolicyV1().Evictions(env.Namespace).Evict(ctx, ev)
		return err != nil && strings.Contains(err.Error(), "refused by the test")
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) { return refused(ctx), nil }); err != nil {
		t.Fatalf("the policy refusing evictions of %s is not in force: %v", app, err)
	}
	return func() {
		t.Helper()
		if err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		if err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			return !refused(ctx), nil
		}); err != nil {
			t.Fatalf("the policy refusing evictions of %s stays in force: %v", app, err)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in two
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestOwnedRules: with WithOwner every DeviceTaintRule of an operation is
// owned by the ClusterRole, and deleting the ClusterRole (uninstalling
// the controller mid-operation) lets the garbage collector delete them.
func TestOwnedRules(t *testing.T) {
	s := fragment(t, "")
	cr, err := s.env.Client.RbacV1().ClusterRoles().Create(s.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "defrag-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.env.New(defrag.WithOwner(cr.Name))
	if err != nil {
		t.Fatal(err)
	}
	if op, err := c.Step(s.ctx); err != nil || op == nil {
		t.Fatalf("Step = %+v, %v; want an operation", op, err)
	}
	rules, err := s.env.Client.ResourceV1().DeviceTaintRules().List(s.ctx, metav1.ListOptions{LabelSelector: s.env.Domain + "/defrag-operation"})
	if err != nil || len(rules.Items) == 0 {
		t.Fatalf("taint rules: %v, %v", rules, err)
	}
	for _, r := range rules.Items {
		if o := r.OwnerReferences; len(o) != 1 || o[0].Kind != "ClusterRole" || o[0].Name != cr.Name || o[0].UID != cr.UID {
			t.Errorf("rule %s: owners %+v, want the ClusterRole %s", r.Name, o, cr.Name)
		}
	}
	if err := s.env.Client.RbacV1().ClusterRoles().Delete(s.ctx, cr.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(s.ctx, 2*time.Minute, func(context.Context) (bool, error) { return len(s.f.TaintedDevices()) == 0, nil }); err != nil {
		t.Fatalf("taint rules %v stay after their owner is deleted: %v", s.f.TaintedDevices(), err)
	}
}

// countingTransport counts the requests that read without watching.
type countingTransport struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	reads int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Query().Get("watch") != "true" {
		c.mu.Lock()
		c.reads++
		c.mu.Unlock()
	}
	return c.rt.RoundTrip(r)
}

func (c *countingTransport) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// TestRunReadsFromInformers: once its informers have synced, Run plans
// from their caches: steps that find a plan (a dry run, every 100 ms)
// send no read to the API server.
func TestRunReadsFromInformers(t *testing.T) {
	s := fragment(t, "")
	counter := &countingTransport{}
	cfg := rest.CopyConfig(s.env.RESTConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	c, err := s.env.NewFor(client, defrag.WithDryRun(&out), defrag.WithInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(s.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	plans := func() int { return strings.Count(out.String(), "pod "+s.env.Namespace+"/big waits for 4g.40gb") }
	if err := poll(s.ctx, time.Minute, func(context.Context) (bool, error) { return plans() >= 2, nil }); err != nil {
		t.Fatalf("no plan printed: %v", err)
	}
	before, from := counter.count(), plans()
	if err := poll(s.ctx, time.Minute, func(context.Context) (bool, error) { return plans() >= from+5, nil }); err != nil {
		t.Fatalf("no more plans printed: %v", err)
	}
	reads, steps := counter.count()-before, plans()-from
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	t.Logf("%d reads of the API server in %d steps", reads, steps)
	if reads != 0 {
		t.Errorf("%d reads of the API server in %d steps, want none (informers)", reads, steps)
	}
}
