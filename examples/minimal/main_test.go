package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

const driverName = "minimal.drakit.dev"

// startDriver runs the example driver in-process against the cluster's
// real node; the returned function stops it and waits.
func startDriver(ctx context.Context, t *testing.T, c *cluster.Cluster) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{DriverName: driverName, NodeName: c.NodeName, Devices: 4, REST: c.RESTConfig,
			RegistrarDir: c.PluginRegistryDir, PluginDataDir: filepath.Join(c.PluginsDir, driverName), CDIDir: c.CDIDir})
	}()
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
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// claimSpecs lists this driver's CDI spec files on the node.
func claimSpecs(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	entries, err := os.ReadDir(c.CDIDir)
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
	c := clustertest.Start(t, cluster.WithNode())
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	stop := startDriver(ctx, t, c)
	cs := c.Client
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "minimal"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driverName + `"`}}}}}
	if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "dev",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "minimal"}}}}}}
	if _, err := cs.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The container exits with an error unless the variable is set; it
	// prints it for the log.
	script := `echo "` + EnvVar + `=$` + EnvVar + `"; [ -n "$` + EnvVar + `" ] || exit 3; echo "$` + EnvVar + `" > /dev/termination-log; sleep 3600`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "user", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: new(int64),
			ResourceClaims: []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: &claim.Name}},
			Containers: []corev1.Container{{Name: "c", Image: c.Images.Busybox, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script}, Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}}}},
		}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Log("pod created")
	poll(ctx, t, "pod running", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod ended: %s %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	got, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocated := got.Status.Allocation.Devices.Results[0].Device
	logs := podLog(ctx, t, c, pod.Name)
	if want := EnvVar + "=" + allocated; logs != want {
		t.Errorf("container printed %q, want %q", logs, want)
	}
	if specs := claimSpecs(t, c); len(specs) != 1 {
		t.Errorf("CDI specs while prepared: %v, want one", specs)
	}

	t.Log("pod running, container saw its device")
	// Restart the driver between prepare and unprepare.
	stop()
	startDriver(ctx, t, c)

	if err := cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "pod gone", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Log("pod deleted")
	poll(ctx, t, "claim unprepared (CDI spec and checkpoint record removed)", func(ctx context.Context) (bool, error) {
		records, _ := filepath.Glob(filepath.Join(c.PluginsDir, driverName, "checkpoint", "*.json"))
		return len(claimSpecs(t, c)) == 0 && len(records) == 0, nil
	})
}

// podLog reads the container's output through the API server, or from the
// node's log file when the API server cannot reach the kubelet.
func podLog(ctx context.Context, t *testing.T, c *cluster.Cluster, pod string) string {
	t.Helper()
	var out string
	poll(ctx, t, "container output", func(ctx context.Context) (bool, error) {
		logs, err := c.Client.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil {
			out = strings.TrimSpace(string(logs))
			return out != "", nil
		}
		files, _ := filepath.Glob(filepath.Join(c.Dir, "pod-logs", "default_"+pod+"_*", "c", "*.log"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			// CRI log lines: "<time> stdout F <text>".
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				if parts := strings.SplitN(line, " ", 4); len(parts) == 4 {
					out = parts[3]
					return true, nil
				}
			}
		}
		return false, nil
	})
	return out
}
