package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/testenv"
)

const driverName = "minimal.drakit.dev"

// startDriver runs the example driver in-process against the environment's
// node and waits until it serves; the returned function stops it and waits.
func startDriver(ctx context.Context, t *testing.T, env *testenv.Env) func() {
	t.Helper()
	d, err := New(driverName, env.NodeName, 4, env.DriverOptions(driverName)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("driver stopped before it was ready: %v", err)
	}
	if _, err := os.Stat(d.DRASocket()); err != nil {
		t.Fatalf("ready driver has no DRA socket: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("driver: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("driver did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

func poll(ctx context.Context, t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// claimSpecs lists this driver's CDI spec files on the node.
func claimSpecs(t *testing.T, env *testenv.Env) []string {
	t.Helper()
	entries, err := os.ReadDir(env.CDIDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), driverName) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestPodGetsDevice runs a pod that requests one device on the real node:
// it runs and sees its env var; the driver restarts while the claim is
// prepared; deleting the pod unprepares the claim in the new instance.
func TestPodGetsDevice(t *testing.T) {
	t.Parallel() // its own cluster and driver
	env := testenv.Start(t, testenv.WithRealNode())
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	stop := startDriver(ctx, t, env)
	cs := env.Client
	sel := resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.driver == "` + driverName + `"`}}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "minimal"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{sel}}}
	_, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "minimal"}}}}}}
	_, err = cs.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The container exits with an error unless the variable is set; it
	// prints it for the log.
	script := `env | grep "^` + EnvVar + `_" || exit 3; sleep 3600`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "user", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "dev", ResourceClaimName: &claim.Name}},
			Containers: []corev1.Container{{Name: "c", Image: env.BusyboxImage,
				ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", script},
				Resources: corev1.ResourceRequirements{
					Claims: []corev1.ResourceClaim{{Name: "dev"}}}}},
		}}
	if _, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Log("pod created")
	poll(ctx, t, "pod running", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			err := fmt.Errorf("pod ended: %s %+v", p.Status.Phase, p.Status.ContainerStatuses)
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	got, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocated := got.Status.Allocation.Devices.Results[0].Device
	var logs string
	poll(ctx, t, "container output", func(ctx context.Context) (bool, error) {
		logs, _ = env.ContainerLog(ctx, "default", pod.Name, "c")
		return logs != "", nil
	})
	if want := EnvName(allocated) + "=" + allocated; logs != want {
		t.Errorf("container printed %q, want %q", logs, want)
	}
	if specs := claimSpecs(t, env); len(specs) != 1 {
		t.Errorf("CDI specs while prepared: %v, want one", specs)
	}

	t.Log("pod running, container saw its device")
	// Restart the driver between prepare and unprepare.
	stop()
	startDriver(ctx, t, env)

	if err = cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "pod gone", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Log("pod deleted")
	checkpoint := filepath.Join(env.PluginDataDir(driverName), "checkpoint")
	what := "claim unprepared (CDI spec and checkpoint record removed)"
	poll(ctx, t, what, func(context.Context) (bool, error) {
		records, _ := filepath.Glob(filepath.Join(checkpoint, "*.json"))
		return len(claimSpecs(t, env)) == 0 && len(records) == 0, nil
	})

	// The conformance suite's cluster mode: real pods with claims
	// through this node's kubelet and containerd, what their containers
	// see compared with the CDI specs the driver wrote. The driver runs
	// as a process here, not as a pod: pod.driver-restart and the checks
	// after the restart skip.
	rep, err := conformance.RunCluster(ctx, conformance.ClusterConfig{
		DriverName: driverName, NodeName: env.NodeName, Client: cs,
		Image: env.BusyboxImage, CDIDirs: []string{env.CDIDir}, PodTimeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("conformance.RunCluster: %v", err)
	}
	needs := map[string][]string{}
	for _, c := range conformance.ClusterChecks() {
		needs[c.ID] = c.Needs
	}
	for _, res := range rep.Results {
		want := conformance.Pass
		switch {
		case res.ID == "pod.driver-restart", slices.Contains(needs[res.ID], "pod.driver-restart"):
			want = conformance.Skip
		case res.ID == "pod.health" && res.Status == conformance.Skip:
			want = conformance.Skip // the cluster may show no health
		}
		if res.Status != want {
			t.Errorf("cluster mode: %s %s, want %s: %s", res.ID, res.Status, want, res.Message)
		}
	}
}
