package testenv_test

import (
	"testing"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/testenv"
)

// A driver's conformance test: a cluster with a fake node, the driver
// started as a process by the suite (which plays the node's kubelet).
func Example() {
	var t *testing.T // the test's own
	env := testenv.Start(t)
	cfg := env.ConformanceConfig("gpu.example.com")
	cfg.StartCommand = append([]string{"./my-driver"}, env.DriverArgs("gpu.example.com")...)
	conformance.Test(t, cfg)
}

// A test of a driver running in the test's process, on a real node that
// runs pods: the driver gets the environment's client, node and folders.
func Example_realNode() {
	var t *testing.T // the test's own
	env := testenv.Start(t, testenv.WithRealNode())
	opts := env.DriverOptions("gpu.example.com")
	_ = opts // driver.New("gpu.example.com", append(opts, driver.WithDiscoverer(...), driver.WithPreparer(...))...)
	// Before the first pod: the driver's pools complete, as the scheduler
	// needs them.
	if _, err := env.WaitForPools(t.Context(), "gpu.example.com"); err != nil {
		t.Fatal(err)
	}
	// ... create a ResourceClaim and a pod with image env.BusyboxImage;
	// env.ContainerLog(ctx, "default", pod, container) reads what it printed.
}
