package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

// TestProbeMatchesTheCatalogOnEverySimulatedServer runs the probe on each
// simulated server: every GPU's profiles match the catalog.
func TestProbeMatchesTheCatalogOnEverySimulatedServer(t *testing.T) {
	for _, srv := range nvmlsim.Servers() {
		s, err := nvmlsim.Open("", nvmlsim.WithServer(srv.Name))
		if err != nil {
			t.Fatal(err)
		}
		gi, err := s.CreateGPUInstance(0, 9, mig.Placement{Start: 4, Size: 4})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateComputeInstance(0, gi.ID, 2); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if n := probe(&out, s); n != 0 {
			t.Fatalf("%s: %d problems:\n%s", srv.Name, n, out.String())
		}
		if got := strings.Count(out.String(), "mig catalog: matches"); got != 8 {
			t.Fatalf("%s: %d GPUs match the catalog, want 8:\n%s", srv.Name, got, out.String())
		}
		if !strings.Contains(out.String(), "GI 1 3g.") || !strings.Contains(out.String(), " MIG-") {
			t.Fatalf("%s: instance not listed:\n%s", srv.Name, out.String())
		}
	}
}
