package conformance_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// TestDaemonSet runs the suite against the test driver deployed as a
// DaemonSet pod on the local real node, as drivers normally run: the
// suite does not start it; it restarts it by deleting the pod (the
// DaemonSet starts a new one) and reads the node's CDI folder through a
// command. The kubelet on the node registers the driver too. It needs the
// real node (one per host), so it runs only with DRAKIT_CONFORMANCE_DAEMONSET=1.
func TestDaemonSet(t *testing.T) {
	t.Parallel() // a real node of its own (the host runs two at once)
	if os.Getenv("DRAKIT_CONFORMANCE_DAEMONSET") != "1" {
		t.Skip("needs the real node; set DRAKIT_CONFORMANCE_DAEMONSET=1")
	}
	bin := buildStaticTestDriver(t)
	c := clustertest.Start(t, cluster.WithNode())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const driver = "daemonset.conformance.drakit.dev"
	ds := deployTestDriver(t, ctx, c, bin, driver, "conformance-testdriver")
	pod, err := ds.running(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := conformance.Run(ctx, conformance.Config{
		DriverName: driver, NodeName: c.NodeName, Client: c.Client,
		RegistrationPath: c.PluginRegistryDir,
		// What kubectl exec POD -- tar would return; the suite runs on
		// the node, so a host tar reads the same folder.
		ReadCDICommand: []string{"tar", "-C", c.CDIDir, "-cf", "-", "."},
		RestartDriver: func(ctx context.Context) error {
			err := c.Client.CoreV1().Pods(testDriverNS).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			pod, err = ds.running(ctx, pod)
			return err
		},
		PublishTimeout: time.Minute,
		Progress:       testWriter{t},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, res := range rep.Results {
		if res.Status == conformance.Fail || res.Status == conformance.Warn {
			t.Errorf("%s %s: %s", res.ID, res.Status, res.Message)
		}
	}
	if res, _ := rep.Result("restart.reregister"); res.Status != conformance.Pass {
		t.Errorf("restart.reregister %s (%s), want pass: the DaemonSet pod was restarted", res.Status, res.Message)
	}
}

// testDriverNS is where deployTestDriver puts its DaemonSets.
const testDriverNS = "kube-system"

// buildStaticTestDriver builds the test driver as a static binary (the
// busybox image has no C library).
func buildStaticTestDriver(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "conformance-testdriver")
	build := exec.Command("go", "build", "-o", bin, "./internal/testdriver/conformance-testdriver")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test driver: %v\n%s", err, out)
	}
	return bin
}

// testDriverSet is the test driver deployed as a DaemonSet.
type testDriverSet struct {
	c   *cluster.Cluster
	app string // the pods' app label
}

// selector selects the DaemonSet's pods.
func (d testDriverSet) selector() string { return "app=" + d.app }

// deployTestDriver runs the test driver bin named driver as a DaemonSet
// on the real node of c, from the node's busybox image with the binary
// mounted from the host, with further test driver flags args.
func deployTestDriver(t *testing.T, ctx context.Context, c *cluster.Cluster, bin, driver, app string, args ...string) testDriverSet {
	t.Helper()
	labels := map[string]string{"app": app}
	hostPath := func(name, path string) (corev1.Volume, corev1.VolumeMount) {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}},
			corev1.VolumeMount{Name: name, MountPath: path}
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for name, path := range map[string]string{"bin": filepath.Dir(bin), "kubeconfig": filepath.Dir(c.Kubeconfig),
		"registry": c.PluginRegistryDir, "plugins": c.PluginsDir, "cdi": c.CDIDir} {
		v, m := hostPath(name, path)
		vols, mounts = append(vols, v), append(mounts, m)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: testDriverNS},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true, TerminationGracePeriodSeconds: new(int64),
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Volumes:     vols,
					Containers: []corev1.Container{{
						Name: "driver", Image: c.Images.Busybox, ImagePullPolicy: corev1.PullNever,
						Command: append([]string{bin, "-driver-name", driver, "-kubeconfig", c.Kubeconfig,
							"-registrar-dir", c.PluginRegistryDir, "-plugin-dir", filepath.Join(c.PluginsDir, driver),
							"-cdi-dir", c.CDIDir, "-health-timeout", "2s"}, args...),
						Env:          []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						VolumeMounts: mounts,
					}},
				},
			},
		},
	}
	if _, err := c.Client.AppsV1().DaemonSets(testDriverNS).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return testDriverSet{c: c, app: app}
}

// running returns the DaemonSet's running pod other than old.
func (d testDriverSet) running(ctx context.Context, old string) (string, error) {
	var name string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := d.c.Client.CoreV1().Pods(testDriverNS).List(ctx, metav1.ListOptions{LabelSelector: d.selector()})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Name != old && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				name = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("wait for a running driver pod: %w", err)
	}
	return name, nil
}

// testWriter writes progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
