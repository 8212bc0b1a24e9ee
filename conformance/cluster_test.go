package conformance_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// TestCluster runs cluster mode on the local real node against the test
// driver deployed as a DaemonSet: the correct driver passes every check
// it can set up, and one whose devices overwrite each other's
// environment variable (colliding-env) is caught by cluster mode
// (pod.two-devices, with and without the node's CDI specs) and by socket
// mode (prepare.cdi-env) run against the same deployed driver.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with a real node")
	}
	bin := buildStaticTestDriver(t)
	c := clustertest.Start(t, cluster.WithNode())
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	const good, bad = "good.cluster.drakit.dev", "env.cluster.drakit.dev"
	goodSet := deployTestDriver(t, ctx, c, bin, good, "cluster-good")
	deployTestDriver(t, ctx, c, bin, bad, "cluster-env", "-defect", "colliding-env")
	for _, driver := range []string{good, bad} {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
			return err == nil && len(l.Items) > 0, nil
		}); err != nil {
			t.Fatalf("driver %s publishes no slices: %v", driver, err)
		}
	}
	cfg := func(driver string) conformance.ClusterConfig {
		return conformance.ClusterConfig{
			DriverName: driver, NodeName: c.NodeName, Client: c.Client,
			Image: c.Images.Busybox, CDIDirs: []string{c.CDIDir},
			Progress: testWriter{t}, PodTimeout: time.Minute,
		}
	}

	t.Run("correct", func(t *testing.T) {
		cc := cfg(good)
		cc.DriverNamespace, cc.DriverPodSelector = testDriverNS, goodSet.selector()
		rep, err := conformance.RunCluster(ctx, cc)
		if err != nil {
			t.Fatalf("RunCluster: %v", err)
		}
		for _, res := range rep.Results {
			switch {
			case res.Status == conformance.Fail || res.Status == conformance.Warn:
				t.Errorf("%s %s: %s", res.ID, res.Status, res.Message)
			case res.Status == conformance.Skip && res.ID != "pod.health":
				t.Errorf("%s skipped: %s", res.ID, res.Message)
			default:
				t.Logf("%s %s: %s", res.ID, res.Status, res.Message)
			}
		}
		if len(rep.Results) != len(conformance.ClusterChecks()) {
			t.Errorf("%d results, want one per check (%d)", len(rep.Results), len(conformance.ClusterChecks()))
		}
		left, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: conformance.ClusterLabel})
		if err != nil || len(left.Items) > 0 {
			t.Errorf("namespaces left after the run: %v %v", left, err)
		}
	})

	t.Run("colliding-env", func(t *testing.T) {
		// Cluster mode, with the node's CDI specs and without.
		for _, cdi := range []bool{true, false} {
			cc := cfg(bad)
			if !cdi {
				cc.CDIDirs = nil
			}
			cc.Only = []string{"pod.two-devices"}
			rep, err := conformance.RunCluster(ctx, cc)
			if err != nil {
				t.Fatalf("RunCluster: %v", err)
			}
			if res, _ := rep.Result("pod.two-devices"); res.Status != conformance.Fail {
				t.Errorf("cluster mode (CDI specs read: %v): pod.two-devices %s (%s), want fail", cdi, res.Status, res.Message)
			} else {
				t.Logf("cluster mode (CDI specs read: %v) caught it: %s", cdi, res.Message)
			}
		}
		// Socket mode against the same deployed driver.
		rep, err := conformance.Run(ctx, conformance.Config{
			DriverName: bad, NodeName: c.NodeName, Client: c.Client,
			RegistrationPath: c.PluginRegistryDir, CDIDirs: []string{c.CDIDir},
			Only: []string{"prepare.cdi-env"}, PublishTimeout: time.Minute,
		})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res, _ := rep.Result("prepare.cdi-env"); res.Status != conformance.Fail {
			t.Errorf("socket mode: prepare.cdi-env %s (%s), want fail", res.Status, res.Message)
		} else {
			t.Logf("socket mode caught it: %s", res.Message)
		}
	})
}
