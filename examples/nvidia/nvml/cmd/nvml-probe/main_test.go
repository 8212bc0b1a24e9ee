package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
)

// TestProbeMatchesTheCatalogOnEverySimulatedServer runs the probe on each
// simulated server: every GPU's profiles match the catalog.
func TestProbeMatchesTheCatalogOnEverySimulatedServer(t *testing.T) {
	for _, srv := range nvml.SimServers() {
		s, err := nvml.OpenSim("", nvml.WithServer(srv.Name))
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

// TestCompareReportsDifferences feeds the comparison what go-nvml's mock
// H100 reports (3g at size 3, 7g at size 7) and a profile the catalog
// lacks.
func TestCompareReportsDifferences(t *testing.T) {
	s, _ := nvml.OpenSim("", nvml.WithServer("dgx-h100"))
	profs, _ := s.GPUInstanceProfiles(0)
	for i := range profs {
		switch profs[i].ID {
		case 9: // 3g
			profs[i].Placements = []mig.Placement{{Start: 0, Size: 3}, {Start: 4, Size: 3}}
		}
	}
	profs = append(profs, nvml.GPUInstanceProfile{ID: 47, Name: "1g.20gb+gfx", SliceCount: 1, InstanceCount: 4, MemoryMiB: 20480, Placements: []mig.Placement{{Start: 0, Size: 2}}})
	diffs, err := compare("NVIDIA H100 80GB HBM3", profs)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(diffs, "\n")
	if len(diffs) != 2 || !strings.Contains(joined, "3g.40gb: NVML id 9, 3g, 3 memory slices") || !strings.Contains(joined, "1g.20gb+gfx: reported by NVML") {
		t.Fatalf("differences:\n%s", joined)
	}
}
