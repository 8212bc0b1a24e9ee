package cluster_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

const testDriver = "test.drakit.dev"

// tinyDriver is a DRA driver written directly on kubeletplugin: it hands
// out its devices and injects DRAKIT_DEVICE=<device> through a CDI spec.
type tinyDriver struct {
	cdiDir string
	mu     sync.Mutex
	// prepared maps claim UID to its CDI spec file.
	prepared map[types.UID]string
}

func (d *tinyDriver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		var res kubeletplugin.PrepareResult
		var names []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != testDriver {
				continue
			}
			names = append(names, r.Device)
			res.Devices = append(res.Devices, kubeletplugin.Device{
				Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				CDIDeviceIDs: []string{testDriver + "/dev=" + string(claim.UID)},
			})
		}
		spec := map[string]any{
			"cdiVersion": "0.5.0",
			"kind":       testDriver + "/dev",
			"devices": []any{map[string]any{
				"name":           string(claim.UID),
				"containerEdits": map[string]any{"env": []string{"DRAKIT_DEVICE=" + strings.Join(names, ",")}},
			}},
		}
		data, _ := json.Marshal(spec)
		path := filepath.Join(d.cdiDir, testDriver+"-"+string(claim.UID)+".json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			res.Err = err
		}
		d.prepared[claim.UID] = path
		out[claim.UID] = res
	}
	return out, nil
}

func (d *tinyDriver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		_ = os.Remove(filepath.Join(d.cdiDir, testDriver+"-"+string(c.UID)+".json"))
		delete(d.prepared, c.UID)
		out[c.UID] = nil
	}
	return out, nil
}

func (d *tinyDriver) HandleError(ctx context.Context, err error, msg string) {}

func (d *tinyDriver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (d *tinyDriver) preparedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.prepared)
}

// TestRealNode proves the cluster is real: the real scheduler allocates a
// claim from a driver's ResourceSlice, the real kubelet has the driver
// prepare it, and containerd injects the driver's CDI env var.
func TestRealNode(t *testing.T) {
	c := clustertest.Start(t, cluster.WithNode(), cluster.WithLogWriter(testWriter{t}))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	pluginDir := filepath.Join(c.PluginsDir, testDriver)
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		t.Fatal(err)
	}
	drv := &tinyDriver{cdiDir: c.CDIDir, prepared: map[types.UID]string{}}
	helper, err := kubeletplugin.Start(ctx, drv,
		kubeletplugin.DriverName(testDriver),
		kubeletplugin.KubeClient(c.Client),
		kubeletplugin.NodeName(c.NodeName),
		kubeletplugin.RegistrarDirectoryPath(c.PluginRegistryDir),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		t.Fatalf("start test driver: %v", err)
	}
	t.Cleanup(helper.Stop)
	devices := []resourceapi.Device{{Name: "dev-0"}, {Name: "dev-1"}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		c.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}); err != nil {
		t.Fatalf("publish: %v", err)
	}

	cs := c.Client
	mustCreate(t, func() error {
		_, err := cs.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: testDriver},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", testDriver)},
			}}},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := cs.ResourceV1().ResourceClaimTemplates("default").Create(ctx, &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "one-device"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: testDriver},
				}}},
			}},
		}, metav1.CreateOptions{})
		return err
	})

	for _, name := range []string{"pod-a", "pod-b"} {
		createPod(ctx, t, cs, c, name)
	}
	for _, name := range []string{"pod-a", "pod-b"} {
		waitPhase(ctx, t, cs, name, corev1.PodRunning)
		logs := waitLogs(ctx, t, cs, name, "DRAKIT_DEVICE=dev-")
		t.Logf("%s sees %s", name, strings.TrimSpace(logs))
	}
	if n := drv.preparedCount(); n != 2 {
		t.Errorf("driver has %d prepared claims, want 2", n)
	}

	// A third pod cannot get a device while two hold them.
	createPod(ctx, t, cs, c, "pod-c")
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "pod-c", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod-c was bound to %s although both devices are in use", p.Spec.NodeName)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod-c should be unschedulable: %v", err)
	}

	// Freeing a device lets it run; the freed claim is unprepared.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "pod-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatalf("delete pod-a: %v", err)
	}
	waitPhase(ctx, t, cs, "pod-c", corev1.PodRunning)
	waitLogs(ctx, t, cs, "pod-c", "DRAKIT_DEVICE=dev-")
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return drv.preparedCount() == 2, nil
	})
	if err != nil {
		t.Errorf("after pod-a's deletion the driver holds %d claims, want 2 (pod-b, pod-c)", drv.preparedCount())
	}
}

// TestFakeNodes shows the control-plane-only mode: the scheduler binds a
// pod to a fake node with no kubelet.
func TestFakeNodes(t *testing.T) {
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.AddFakeNode(ctx, "fake-0", map[string]string{"rack": "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"rack": "r1"},
			Containers:   []corev1.Container{{Name: "c", Image: "none"}},
		},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "fake-0", err
	})
	if err != nil {
		t.Fatalf("pod not bound to fake-0: %v", err)
	}

	// The scheduler's CPU profile (what "drakit bench sched -cpuprofile"
	// reads): a gzipped pprof profile of CPU samples.
	prof, err := c.SchedulerCPUProfile(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(prof))
	if err != nil {
		t.Fatalf("scheduler profile is not gzipped (%d bytes): %v", len(prof), err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("read scheduler profile: %v", err)
	}
	for _, want := range []string{"samples", "cpu", "nanoseconds"} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("scheduler profile's string table lacks %q", want)
		}
	}
	if _, err := c.SchedulerCPUProfile(ctx, 0); err == nil {
		t.Error("a profile of 0 s was not refused")
	}
}

func createPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, c *cluster.Cluster, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To("one-device")}},
			Containers: []corev1.Container{{
				Name: "c", Image: c.Images.Busybox, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", "env | grep DRAKIT_; sleep 3600"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
			}},
		},
	}
	mustCreate(t, func() error {
		_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
}

func waitPhase(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, phase corev1.PodPhase) {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed", name)
		}
		return p.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("pod %s not %s: %v; status: %+v", name, phase, err, last.Status)
	}
}

func waitLogs(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, want string) string {
	t.Helper()
	var logs string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		data, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(data)
		return err == nil && strings.Contains(logs, want), nil
	})
	if err != nil {
		t.Fatalf("logs of %s do not contain %q: %q", name, want, logs)
	}
	return logs
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
