package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// asDriverEnv makes the test binary run as the example driver, so that the
// conformance suite can start, kill -9 and restart it as a real process.
const asDriverEnv = "DRAKIT_MINIMAL_RUN_AS_DRIVER"

func TestMain(m *testing.M) {
	if os.Getenv(asDriverEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestConformance runs drakit's conformance suite, which knows nothing of
// the driver runtime and speaks only the kubelet's and the API server's
// protocols, against the example driver built with that runtime.
func TestConformance(t *testing.T) {
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "conformance-node"
	if err := c.AddFakeNode(ctx, node, nil, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg, plugin, cdiDir := filepath.Join(dir, "registry"), filepath.Join(dir, "plugin"), filepath.Join(dir, "cdi")
	for _, d := range []string{reg, plugin, cdiDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	conformance.Test(t, conformance.Config{
		DriverName:       driverName,
		NodeName:         node,
		Client:           c.Client,
		RegistrationPath: reg,
		CDIDirs:          []string{cdiDir},
		StartCommand: []string{self, "-kubeconfig", c.Kubeconfig, "-driver-name", driverName, "-node-name", node,
			"-devices", "6", "-registrar-dir", reg, "-plugin-data-dir", plugin, "-cdi-dir", cdiDir, "-http-address", "127.0.0.1:0"},
		StartEnv: []string{asDriverEnv + "=1"},
	})
}
