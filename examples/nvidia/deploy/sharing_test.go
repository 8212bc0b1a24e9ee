package deploy_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/testenv"
)

// testSharing runs, on the cluster of TestE2E (GPU 1 shared,
// GPU 1 free again), two pods that each ask for an MPS share of a shared
// GPU, 64 and 48 GiB of the H200's 140: both run on GPU 1, each
// container with its own pinned memory limit, the default thread
// percentage and the daemon's pipe folder in its environment. A third
// asks for 40 GiB, more than is left: it stays Pending with the
// scheduler's reason. Then every pod goes and the shares with them.
func testSharing(t *testing.T, ctx context.Context, env *testenv.Env) {
	t0 := time.Now()
	defer func() { t.Logf("the sharing scenario took %s", time.Since(t0).Round(time.Second)) }()
	ws := []deploy.Workload{
		deploy.SharedWorkload(storyNS, env.BusyboxImage, "share-64", "64Gi"),
		deploy.SharedWorkload(storyNS, env.BusyboxImage, "share-48", "48Gi"),
		deploy.SharedWorkload(storyNS, env.BusyboxImage, "share-40", "40Gi"),
	}
	for _, w := range ws {
		if _, err := env.Client.ResourceV1().ResourceClaimTemplates(storyNS).Create(ctx, w.Template,
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The two that fit first, so that the third comes when they hold
	// GPU 1.
	for _, w := range ws[:2] {
		if _, err := env.Client.CoreV1().Pods(storyNS).Create(ctx, w.Pod,
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"share-64": "0=65536M", "share-48": "0=49152M"}
	for _, w := range ws[:2] {
		s, claim, err := waitSeen(ctx, env, w.Name)
		if err != nil {
			t.Fatal(err)
		}
		r := claim.Status.Allocation.Devices.Results
		if len(r) != 1 || r[0].Device != "gpu-1"+nvdriver.SharedSuffix || r[0].ShareID == nil {
			t.Errorf("pod %s got %+v, want a share of gpu-1-shared", w.Name, r)
		}
		if got := s.Env[nvdriver.EnvMPSMemoryLimit]; got != want[w.Name] {
			t.Errorf("pod %s: %s=%q, want %q", w.Name, nvdriver.EnvMPSMemoryLimit, got,
				want[w.Name])
		}
		if s.Env[nvdriver.EnvMPSThreads] != "10" ||
			s.Env[nvdriver.EnvMPSPipeDir] != nvdriver.MPSPipeDir {
			t.Errorf("pod %s saw %v, want the default thread percentage and the pipe folder",
				w.Name, s.Env)
		}
		t.Logf("pod %s: %s=%s %s=%s", w.Name, nvdriver.EnvMPSMemoryLimit,
			s.Env[nvdriver.EnvMPSMemoryLimit],
			nvdriver.EnvMPSThreads, s.Env[nvdriver.EnvMPSThreads])
	}
	if _, err := env.Client.CoreV1().Pods(storyNS).Create(ctx, ws[2].Pod,
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkPending(t, ctx, env, ws[2].Name)
	for _, w := range ws {
		if err := env.Client.CoreV1().Pods(storyNS).Delete(ctx, w.Name,
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Error(err)
		}
	}
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := env.Client.ResourceV1().ResourceClaims(storyNS).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0 && len(cdiSpecs(t, env)) == 0, err
	}); err != nil {
		t.Fatalf("the shares' claims and CDI specs are left: %v", err)
	}
}
