package deploy_test

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/testenv"
)

// defragName is the defragmenter's ServiceAccount, ClusterRole and
// Deployment.
const defragName = deploy.DaemonSet + "-defrag"

// asDefrag is a client that acts as the defragmenter's ServiceAccount
// (impersonated, with the groups a ServiceAccount token carries).
func asDefrag(t *testing.T, env *testenv.Env) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + deploy.Namespace + ":" + defragName,
		Groups: []string{
			"system:serviceaccounts",
			"system:serviceaccounts:" + deploy.Namespace,
			"system:authenticated",
		},
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// taintRule is a DeviceTaintRule for one of the driver's devices with the
// given labels and taint key.
func taintRule(
	name string,
	labels map[string]string,
	key, driver string,
) *resourceapi.DeviceTaintRule {
	return &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{
				Driver: ptr.To(driver),
				Pool:   ptr.To("node-a"),
				Device: ptr.To("gpu-0-4g-71gb-0"),
			},
			Taint: resourceapi.DeviceTaint{
				Key:    key,
				Value:  "op-1",
				Effect: resourceapi.DeviceTaintEffectNoSchedule,
			},
		},
	}
}

// refused fails t unless err is a Forbidden whose message has msg.
func refused(t *testing.T, what string, err error, msg string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed", what)
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), msg):
		t.Errorf("%s: %v, want Forbidden: %s", what, err, msg)
	default:
		t.Logf("%s: refused: %v", what, err)
	}
}

// untilRefused waits until the API server has loaded a new policy: until
// a dry run of a request the policy refuses is refused with msg.
func untilRefused(
	t testing.TB,
	ctx context.Context,
	what string,
	dryRun func(context.Context) error,
	msg string,
) {
	t.Helper()
	var last error
	if err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		last = dryRun(ctx)
		return last != nil && strings.Contains(last.Error(), msg), nil
	}); err != nil {
		t.Fatalf("%s: %v, want refused with %q", what, last, msg)
	}
}

