package deploy_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
	"github.com/drakit/drakit/testenv"
)

// installed is a driver deployed onto a test cluster's real node as users
// deploy it: image imported, chart installed with helm.
type installed struct {
	env         *testenv.Env
	stateDir    string // the simulator's state folder on the host
	webhookPort int    // the webhook's port on the host, where it runs
	// healthPort is the driver's health and metrics port on the host (the
	// DaemonSet runs on the host's network): a free one, not the chart's
	// 51589, so that another real node's driver (a test package running
	// beside this one) does not take it.
	healthPort int
}

// install builds pkg's image as ref, imports it into the real node's
// containerd and helm-installs the chart with the local cluster's values
// and set, then waits until the DaemonSet's pod is ready (registered,
// slices published).
func install(
	t *testing.T,
	ctx context.Context,
	env *testenv.Env,
	pkg, ref string,
	set ...string,
) *installed {
	t.Helper()
	t0 := time.Now()
	tarball, desc := buildImage(t, ctx, pkg, ref)
	if err := env.ImportImage(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf(
		"image %s (%s) built and imported in %s",
		ref,
		desc.Digest,
		time.Since(t0).Round(time.Millisecond),
	)
	u, err := url.Parse(env.RESTConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	in := &installed{env: env, stateDir: filepath.Join(env.Dir, "nvml-sim"),
		webhookPort: freeLocalPort(t), healthPort: freeLocalPort(t)}
	repo, tag, _ := strings.Cut(ref, ":")
	args := []string{"install", deploy.Release, "chart", "--kubeconfig", env.Kubeconfig,
		"--namespace", deploy.Namespace, "--create-namespace", "--wait", "--timeout", "3m",
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag}
	for _, v := range append(in.localValues(u.Port()), set...) {
		args = append(args, "--set", v)
	}
	t0 = time.Now()
	out, err := exec.CommandContext(ctx, helm(t), args...).CombinedOutput()
	if err != nil {
		in.dumpDriver(t)
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Logf("helm install --wait: %s", time.Since(t0).Round(time.Millisecond))
	return in
}

// images are the images this test binary built, by package and ref: the
// tests that install the same image (they run in parallel) build it once.
var images struct {
	sync.Mutex
	dir   string // removed by TestMain
	built map[string]builtImage
}

type builtImage struct {
	tarball string
	desc    ociimage.Descriptor
}

// buildImage returns the tarball of pkg's image as ref, built by
// deploy.BuildImage the first time it is asked for.
func buildImage(t *testing.T, ctx context.Context, pkg, ref string) (string, ociimage.Descriptor) {
	t.Helper()
	images.Lock()
	defer images.Unlock()
	if b, ok := images.built[pkg+" "+ref]; ok {
		return b.tarball, b.desc
	}
	if images.dir == "" {
		dir, err := os.MkdirTemp("", "deploy-test-images-")
		if err != nil {
			t.Fatal(err)
		}
		images.dir, images.built = dir, map[string]builtImage{}
	}
	tarball := filepath.Join(images.dir, fmt.Sprintf("image-%d.tar", len(images.built)))
	desc, err := deploy.BuildImage(ctx, pkg, ref, tarball)
	if err != nil {
		t.Fatal(err)
	}
	images.built[pkg+" "+ref] = builtImage{tarball, desc}
	return tarball, desc
}

func TestMain(m *testing.M) {
	code := m.Run()
	if images.dir != "" {
		_ = os.RemoveAll(images.dir)
	}
	os.Exit(code)
}

// localValues are the chart values of the local cluster for this
// installation.
func (in *installed) localValues(apiServerPort string) []string {
	kubeletDir := filepath.Dir(in.env.RegistrarDir)
	return append(deploy.LocalClusterValues(kubeletDir, in.env.CDIDir, apiServerPort, in.stateDir,
		in.webhookPort), fmt.Sprintf("healthPort=%d", in.healthPort))
}

// driverPod returns the DaemonSet's running pod.
func (in *installed) driverPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := in.env.Client.CoreV1().
		Pods(deploy.Namespace).
		List(ctx, metav1.ListOptions{LabelSelector: deploy.PodSelector})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no driver pod")
}

// dumpDriver logs the driver pod's status and output, for a failure.
func (in *installed) dumpDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods, err := in.env.Client.CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list driver pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf(
			"driver pod %s: phase %s, conditions %+v, container statuses %+v",
			p.Name,
			p.Status.Phase,
			p.Status.Conditions,
			p.Status.ContainerStatuses,
		)
		// The DaemonSet's container is "driver", the webhook's "webhook".
		c := p.Spec.Containers[0].Name
		log, err := in.env.ContainerLog(ctx, p.Namespace, p.Name, c)
		t.Logf("%s log (%v):\n%s", c, err, log)
	}
}

func poll(ctx context.Context, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond)
}
