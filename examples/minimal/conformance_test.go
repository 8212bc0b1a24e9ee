package main

import (
	"os"
	"testing"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/testenv"
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
// protocols, against the example driver built with that runtime, on a
// fake node.
func TestConformance(t *testing.T) {
	t.Parallel() // its own cluster and driver process
	env := testenv.Start(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.ConformanceConfig(driverName)
	cfg.StartCommand = append([]string{self, "-driver-name", driverName, "-devices", "6"},
		env.DriverArgs(driverName)...)
	cfg.StartEnv = []string{asDriverEnv + "=1"}
	conformance.Test(t, cfg)
}