// TestDefragPolicy installs the chart with the defragmenter on
// (defrag.namespaces=[defrag-ok]) and acts as its ServiceAccount. RBAC
// lets it write any claim's status, any DeviceTaintRule and evict any
// pod; the chart's ValidatingAdmissionPolicies refuse, each with its
// message: a DeviceTaintRule without the operation label, with another
// taint key, for another driver, with effect NoExecute, or for more than
// one device (the whole driver, a whole pool); deleting
// (deletecollection, admitted per rule) a rule without the label; a
// status update of a claim that is allocated already, an allocation to
// another driver's device, with a configuration that is not the claim's
// own (another one, a class's), in a namespace outside defrag-ok, or
// that also changes status.reservedFor; an eviction outside defrag-ok. What the controller does is
// allowed: creating and deleting its own rules, allocating an unallocated claim to the driver's
// device, evicting in defrag-ok. The administrator is not confined.
func TestDefragPolicy(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const allowedNS, otherNS = "defrag-ok", "elsewhere"
	helmInstall(t, ctx, env, "defrag.enabled=true", "defrag.namespaces={"+allowedNS+"}")
	sa := "system:serviceaccount:" + deploy.Namespace + ":" + defragName
	dc := asDefrag(t, env)
	rules := dc.ResourceV1().DeviceTaintRules()
	own := map[string]string{defrag.LabelOperation: "op-1"}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	// DeviceTaintRules.
	msgLabel := sa + " may create only DeviceTaintRules labelled " + defrag.LabelOperation
	untilRefused(t, ctx, "an unlabelled rule", func(ctx context.Context) error {
		_, err := rules.Create(
			ctx,
			taintRule("unlabelled", nil, defrag.TaintKey, nvdriver.DriverName),
			dryRun,
		)
		return err
	}, msgLabel)
	_, err := rules.Create(
		ctx,
		taintRule("unlabelled", nil, defrag.TaintKey, nvdriver.DriverName),
		metav1.CreateOptions{},
	)
	refused(t, "create a rule without the operation label", err, msgLabel)
	_, err = rules.Create(
		ctx,
		taintRule("other-key", own, "example.com/other", nvdriver.DriverName),
		metav1.CreateOptions{},
	)
	refused(
		t,
		"create a rule with another taint key",
		err,
		sa+" may create only DeviceTaintRules with taint key "+defrag.TaintKey,
	)
	_, err = rules.Create(
		ctx,
		taintRule("other-driver", own, defrag.TaintKey, "other.example.com"),
		metav1.CreateOptions{},
	)
	refused(
		t,
		"create a rule for another driver",
		err,
		sa+" may create only DeviceTaintRules whose deviceSelector.driver is "+nvdriver.DriverName,
	)
	noExecute := taintRule("no-execute", own, defrag.TaintKey, nvdriver.DriverName)
	noExecute.Spec.Taint.Effect = resourceapi.DeviceTaintEffectNoExecute
	_, err = rules.Create(ctx, noExecute, metav1.CreateOptions{})
	refused(t, "create a rule with effect NoExecute", err, sa+" may create only "+
		"DeviceTaintRules with effect NoSchedule")
	wholeDriver := taintRule("whole-driver", own, defrag.TaintKey, nvdriver.DriverName)
	wholeDriver.Spec.DeviceSelector.Pool, wholeDriver.Spec.DeviceSelector.Device = nil, nil
	_, err = rules.Create(ctx, wholeDriver, metav1.CreateOptions{})
	msgOne := sa + " may create only DeviceTaintRules for one device (deviceSelector.pool and " +
		"deviceSelector.device set)"
	refused(t, "create a rule of the whole driver", err, msgOne)
	wholePool := taintRule("whole-pool", own, defrag.TaintKey, nvdriver.DriverName)
	wholePool.Spec.DeviceSelector.Device = nil
	_, err = rules.Create(ctx, wholePool, metav1.CreateOptions{})
	refused(t, "create a rule of a whole pool", err, msgOne)
	if _, err := rules.Create(
		ctx,
		taintRule("mig-defrag-op-1-0", own, defrag.TaintKey, nvdriver.DriverName),
		metav1.CreateOptions{},
	); err != nil {
		t.Fatalf("the controller cannot create its own rule: %v", err)
	}
	foreign, err := env.Client.ResourceV1().DeviceTaintRules().Create(ctx,
		taintRule(
			"admins",
			map[string]string{"owner": "admin"},
			"example.com/maintenance",
			"other.example.com",
		), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the administrator's rule: %v", err)
	}
	// deletecollection is the only delete RBAC grants; the API server
	// admits it rule by rule, as a DELETE of each.
	err = rules.DeleteCollection(
		ctx,
		metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "owner=admin"},
	)
	refused(
		t,
		"delete the administrator's rule",
		err,
		sa+" may delete only its own DeviceTaintRules (label "+defrag.LabelOperation+"), not "+
			foreign.Name,
	)
	if _, err := env.Client.ResourceV1().DeviceTaintRules().Get(
		ctx, foreign.Name, metav1.GetOptions{},
	); err != nil {
		t.Errorf("the administrator's rule after the refused delete: %v", err)
	}
	if err := rules.DeleteCollection(
		ctx,
		metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: defrag.LabelOperation + "=op-1"},
	); err != nil {
		t.Errorf("the controller cannot delete its own rules: %v", err)
	}
	if _, err := env.Client.ResourceV1().DeviceTaintRules().Get(
		ctx, "mig-defrag-op-1-0", metav1.GetOptions{},
	); !apierrors.IsNotFound(
		err,
	) {
		t.Errorf("the controller's rule after its deletecollection: %v", err)
	}

	// Claims.
	for _, ns := range []string{allowedNS, otherNS} {
		if _, err := env.Client.CoreV1().Namespaces().Create(
			ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	ownConfig := resourceapi.DeviceClaimConfiguration{
		Requests: []string{"gpu"},
		DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: nvdriver.DriverName,
				Parameters: runtime.RawExtension{
					Raw: []byte(
						`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig"}`,
					),
				},
			}},
	}
	newClaimIn := func(ns, name string) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name:    "gpu",
					Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.DriverName},
				}}, Config: []resourceapi.DeviceClaimConfiguration{ownConfig}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	newClaim := func(name string) *resourceapi.ResourceClaim { return newClaimIn(allowedNS, name) }
	// As the allocator writes it: the claim's own configuration.
	allocation := func(driver string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "gpu", Driver: driver, Pool: "node-a", Device: "gpu-0-4g-71gb-0",
				}},
				Config: []resourceapi.DeviceAllocationConfiguration{
					{
						Source:              resourceapi.AllocationConfigSourceClaim,
						Requests:            ownConfig.Requests,
						DeviceConfiguration: ownConfig.DeviceConfiguration,
					},
				},
			},
			AllocationTimestamp: ptr.To(metav1.Now()),
		}
	}
	claims := dc.ResourceV1().ResourceClaims(allowedNS)
	msgDriver := sa + " may only allocate a claim to devices of driver " + nvdriver.DriverName
	c := newClaim("other-driver")
	c.Status.Allocation = allocation("other.example.com")
	untilRefused(t, ctx, "an allocation to another driver", func(ctx context.Context) error {
		_, err := claims.UpdateStatus(
			ctx,
			c,
			metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}},
		)
		return err
	}, msgDriver)
	_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	refused(t, "allocate a claim to another driver's device", err, msgDriver)

	msgConfig := sa + " may only write the claim's own configuration (spec.devices.config) into " +
		"its allocation"
	for what, cfg := range map[string]resourceapi.DeviceAllocationConfiguration{
		"another configuration": {
			Source:   resourceapi.AllocationConfigSourceClaim,
			Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: nvdriver.DriverName,
					Parameters: runtime.RawExtension{
						Raw: []byte(
							`{"apiVersion":"gpu.nvidia.drakit.dev/v1alpha1","kind":"GpuConfig",` +
								`"sharing":{"strategy":"TimeSlicing"}}`,
						),
					}},
			},
		},
		"a class's configuration": {
			Source:              resourceapi.AllocationConfigSourceClass,
			DeviceConfiguration: ownConfig.DeviceConfiguration,
		},
	} {
		c = newClaim("config-" + strings.ReplaceAll(strings.ReplaceAll(what, " ", "-"), "'", ""))
		c.Status.Allocation = allocation(nvdriver.DriverName)
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{cfg}
		_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		refused(t, "allocate a claim with "+what, err, msgConfig)
	}
	c = newClaimIn(otherNS, "elsewhere")
	c.Status.Allocation = allocation(nvdriver.DriverName)
	_, err = dc.ResourceV1().ResourceClaims(otherNS).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	refused(
		t,
		"allocate a claim in "+otherNS,
		err,
		sa+" may allocate claims only in namespaces "+allowedNS+", not in "+otherNS,
	)

	c = newClaim("reserved")
	c.Status.Allocation = allocation(nvdriver.DriverName)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
		{Resource: "pods", Name: "someone", UID: "1234"},
	}
	_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	refused(
		t,
		"allocate a claim and reserve it",
		err,
		sa+" may not change a claim's status.reservedFor or status.devices",
	)

	c = newClaim("waiting")
	c.Status.Allocation = allocation(nvdriver.DriverName)
	allocated, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf(
			"the controller cannot allocate an unallocated claim to the driver's device: %v",
			err,
		)
	}
	msgAllocated := sa + " may only allocate a claim that has no allocation, and " + allowedNS +
		"/waiting has one"
	reserve := allocated.DeepCopy()
	reserve.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
		{Resource: "pods", Name: "someone", UID: "1234"},
	}
	_, err = claims.UpdateStatus(ctx, reserve, metav1.UpdateOptions{})
	refused(t, "reserve an allocated claim", err, msgAllocated)
	deallocate := allocated.DeepCopy()
	deallocate.Status.Allocation = nil
	_, err = claims.UpdateStatus(ctx, deallocate, metav1.UpdateOptions{})
	refused(t, "deallocate a claim", err, msgAllocated)
	// The administrator (the scheduler, the driver) is not confined.
	if _, err := env.Client.ResourceV1().ResourceClaims(allowedNS).UpdateStatus(
		ctx, reserve, metav1.UpdateOptions{},
	); err != nil {
		t.Errorf("the administrator cannot reserve the allocated claim: %v", err)
	}

	// Evictions.
	for _, ns := range []string{allowedNS, otherNS} {
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().ServiceAccounts(ns).Get(
				ctx, "default", metav1.GetOptions{},
			)
			return err == nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			},
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(
			ctx, pod, metav1.CreateOptions{},
		); err != nil {
			t.Fatal(err)
		}
	}
	evict := func(ns string, dry bool) error {
		opts := &metav1.DeleteOptions{}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		return dc.PolicyV1().
			Evictions(ns).
			Evict(
				ctx,
				&policyv1.Eviction{
					ObjectMeta:    metav1.ObjectMeta{Name: "victim", Namespace: ns},
					DeleteOptions: opts,
				},
			)
	}
	msgNS := sa + " may evict pods only in namespaces " + allowedNS + ", not in " + otherNS
	untilRefused(
		t,
		ctx,
		"an eviction elsewhere",
		func(context.Context) error { return evict(otherNS, true) },
		msgNS,
	)
	refused(t, "evict a pod in "+otherNS, evict(otherNS, false), msgNS)
	if err := evict(allowedNS, false); err != nil {
		t.Errorf("the controller cannot evict a pod in %s: %v", allowedNS, err)
	}
}

