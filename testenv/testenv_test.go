package testenv_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/testenv"
)

// TestFakeNodes starts an environment with a fake node of its own name
// and one more: both are Ready and schedulable, the folders a driver
// needs exist, and the driver's folder is under PluginsDir.
func TestFakeNodes(t *testing.T) {
	env := testenv.Start(t, testenv.WithNodeName("fpga-node"), testenv.WithFakeNodes("other"))
	if env.NodeName != "fpga-node" || env.RealNode {
		t.Errorf("node %q (real %v), want the fake node fpga-node", env.NodeName, env.RealNode)
	}
	for _, name := range []string{"fpga-node", "other"} {
		n, err := env.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		if !ready || n.Spec.Unschedulable || len(n.Spec.Taints) > 0 {
			t.Errorf("node %s: ready %v, unschedulable %v, taints %v; want ready and schedulable", name, ready, n.Spec.Unschedulable, n.Spec.Taints)
		}
	}
	for _, dir := range []string{env.RegistrarDir, env.PluginsDir, env.CDIDir} {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Errorf("folder %s: %v", dir, err)
		}
	}
	if got, want := env.PluginDataDir("fpga.example.com"), env.PluginsDir+"/fpga.example.com"; got != want {
		t.Errorf("PluginDataDir = %s, want %s", got, want)
	}
	if _, err := os.Stat(env.Kubeconfig); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
}
