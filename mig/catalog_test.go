package mig

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustLookup(t testing.TB, name string) *Product {
	t.Helper()
	p, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLookup(t *testing.T) {
	tests := []struct{ in, want string }{
		{"NVIDIA A100-SXM4-40GB", "A100-40GB"},
		{"NVIDIA A100-PCIE-40GB", "A100-40GB"},
		{"NVIDIA A100-SXM4-80GB", "A100-80GB"},
		{"NVIDIA A100 80GB PCIe", "A100-80GB"},
		{"NVIDIA A30", "A30-24GB"},
		{"NVIDIA H100 80GB HBM3", "H100-80GB"},
		{"NVIDIA H100 PCIe", "H100-80GB"},
		{"NVIDIA H100 NVL", "H100-94GB"},
		{"NVIDIA H100-SXM5-94GB", "H100-94GB"},
		{"NVIDIA H100 96GB HBM3", "H100-96GB"},
		{"NVIDIA H200", "H200-141GB"},
		{"NVIDIA H200 NVL", "H200-141GB"},
		{"NVIDIA GH200 480GB", "GH200-96GB"},
		{"NVIDIA GH200 144G HBM3e", "GH200-144GB"},
		{"NVIDIA B200", "B200-180GB"},
		{"NVIDIA GB200", "GB200-186GB"},
		{"H100-80GB", "H100-80GB"},
	}
	for _, tt := range tests {
		p, err := Lookup(tt.in)
		if err != nil {
			t.Errorf("Lookup(%q): %v", tt.in, err)
			continue
		}
		if p.Name != tt.want {
			t.Errorf("Lookup(%q) = %s, want %s", tt.in, p.Name, tt.want)
		}
	}
	if _, err := Lookup("NVIDIA GeForce RTX 4090"); !errors.Is(err, ErrUnknownProduct) {
		t.Errorf("Lookup(RTX 4090) error = %v, want ErrUnknownProduct", err)
	}
}

func TestCatalogProfiles(t *testing.T) {
	tests := []struct {
		product string
		want    []string
	}{
		{"A100-40GB", []string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
		{"H100-80GB", []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
		{"H100-94GB", []string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}},
		{"H200-141GB", []string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
		{"GH200-144GB", []string{"1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"}},
		{"B200-180GB", []string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}},
		{"GB200-186GB", []string{"1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"}},
		{"A30-24GB", []string{"1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"}},
	}
	for _, tt := range tests {
		p := mustLookup(t, tt.product)
		if diff := cmp.Diff(tt.want, p.ProfileNames()); diff != "" {
			t.Errorf("%s profiles (-want +got):\n%s", tt.product, diff)
		}
	}
	h := mustLookup(t, "H100-80GB")
	got, err := h.Profile("MIG 1g.20gb")
	if err != nil {
		t.Fatal(err)
	}
	want := Profile{Name: "1g.20gb", ID: 15, ComputeSlices: 1, MemorySlices: 2, MemoryMiB: 20480, MaxCount: 4, Starts: []int{0, 2, 4, 6}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("1g.20gb (-want +got):\n%s", diff)
	}
	if _, err := h.Profile("5g.50gb"); !errors.Is(err, ErrUnknownProfile) {
		t.Errorf("Profile(5g.50gb) error = %v, want ErrUnknownProfile", err)
	}
}

func TestParseProfileName(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"1g.10gb", "1g.10gb", false},
		{"MIG 1g.10gb+me", "1g.10gb+me", false},
		{"7G.80GB", "7g.80gb", false},
		{"7g.141gb", "7g.141gb", false},
		{"1g.10gb+me+gfx", "1g.10gb+me+gfx", false},
		{"1g10gb", "", true},
		{"0g.10gb", "", true},
		{"", "", true},
		{"1g.10gb+", "", true},
	}
	for _, tt := range tests {
		n, err := ParseProfileName(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseProfileName(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && n.String() != tt.want {
			t.Errorf("ParseProfileName(%q) = %s, want %s", tt.in, n, tt.want)
		}
	}
}

// TestGB200MediaExtensions: production GB200 boards report 1g.23gb+me
// (GI profile 20, one instance per GPU).
func TestGB200MediaExtensions(t *testing.T) {
	pr, err := mustLookup(t, "NVIDIA GB200").Profile("1g.23gb+me")
	if err != nil {
		t.Fatal(err)
	}
	if pr.ID != 20 || pr.MaxCount != 1 || !pr.MediaExtensions || pr.ComputeSlices != 1 || pr.MemorySlices != 1 {
		t.Errorf("GB200 1g.23gb+me = %+v, want ID 20, max 1, +me, 1 compute and 1 memory slice", pr)
	}
}

func TestFromNVML(t *testing.T) {
	// What a real A100-40GB reports for two profiles (exact MiB sizes).
	info := NVMLInfo{ProductName: "NVIDIA A100-SXM4-40GB", Profiles: []NVMLProfileInfo{
		{ID: 0, Name: "MIG 7g.40gb", SliceCount: 7, InstanceCount: 1, MemorySizeMB: 40320, Placements: []Placement{{0, 8}}},
		{ID: 42, Name: "MIG 1g.5gb-me", SliceCount: 1, InstanceCount: 7, MemorySizeMB: 4864, Placements: []Placement{{0, 1}}},
		{ID: 19, Name: "MIG 1g.5gb", SliceCount: 1, InstanceCount: 7, MemorySizeMB: 4864,
			Placements: []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
	}}
	p, err := FromNVML(info)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "A100-40GB" || p.MemorySlices != 8 || p.ComputeSlices != 7 {
		t.Errorf("product = %s %d/%d, want A100-40GB 8/7", p.Name, p.MemorySlices, p.ComputeSlices)
	}
	if diff := cmp.Diff([]string{"1g.5gb", "7g.40gb"}, p.ProfileNames()); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
	if pr, _ := p.Profile("7g.40gb"); pr.MemoryMiB != 40320 {
		t.Errorf("7g.40gb memory = %d, want NVML's 40320", pr.MemoryMiB)
	}

	bad := info
	bad.Profiles = []NVMLProfileInfo{{ID: 19, Name: "MIG 1g.5gb", SliceCount: 1, InstanceCount: 7, Placements: []Placement{{0, 1}, {1, 2}}}}
	if _, err := FromNVML(bad); err == nil || !strings.Contains(err.Error(), "placements[1].size") {
		t.Errorf("mixed placement sizes: error = %v, want one naming placements[1].size", err)
	}
	if p, err := FromNVML(NVMLInfo{ProductName: "NVIDIA H200"}); err != nil || p.Name != "H200-141GB" {
		t.Errorf("no profiles: got %v, %v; want the H200 table", p, err)
	}
}

func TestBuiltinTablesConsistent(t *testing.T) {
	for _, p := range Products() {
		for _, pr := range p.Profiles {
			// Non-overlap must be what bounds an instance count, or the
			// count must be an explicit limit (+me). Either way, at least
			// MaxCount placements exist.
			if len(pr.Starts) < pr.MaxCount {
				t.Errorf("%s %s: %d placements < max %d", p.Name, pr.Name, len(pr.Starts), pr.MaxCount)
			}
			n, _ := ParseProfileName(pr.Name)
			if n.Compute != pr.ComputeSlices {
				t.Errorf("%s %s: compute %d does not match name", p.Name, pr.Name, pr.ComputeSlices)
			}
		}
	}
}

// testProduct is Lookup for tests' literals; it panics on an unknown name.
func testProduct(name string) *Product {
	p, err := Lookup(name)
	if err != nil {
		panic(err)
	}
	return p
}