// TestDefragUninstallRemovesTaintRules: a DeviceTaintRule the controller
// made (its operation label, its taint key, an ownerReference to the
// chart's defragmenter ClusterRole, as --owner-cluster-role makes it) is
// deleted by the garbage collector once the ClusterRole is gone: after
// `helm upgrade --set defrag.enabled=false` and after `helm uninstall`.
// A rule the controller does not own stays.
func TestDefragUninstallRemovesTaintRules(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	helmInstall(t, ctx, env, "defrag.enabled=true")
	dc := asDefrag(t, env)
	if _, err := env.Client.ResourceV1().DeviceTaintRules().Create(ctx,
		taintRule(
			"admins",
			map[string]string{"owner": "admin"},
			"example.com/maintenance",
			nvdriver.DriverName,
		), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	helmRun := func(args ...string) {
		t.Helper()
		args = append(args, "--kubeconfig", env.Kubeconfig, "--namespace", deploy.Namespace)
		if out, err := exec.CommandContext(ctx, helm(t), args...).CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// makeRule makes a rule as the controller does: as its ServiceAccount,
	// which reads its ClusterRole's UID (RBAC: get on that one name).
	makeRule := func(name string) {
		t.Helper()
		role, err := dc.RbacV1().ClusterRoles().Get(ctx, defragName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the controller cannot read its ClusterRole: %v", err)
		}
		r := taintRule(
			name,
			map[string]string{defrag.LabelOperation: name},
			defrag.TaintKey,
			nvdriver.DriverName,
		)
		r.OwnerReferences = []metav1.OwnerReference{
			{
				APIVersion: "rbac.authorization.k8s.io/v1",
				Kind:       "ClusterRole",
				Name:       role.Name,
				UID:        role.UID,
			},
		}
		if _, err := dc.ResourceV1().DeviceTaintRules().Create(
			ctx, r, metav1.CreateOptions{},
		); err != nil {
			t.Fatalf("the controller cannot create its rule: %v", err)
		}
	}
	gone := func(how, name string) {
		t.Helper()
		var last error
		if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, last = env.Client.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(last), nil
		}); err != nil {
			t.Fatalf("after %s the controller's rule %s is still there (%v)", how, name, last)
		}
		if _, err := env.Client.RbacV1().ClusterRoles().Get(
			ctx, defragName, metav1.GetOptions{},
		); !apierrors.IsNotFound(
			err,
		) {
			t.Errorf("after %s the ClusterRole %s: %v", how, defragName, err)
		}
		if _, err := env.Client.ResourceV1().DeviceTaintRules().Get(
			ctx, "admins", metav1.GetOptions{},
		); err != nil {
			t.Errorf("after %s the administrator's rule: %v", how, err)
		}
	}
	// Another role in the cluster is no way to have a rule of yours removed.
	if _, err := dc.RbacV1().ClusterRoles().Get(
		ctx, deploy.DaemonSet, metav1.GetOptions{},
	); !apierrors.IsForbidden(
		err,
	) {
		t.Errorf("the controller reads ClusterRole %s: %v, want Forbidden", deploy.DaemonSet, err)
	}

	makeRule("mig-defrag-op-1-0")
	helmRun("upgrade", deploy.Release, "chart", "--reuse-values", "--set", "defrag.enabled=false")
	gone("helm upgrade --set defrag.enabled=false", "mig-defrag-op-1-0")

	helmRun("upgrade", deploy.Release, "chart", "--reuse-values", "--set", "defrag.enabled=true")
	makeRule("mig-defrag-op-2-0")
	helmRun("uninstall", deploy.Release, "--wait")
	gone("helm uninstall", "mig-defrag-op-2-0")
}

