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
	want := Profile{Name: "1g.20gb", ID: 15, ComputeSlices: 1, MemorySlices: 2, MemoryMiB: 20480, MaxCount: 4, Starts: []int{0, 2, 4, 6},
		Engines: Engines{Multiprocessors: 26, CopyEngines: 1, Decoders: 1, JpegEngines: 1}} // nvidia-smi mig -lgip on an H100 80GB HBM3
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
		{ID: 0, Name: "MIG 7g.40gb", SliceCount: 7, InstanceCount: 1, MemorySizeMB: 40320, Placements: []Placement{{0, 8}}, Engines: Engines{Multiprocessors: 97}},
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
	if pr, _ := p.Profile("7g.40gb"); pr.MemoryMiB != 40320 || pr.Engines != (Engines{Multiprocessors: 97}) {
		t.Errorf("7g.40gb memory %d, engines %+v; want NVML's 40320 and 97 SMs", pr.MemoryMiB, pr.Engines)
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

// TestCatalogEngines checks every profile's engines against its product:
// every profile has SMs and a copy engine; a profile with more compute
// slices has at least the SMs of one with fewer; the full-GPU profile
// (all compute slices) has at least as many of each engine as any other
// profile; and no valid layout of instances holds more SMs or copy
// engines than the full-GPU profile. The media engines are left out of
// the sum: the MIG user guide's B200 table gives every profile, 7g
// included, one decoder and one JPEG engine.
func TestCatalogEngines(t *testing.T) {
	for _, p := range Products() {
		full := p.Profiles[len(p.Profiles)-1]
		if full.ComputeSlices != p.ComputeSlices {
			t.Fatalf("%s: last profile %s is not the full GPU", p.Name, full.Name)
		}
		f := full.Engines
		for _, pr := range p.Profiles {
			e := pr.Engines
			if e.Multiprocessors < 1 || e.CopyEngines < 1 {
				t.Errorf("%s %s: engines %+v: want SMs and a copy engine", p.Name, pr.Name, e)
			}
			if e.Multiprocessors > f.Multiprocessors || e.CopyEngines > f.CopyEngines || e.Decoders > f.Decoders ||
				e.Encoders > f.Encoders || e.JpegEngines > f.JpegEngines || e.OfaEngines > f.OfaEngines {
				t.Errorf("%s %s: engines %+v exceed the full GPU's %s %+v", p.Name, pr.Name, e, full.Name, f)
			}
			if pr.MediaExtensions && (e.JpegEngines < 1 || e.OfaEngines < 1) {
				t.Errorf("%s %s: a +me profile without JPEG and OFA: %+v", p.Name, pr.Name, e)
			}
			for _, o := range p.Profiles {
				if o.ComputeSlices < pr.ComputeSlices && o.Engines.Multiprocessors > e.Multiprocessors {
					t.Errorf("%s: %s has %d SMs, more than %s's %d", p.Name, o.Name, o.Engines.Multiprocessors, pr.Name, e.Multiprocessors)
				}
			}
			if len(pr.Engines.Capacities()) != 6 {
				t.Errorf("%s %s: %d engine capacities, want 6", p.Name, pr.Name, len(pr.Engines.Capacities()))
			}
		}
		layouts, worst := 0, Engines{}
		eachLayout(p, func(l []Profile) {
			layouts++
			var sum Engines
			for _, pr := range l {
				sum.Multiprocessors += pr.Engines.Multiprocessors
				sum.CopyEngines += pr.Engines.CopyEngines
			}
			worst.Multiprocessors = max(worst.Multiprocessors, sum.Multiprocessors)
			worst.CopyEngines = max(worst.CopyEngines, sum.CopyEngines)
			if sum.Multiprocessors > f.Multiprocessors || sum.CopyEngines > f.CopyEngines {
				t.Errorf("%s: layout %v holds %d SMs and %d copy engines, the full GPU %d and %d", p.Name, names(l), sum.Multiprocessors, sum.CopyEngines, f.Multiprocessors, f.CopyEngines)
			}
		})
		t.Logf("%s: %d layouts, at most %d SMs and %d copy engines in one (full GPU: %d, %d)", p.Name, layouts, worst.Multiprocessors, worst.CopyEngines, f.Multiprocessors, f.CopyEngines)
	}
	if (Engines{}).Capacities() != nil {
		t.Error("unknown engines publish capacities")
	}
}

// eachLayout calls fn with every non-empty set of instances that can
// coexist on one GPU of p: placements that do not overlap, at most the
// compute slices, each profile at most MaxCount times, one "+me"
// instance at most.
func eachLayout(p *Product, fn func([]Profile)) {
	type slot struct {
		prof int
		mask uint32
	}
	var slots []slot // every profile x start, from the product's own table
	for i, pr := range p.Profiles {
		for _, s := range pr.Starts {
			slots = append(slots, slot{prof: i, mask: ((1 << pr.MemorySlices) - 1) << s})
		}
	}
	count := make([]int, len(p.Profiles))
	var cur []Profile
	var rec func(from int, mask uint32, compute int, me bool)
	rec = func(from int, mask uint32, compute int, me bool) {
		if len(cur) > 0 {
			fn(cur)
		}
		for i := from; i < len(slots); i++ {
			s := slots[i]
			pr := p.Profiles[s.prof]
			if s.mask&mask != 0 || compute+pr.ComputeSlices > p.ComputeSlices || count[s.prof] >= pr.MaxCount || (me && pr.MediaExtensions) {
				continue
			}
			count[s.prof]++
			cur = append(cur, pr)
			rec(i+1, mask|s.mask, compute+pr.ComputeSlices, me || pr.MediaExtensions)
			cur = cur[:len(cur)-1]
			count[s.prof]--
		}
	}
	rec(0, 0, 0, false)
}

func names(l []Profile) []string {
	out := make([]string, len(l))
	for i, pr := range l {
		out[i] = pr.Name
	}
	return out
}
