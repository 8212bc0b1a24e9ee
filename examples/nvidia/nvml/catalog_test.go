package nvml_test

import (
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
)

func TestCatalogDiffAgreesOnEverySimulatedServer(t *testing.T) {
	for _, srv := range nvmlsim.Servers() {
		s := memSim(t, srv.Name)
		profs, err := s.GPUInstanceProfiles(0)
		if err != nil {
			t.Fatal(err)
		}
		diffs, err := nvml.CatalogDiff(srv.ProductName, profs)
		if err != nil || len(diffs) != 0 {
			t.Errorf("%s: %v %v", srv.Name, diffs, err)
		}
		p, err := nvml.MigProduct(srv.ProductName, profs)
		if err != nil || p.Name != srv.Product {
			t.Errorf("%s: MigProduct = %v, %v; want %s", srv.Name, p, err, srv.Product)
		}
	}
}

// TestCatalogDiffReportsDifferences feeds it what go-nvml's mock H100
// reports for 3g (size 3), a profile the catalog lacks, and a 1g with
// other engines.
func TestCatalogDiffReportsDifferences(t *testing.T) {
	s := memSim(t, "dgx-h100")
	profs, _ := s.GPUInstanceProfiles(0)
	for i := range profs {
		switch profs[i].ID {
		case 9: // 3g
			profs[i].Placements = []mig.Placement{{Start: 0, Size: 3}, {Start: 4, Size: 3}}
		// 1g on an H100 PCIe (114 SMs), whose MIG slices have fewer SMs than the catalog's SXM5
		case 19:
			profs[i].Engines.Multiprocessors = 14
		}
	}
	profs = append(
		profs,
		nvml.GPUInstanceProfile{
			ID:            47,
			Name:          "1g.20gb+gfx",
			SliceCount:    1,
			InstanceCount: 4,
			MemoryMiB:     20480,
			Placements:    []mig.Placement{{Start: 0, Size: 2}},
		},
	)
	diffs, err := nvml.CatalogDiff("NVIDIA H100 80GB HBM3", profs)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(diffs, "\n")
	if len(diffs) != 3 || !strings.Contains(joined, "3g.40gb: NVML id 9, 3g, 3 memory slices") ||
		!strings.Contains(joined, "1g.20gb+gfx: reported by NVML") ||
		!strings.Contains(joined, "1g.10gb: NVML engines {Multiprocessors:14 ") {
		t.Fatalf("differences:\n%s", joined)
	}
	if _, err := nvml.CatalogDiff("NVIDIA H100 80GB HBM3", nil); err == nil {
		t.Fatal("no profiles compared as equal")
	}
}