// TestDefragControllerRBAC runs the controller in the test's process as
// the chart's ServiceAccount with the flags of the chart's Deployment:
// with a pod waiting for a claim (unschedulable: no devices), one Step
// lists everything the controller reads (its Events to seed the
// budgets, the scheduler's snapshot, pods, budgets, its taint rules)
// without a refusal; with leader election (the chart's default) it takes
// the Lease with the Role's rights and releases it when stopped.
func TestDefragControllerRBAC(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns = "defrag-ok"
	helmInstall(t, ctx, env, "defrag.enabled=true", "defrag.namespaces={"+ns+"}")
	dep, err := env.Client.AppsV1().
		Deployments(deploy.Namespace).
		Get(ctx, defragName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := parseDefragFlags(t, dep.Spec.Template.Spec.Containers[0].Args)
	f.Interval = 200 * time.Millisecond

	if _, err := env.Client.CoreV1().Namespaces().Create(
		ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{},
	); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name:    "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nvdriver.DriverName},
			}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{
					Name:  "c",
					Image: "busybox",
					Resources: corev1.ResourceRequirements{
						Claims: []corev1.ResourceClaim{{Name: "gpu"}},
					},
				},
			},
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimName: ptr.To("big")},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the waiting pod is not unschedulable: %v", err)
	}
	dc := asDefrag(t, env)

	once := f
	once.Once, once.LeaderElect = true, false
	if err := once.Run(ctx, dc, io.Discard); err != nil {
		t.Fatalf("one Step as the chart's ServiceAccount: %v", err)
	}

	if !f.LeaderElect {
		t.Fatalf("the chart's flags %+v: no leader election", f)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx, dc, io.Discard) }()
	var holder string
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		l, err := env.Client.CoordinationV1().Leases(deploy.Namespace).Get(
			ctx, defragName, metav1.GetOptions{},
		)
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != "", nil
	}); err != nil {
		stop()
		t.Fatalf(
			"the controller does not take Lease %s/%s: %v (Run: %v)",
			deploy.Namespace,
			defragName,
			err,
			<-done,
		)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after the stop: %v", err)
	}
	l, err := env.Client.CoordinationV1().
		Leases(deploy.Namespace).
		Get(ctx, defragName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		t.Errorf(
			"the Lease after the stop: held by %v (%v), want released",
			l.Spec.HolderIdentity,
			err,
		)
	}
	t.Logf("Lease %s/%s taken by %s and released", deploy.Namespace, defragName, holder)
}
