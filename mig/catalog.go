package mig

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drakit/drakit/partition"
)

// ErrUnknownProduct is returned (wrapped) by Lookup when a product name
// matches no GPU model in the catalog.
var ErrUnknownProduct = errors.New("unknown MIG product")

// ErrUnknownProfile is returned (wrapped) when a profile name is not one of
// a product's profiles: partition.ErrUnknownProfile.
var ErrUnknownProfile = partition.ErrUnknownProfile

// Placement is where a GPU instance may sit: Size memory slices starting at
// memory slice Start (NVML's nvmlGpuInstancePlacement_t).
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Profile is one GPU instance profile of a product.
type Profile struct {
	// Name is the canonical profile name, e.g. "1g.10gb" or "1g.10gb+me".
	Name string `json:"name"`
	// ID is the GPU instance profile ID NVML uses (19 for 1g, 0 for 7g, ...).
	ID int `json:"id"`
	// ComputeSlices is the number of compute slices (the "Ng" of the name).
	ComputeSlices int `json:"computeSlices"`
	// MemorySlices is the number of memory slices an instance covers.
	MemorySlices int `json:"memorySlices"`
	// MemoryMiB is the instance's memory. The built-in table holds the
	// nominal size (the name's GB times 1024); NVML reports the exact one.
	MemoryMiB int64 `json:"memoryMiB"`
	// MaxCount is the most instances of this profile one GPU can hold.
	MaxCount int `json:"maxCount"`
	// MediaExtensions is true for "+me" profiles, which own the GPU's
	// media engines: at most one such instance exists per GPU.
	MediaExtensions bool `json:"mediaExtensions,omitempty"`
	// Starts are the allowed placement starts, ascending; each placement
	// covers MemorySlices slices.
	Starts []int `json:"starts"`
	// Engines are the hardware units an instance of the profile owns.
	// The built-in table holds the values NVML reports on the product's
	// reference board (see Engines); FromNVML takes a real GPU's own.
	Engines Engines `json:"engines"`
}

// Engines are the hardware units a GPU instance of a profile owns, as
// NVML reports them in nvmlGpuInstanceProfileInfo_t (multiprocessorCount,
// copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount) and
// nvidia-smi mig -lgip prints them (SM, CE, DEC, ENC, JPEG, OFA). A
// dynamic-MIG driver publishes them as capacities of every MIG device
// (Capacities), so that a claim can select, say, a partition with video
// decoders. The zero value means unknown: nothing is published.
type Engines struct {
	// Multiprocessors is the streaming multiprocessors (SMs).
	Multiprocessors int `json:"multiprocessors"`
	// CopyEngines is the DMA copy engines.
	CopyEngines int `json:"copyEngines"`
	// Decoders is the video decoders (NVDEC).
	Decoders int `json:"decoders"`
	// Encoders is the video encoders (NVENC).
	Encoders int `json:"encoders"`
	// JpegEngines is the JPEG decoders (NVJPG).
	JpegEngines int `json:"jpegEngines"`
	// OfaEngines is the optical flow accelerators (OFA).
	OfaEngines int `json:"ofaEngines"`
}

// Capacity names (in the driver's domain) of a MIG device's engines, the
// names NVIDIA's DRA driver publishes, e.g. a selector
// device.capacity["gpu.nvidia.com"].decoders.compareTo(quantity("2")) >= 0.
const (
	CapMultiprocessors = "multiprocessors"
	CapCopyEngines     = "copyEngines"
	CapDecoders        = "decoders"
	CapEncoders        = "encoders"
	CapJpegEngines     = "jpegEngines"
	CapOfaEngines      = "ofaEngines"
)

// Capacities returns the six engine capacities of a MIG device of the
// profile, zero counts included (a selector on a missing capacity is an
// evaluation error, not a mismatch); nil when e is the zero value.
func (e Engines) Capacities() map[string]resource.Quantity {
	if e == (Engines{}) {
		return nil
	}
	q := func(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }
	return map[string]resource.Quantity{
		CapMultiprocessors: q(e.Multiprocessors),
		CapCopyEngines:     q(e.CopyEngines),
		CapDecoders:        q(e.Decoders),
		CapEncoders:        q(e.Encoders),
		CapJpegEngines:     q(e.JpegEngines),
		CapOfaEngines:      q(e.OfaEngines),
	}
}

// Placements returns the profile's allowed placements, ascending by start.
func (p Profile) Placements() []Placement {
	out := make([]Placement, len(p.Starts))
	for i, s := range p.Starts {
		out[i] = Placement{Start: s, Size: p.MemorySlices}
	}
	return out
}

// Product is one MIG-capable GPU model with its profiles. A Product is
// immutable once built; all methods are safe for concurrent use.
type Product struct {
	// Name is the catalog's canonical name, e.g. "A100-40GB".
	Name string `json:"name"`
	// MemorySlices is the number of memory slices (8, or 4 on A30).
	MemorySlices int `json:"memorySlices"`
	// ComputeSlices is the number of compute slices (7, or 4 on A30).
	ComputeSlices int `json:"computeSlices"`
	// Profiles in catalog order: by compute slices, then memory, plain
	// before "+me".
	Profiles []Profile `json:"profiles"`

	index  map[string]int
	scheme *partition.Scheme // the product as a partition scheme
}

// Scheme returns the product as a partition scheme: memory slices placed,
// compute slices counted, the media engines an extra counter
// (CounterMediaExtensions) that "+me" profiles take, the engines as
// capacities, and NVIDIA's names (SchemeNames). Its profiles are the
// product's, in the same order. nil for a product not built by
// NewProduct, Lookup or FromNVML.
func (p *Product) Scheme() *partition.Scheme {
	if p == nil {
		return nil
	}
	return p.scheme
}

// Profile returns the named profile. The name is parsed, so "MIG 1g.10gb"
// and "1G.10GB" find "1g.10gb".
func (p *Product) Profile(name string) (Profile, error) {
	i, err := p.profileIndex(name)
	if err != nil {
		return Profile{}, err
	}
	return p.Profiles[i], nil
}

func (p *Product) profileIndex(name string) (int, error) {
	if i, ok := p.index[name]; ok {
		return i, nil
	}
	pn, err := ParseProfileName(name)
	if err != nil {
		return 0, err
	}
	if i, ok := p.index[pn.String()]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("%w %q for %s (have %s)", ErrUnknownProfile, name, p.Name, strings.Join(p.ProfileNames(), ", "))
}

// ProfileNames returns the names of the product's profiles in catalog order.
func (p *Product) ProfileNames() []string {
	out := make([]string, len(p.Profiles))
	for i, pr := range p.Profiles {
		out[i] = pr.Name
	}
	return out
}

// ProfileName is a parsed profile name such as "3g.40gb" or "1g.10gb+me".
type ProfileName struct {
	// Compute is the number of compute slices ("3" in "3g.40gb").
	Compute int
	// MemoryGB is the memory in GB ("40" in "3g.40gb").
	MemoryGB int
	// Attributes are the suffixes after "+", e.g. ["me"]; order is kept.
	Attributes []string
}

var profileNameRE = regexp.MustCompile(`^([1-9][0-9]?)g\.([1-9][0-9]{0,3})gb((?:\+[a-z][a-z0-9.]*)*)$`)

// ParseProfileName parses a MIG profile name. It accepts NVML's "MIG "
// prefix and any letter case; the result prints in canonical form.
func ParseProfileName(s string) (ProfileName, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimPrefix(t, "mig ")
	m := profileNameRE.FindStringSubmatch(t)
	if m == nil {
		return ProfileName{}, fmt.Errorf("parse profile name %q: want <compute>g.<memory>gb[+attr], e.g. 1g.10gb or 1g.10gb+me", s)
	}
	c, _ := strconv.Atoi(m[1])
	g, _ := strconv.Atoi(m[2])
	pn := ProfileName{Compute: c, MemoryGB: g}
	if m[3] != "" {
		pn.Attributes = strings.Split(m[3][1:], "+")
	}
	return pn, nil
}

// String prints the canonical name, e.g. "1g.10gb+me".
func (n ProfileName) String() string {
	s := fmt.Sprintf("%dg.%dgb", n.Compute, n.MemoryGB)
	for _, a := range n.Attributes {
		s += "+" + a
	}
	return s
}

// HasAttribute reports whether the name carries "+attr".
func (n ProfileName) HasAttribute(attr string) bool {
	for _, a := range n.Attributes {
		if a == attr {
			return true
		}
	}
	return false
}

// NewProduct builds a product from its geometry and profiles and checks it:
// profile names parse and are unique, placements fit the memory slices,
// MaxCount is positive. Profiles are sorted into catalog order.
func NewProduct(name string, memorySlices, computeSlices int, profiles []Profile) (*Product, error) {
	if name == "" {
		return nil, errors.New("build product: name is empty")
	}
	if memorySlices < 1 || memorySlices > 24 {
		return nil, fmt.Errorf("build product %s: memorySlices %d out of range 1..24", name, memorySlices)
	}
	if computeSlices < 1 || computeSlices > 64 {
		return nil, fmt.Errorf("build product %s: computeSlices %d out of range 1..64", name, computeSlices)
	}
	if len(profiles) > partition.MaxProfiles {
		return nil, fmt.Errorf("build product %s: %d profiles, at most %d", name, len(profiles), partition.MaxProfiles)
	}
	p := &Product{Name: name, MemorySlices: memorySlices, ComputeSlices: computeSlices, index: map[string]int{}}
	for i, pr := range profiles {
		pn, err := ParseProfileName(pr.Name)
		if err != nil {
			return nil, fmt.Errorf("build product %s: profiles[%d].name: %w", name, i, err)
		}
		pr.Name = pn.String()
		pr.MediaExtensions = pr.MediaExtensions || pn.HasAttribute("me")
		if pr.ComputeSlices == 0 {
			pr.ComputeSlices = pn.Compute
		}
		if pr.ComputeSlices < 1 || pr.ComputeSlices > computeSlices {
			return nil, fmt.Errorf("build product %s: profiles[%d] (%s).computeSlices %d out of range 1..%d", name, i, pr.Name, pr.ComputeSlices, computeSlices)
		}
		if pr.MemorySlices < 1 || pr.MemorySlices > memorySlices {
			return nil, fmt.Errorf("build product %s: profiles[%d] (%s).memorySlices %d out of range 1..%d", name, i, pr.Name, pr.MemorySlices, memorySlices)
		}
		if pr.MaxCount < 1 {
			return nil, fmt.Errorf("build product %s: profiles[%d] (%s).maxCount %d must be positive", name, i, pr.Name, pr.MaxCount)
		}
		if len(pr.Starts) == 0 {
			return nil, fmt.Errorf("build product %s: profiles[%d] (%s).starts is empty", name, i, pr.Name)
		}
		if pr.MemoryMiB == 0 {
			pr.MemoryMiB = int64(pn.MemoryGB) * 1024
		}
		pr.Starts = append([]int(nil), pr.Starts...)
		sort.Ints(pr.Starts)
		for j, s := range pr.Starts {
			if s < 0 || s+pr.MemorySlices > memorySlices {
				return nil, fmt.Errorf("build product %s: profiles[%d] (%s).starts[%d] = %d: placement %d:%d does not fit %d memory slices", name, i, pr.Name, j, s, s, pr.MemorySlices, memorySlices)
			}
			if j > 0 && pr.Starts[j-1] == s {
				return nil, fmt.Errorf("build product %s: profiles[%d] (%s).starts: duplicate start %d", name, i, pr.Name, s)
			}
		}
		p.Profiles = append(p.Profiles, pr)
	}
	sort.SliceStable(p.Profiles, func(a, b int) bool {
		x, y := p.Profiles[a], p.Profiles[b]
		if x.ComputeSlices != y.ComputeSlices {
			return x.ComputeSlices < y.ComputeSlices
		}
		if x.MemorySlices != y.MemorySlices {
			return x.MemorySlices < y.MemorySlices
		}
		return !x.MediaExtensions && y.MediaExtensions
	})
	for i, pr := range p.Profiles {
		if _, dup := p.index[pr.Name]; dup {
			return nil, fmt.Errorf("build product %s: duplicate profile %s", name, pr.Name)
		}
		p.index[pr.Name] = i
	}
	s, err := partition.NewScheme(p.schemeDef())
	if err != nil {
		return nil, fmt.Errorf("build product %s: %w", name, err)
	}
	p.scheme = s
	return p, nil
}

// schemeDef is the product as a partition scheme definition.
func (p *Product) schemeDef() partition.Scheme {
	def := partition.Scheme{
		Name:      p.Name,
		Memory:    partition.Units{Count: p.MemorySlices, Placed: true},
		Compute:   partition.Units{Count: p.ComputeSlices},
		Names:     SchemeNames(),
		Canonical: canonicalProfile,
	}
	for _, pr := range p.Profiles {
		sp := partition.Profile{
			Name: pr.Name, ID: pr.ID, Compute: pr.ComputeSlices, Memory: pr.MemorySlices,
			MemoryBytes: pr.MemoryMiB << 20, MaxCount: pr.MaxCount, Capacities: pr.Engines.Capacities(),
		}
		for _, st := range pr.Starts {
			sp.Placements = append(sp.Placements, partition.Placement{Start: st, Memory: st})
		}
		if pr.MediaExtensions {
			sp.Extras = map[string]int{CounterMediaExtensions: 1}
			def.Extras = []partition.Extra{{Name: CounterMediaExtensions, Capacity: 1}}
		}
		def.Profiles = append(def.Profiles, sp)
	}
	return def
}

// canonicalProfile is a MIG profile name in canonical form, or the name
// itself when it does not parse.
func canonicalProfile(name string) string {
	pn, err := ParseProfileName(name)
	if err != nil {
		return name
	}
	return pn.String()
}

// SchemeNames are NVIDIA's names for the partition scheme of a MIG
// product (Product.Scheme): devices "gpu-<index>" of type "gpu" and
// "gpu-<index>-<c>g-<m>gb[-me]-<start>" of type "mig", counter set
// "gpu-<index>-counters", counters CounterMemorySlicePrefix<i>,
// CounterComputeSlices, CounterMediaExtensions and
// CounterProfileInstancesPrefix<ID>, the Attr* attributes and the Cap*
// capacities, and "GPU", "instance", "memory slice" and "compute slice"
// in messages.
func SchemeNames() partition.Names {
	return partition.Names{
		Card: "GPU", Partition: "instance", MemoryUnit: "memory slice", ComputeUnit: "compute slice",
		Device: "gpu", CounterSet: "counters",
		MemoryCounter: CounterMemorySlicePrefix, ComputeCounter: CounterComputeSlices,
		InstancesCounter: CounterProfileInstancesPrefix,
		CardType:         "gpu", PartitionType: "mig",
		TypeAttribute: AttrType, IndexAttribute: AttrIndex, ModelAttribute: AttrProduct, UUIDAttribute: AttrUUID,
		ProfileAttribute: AttrProfile, ProfileIDAttribute: AttrProfileID,
		MemoryStartAttribute: AttrPlacementStart, MemorySizeAttribute: AttrPlacementSize,
		MemoryCapacity: CapMemory, ComputeCapacity: CapComputeSlices,
	}
}

// ErrProductNotBuilt is returned (wrapped) for a nil Product or one not
// built by NewProduct, Lookup, Products or FromNVML (a struct literal
// lacks the placement tables the planner needs).
var ErrProductNotBuilt = errors.New("product not built by NewProduct, Lookup or FromNVML")

// check reports whether p is a built product.
func (p *Product) check() error {
	if p == nil {
		return fmt.Errorf("%w: product is nil", ErrProductNotBuilt)
	}
	if p.index == nil || p.scheme == nil {
		return fmt.Errorf("%w: %q", ErrProductNotBuilt, p.Name)
	}
	return nil
}

// stdGeometry is the 8-memory/7-compute slice geometry of A100, H100, H200,
// GH200, B200 and GB200: class, GI profile ID, compute, memory, max, starts.
var stdGeometry = []struct {
	id, compute, mem, max int
	me                    bool
	starts                []int
}{
	{19, 1, 1, 7, false, []int{0, 1, 2, 3, 4, 5, 6}}, // 1g
	{20, 1, 1, 1, true, []int{0, 1, 2, 3, 4, 5, 6}},  // 1g+me
	{15, 1, 2, 4, false, []int{0, 2, 4, 6}},          // 1g large
	{14, 2, 2, 3, false, []int{0, 2, 4}},             // 2g
	{9, 3, 4, 2, false, []int{0, 4}},                 // 3g
	{5, 4, 4, 1, false, []int{0}},                    // 4g
	{0, 7, 8, 1, false, []int{0}},                    // 7g
}

// std builds a product with the standard geometry; mem holds the memory
// GB of the classes 1g, 1g large, 2g, 3g, 4g, 7g, eng the engines of
// stdGeometry's rows.
func std(name string, mem [6]int, eng *[7]Engines) *Product {
	gbs := [7]int{mem[0], mem[0], mem[1], mem[2], mem[3], mem[4], mem[5]}
	var profs []Profile
	for i, g := range stdGeometry {
		n := fmt.Sprintf("%dg.%dgb", g.compute, gbs[i])
		if g.me {
			n += "+me"
		}
		profs = append(profs, Profile{Name: n, ID: g.id, ComputeSlices: g.compute, MemorySlices: g.mem, MaxCount: g.max, MediaExtensions: g.me, Starts: g.starts, Engines: eng[i]})
	}
	p, err := NewProduct(name, 8, 7, profs)
	if err != nil {
		panic(err) // the built-in table is a constant; a test covers it
	}
	return p
}

// The engines of each stdGeometry row (1g, 1g+me, 1g large, 2g, 3g, 4g,
// 7g) per architecture: multiprocessors, copy engines, decoders,
// encoders, JPEG, OFA.
//
//   - Ampere (A100 40 and 80 GB): nvidia-smi mig -lgip on an A100-SXM4,
//     the same as go-nvml's mock A100.
//   - Hopper (H100, H200, GH200): nvidia-smi mig -lgip on an H100 80GB
//     HBM3 (SXM5, 132 SMs), whose media engines agree with the MIG user
//     guide's H100 and H200 tables. An H100 PCIe has 114 SMs: its NVML
//     reports its own, which FromNVML takes.
//   - Blackwell (B200, GB200): copy engines, decoders, JPEG and OFA from
//     the MIG user guide's B200 table; it gives no SM counts, so these
//     are go-nvml's mock B200 (18 per compute slice), unverified on
//     hardware. A real GPU's NVML values replace them all.
var (
	ampereEngines = [7]Engines{
		{14, 1, 0, 0, 0, 0}, {14, 1, 1, 0, 1, 1}, {14, 1, 1, 0, 0, 0},
		{28, 2, 1, 0, 0, 0}, {42, 3, 2, 0, 0, 0}, {56, 4, 2, 0, 0, 0}, {98, 7, 5, 0, 1, 1},
	}
	hopperEngines = [7]Engines{
		{16, 1, 1, 0, 1, 0}, {16, 1, 1, 0, 1, 1}, {26, 1, 1, 0, 1, 0},
		{32, 2, 2, 0, 2, 0}, {60, 3, 3, 0, 3, 0}, {64, 4, 4, 0, 4, 0}, {132, 8, 7, 0, 7, 1},
	}
	blackwellEngines = [7]Engines{
		{18, 2, 1, 0, 1, 0}, {18, 2, 1, 0, 1, 1}, {18, 2, 1, 0, 1, 0},
		{36, 3, 1, 0, 1, 0}, {54, 6, 1, 0, 1, 0}, {72, 8, 1, 0, 1, 0}, {126, 16, 1, 0, 1, 1},
	}
)

// a30 is the A30's own geometry; engines from nvidia-smi mig -lgip, as
// in the MIG user guide's A30 table.
func a30() *Product {
	p, err := NewProduct("A30-24GB", 4, 4, []Profile{
		{Name: "1g.6gb", ID: 14, MemorySlices: 1, MaxCount: 4, Starts: []int{0, 1, 2, 3}, Engines: Engines{14, 1, 0, 0, 0, 0}},
		{Name: "1g.6gb+me", ID: 21, MemorySlices: 1, MaxCount: 1, Starts: []int{0, 1, 2, 3}, Engines: Engines{14, 1, 1, 0, 1, 1}},
		{Name: "2g.12gb", ID: 5, MemorySlices: 2, MaxCount: 2, Starts: []int{0, 2}, Engines: Engines{28, 2, 2, 0, 0, 0}},
		{Name: "2g.12gb+me", ID: 6, MemorySlices: 2, MaxCount: 1, Starts: []int{0, 2}, Engines: Engines{28, 2, 2, 0, 1, 1}},
		{Name: "4g.24gb", ID: 0, MemorySlices: 4, MaxCount: 1, Starts: []int{0}, Engines: Engines{56, 4, 4, 0, 1, 1}},
	})
	if err != nil {
		panic(err)
	}
	return p
}

var builtin = []*Product{
	std("A100-40GB", [6]int{5, 10, 10, 20, 20, 40}, &ampereEngines),
	std("A100-80GB", [6]int{10, 20, 20, 40, 40, 80}, &ampereEngines),
	a30(),
	std("H100-80GB", [6]int{10, 20, 20, 40, 40, 80}, &hopperEngines),
	std("H100-94GB", [6]int{12, 24, 24, 47, 47, 94}, &hopperEngines),
	std("H100-96GB", [6]int{12, 24, 24, 48, 48, 96}, &hopperEngines),
	std("H200-141GB", [6]int{18, 35, 35, 71, 71, 141}, &hopperEngines),
	std("GH200-96GB", [6]int{12, 24, 24, 48, 48, 96}, &hopperEngines),
	std("GH200-144GB", [6]int{18, 36, 36, 72, 72, 144}, &hopperEngines),
	std("B200-180GB", [6]int{23, 45, 45, 90, 90, 180}, &blackwellEngines),
	std("GB200-186GB", [6]int{23, 47, 47, 93, 93, 186}, &blackwellEngines),
}

// Products returns the built-in catalog in a fixed order. The returned
// products are shared and must not be modified.
func Products() []*Product { return append([]*Product(nil), builtin...) }

func byName(name string) *Product {
	for _, p := range builtin {
		if p.Name == name {
			return p
		}
	}
	return nil
}

var memRE = regexp.MustCompile(`(\d{2,3})\s*G`)

// Lookup finds the built-in product for a name as NVML reports it
// ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200",
// "NVIDIA GH200 144G HBM3e", ...) or a catalog name ("H100-80GB"). It
// matches the model (GH200, GB200, H200, B200, H100, A100, A30) and then
// the memory size in the name, defaulting to the model's common size
// (A100: 40GB, H100: 80GB, H100 NVL: 94GB, GH200: 96GB).
func Lookup(productName string) (*Product, error) {
	u := strings.ToUpper(productName)
	mem := 0
	if m := memRE.FindAllStringSubmatch(u, -1); m != nil {
		mem, _ = strconv.Atoi(m[len(m)-1][1])
	}
	var name string
	switch {
	case strings.Contains(u, "GH200"):
		name = "GH200-96GB"
		if mem == 144 {
			name = "GH200-144GB"
		}
	case strings.Contains(u, "GB200"):
		name = "GB200-186GB"
	case strings.Contains(u, "H200"):
		name = "H200-141GB"
	case strings.Contains(u, "B200"):
		name = "B200-180GB"
	case strings.Contains(u, "H100"), strings.Contains(u, "H800"):
		name = "H100-80GB"
		switch {
		case mem == 94 || (mem == 0 && strings.Contains(u, "NVL")):
			name = "H100-94GB"
		case mem == 96:
			name = "H100-96GB"
		}
	case strings.Contains(u, "A100"), strings.Contains(u, "A800"):
		name = "A100-40GB"
		if mem == 80 {
			name = "A100-80GB"
		}
	case strings.Contains(u, "A30"):
		name = "A30-24GB"
	default:
		return nil, fmt.Errorf("look up %q: %w (known: %s)", productName, ErrUnknownProduct, strings.Join(productNames(), ", "))
	}
	return byName(name), nil
}

func productNames() []string {
	var out []string
	for _, p := range builtin {
		out = append(out, p.Name)
	}
	return out
}

// NVMLProfileInfo is what NVML reports for one GPU instance profile
// (nvmlGpuInstanceProfileInfo_v3_t plus GetGpuInstancePossiblePlacements),
// as plain data so that this package needs no NVML.
type NVMLProfileInfo struct {
	// ID is the profile ID (nvmlGpuInstanceProfileInfo_t.id).
	ID int `json:"id"`
	// Name is the profile name as NVML reports it, e.g. "MIG 1g.10gb".
	Name string `json:"name"`
	// SliceCount is the number of compute slices.
	SliceCount int `json:"sliceCount"`
	// InstanceCount is the most instances of the profile on one GPU.
	InstanceCount int `json:"instanceCount"`
	// MemorySizeMB is the instance memory in MiB.
	MemorySizeMB int64 `json:"memorySizeMB"`
	// Placements are the possible placements; all must have one size.
	Placements []Placement `json:"placements"`
	// Engines are the profile's multiprocessorCount, copyEngineCount,
	// decoderCount, encoderCount, jpegCount and ofaCount.
	Engines Engines `json:"engines"`
}

// NVMLInfo is what NVML reports about one MIG-capable GPU.
type NVMLInfo struct {
	// ProductName is nvmlDeviceGetName, e.g. "NVIDIA A100-SXM4-40GB".
	ProductName string `json:"productName"`
	// Profiles are the supported GPU instance profiles. If empty, the
	// built-in table for ProductName is used.
	Profiles []NVMLProfileInfo `json:"profiles"`
}

// FromNVML builds a product from what NVML reports, so that a real GPU
// overrides the built-in table. The product takes the catalog's name when
// Lookup knows ProductName, else ProductName itself. Memory and compute
// slice totals are the largest extents the profiles reach. Profiles whose
// names ParseProfileName rejects (variants such as "1g.23gb-me") are left
// out; an error names any other inconsistent field.
func FromNVML(info NVMLInfo) (*Product, error) {
	name := info.ProductName
	known, lerr := Lookup(info.ProductName)
	if lerr == nil {
		name = known.Name
	}
	if len(info.Profiles) == 0 {
		if lerr != nil {
			return nil, fmt.Errorf("build product from NVML: no profiles reported and %w", lerr)
		}
		return known, nil
	}
	mem, compute := 0, 0
	profs := make([]Profile, 0, len(info.Profiles))
	for i, ip := range info.Profiles {
		if _, err := ParseProfileName(ip.Name); err != nil {
			// Variants this package does not model (e.g. "-me" or "+gfx"
			// on newer drivers) are left out rather than failing the GPU.
			continue
		}
		if len(ip.Placements) == 0 {
			return nil, fmt.Errorf("build product from NVML: profiles[%d] (%s).placements is empty", i, ip.Name)
		}
		size := ip.Placements[0].Size
		pr := Profile{Name: ip.Name, ID: ip.ID, ComputeSlices: ip.SliceCount, MemorySlices: size, MemoryMiB: ip.MemorySizeMB, MaxCount: ip.InstanceCount, Engines: ip.Engines}
		for j, pl := range ip.Placements {
			if pl.Size != size {
				return nil, fmt.Errorf("build product from NVML: profiles[%d] (%s).placements[%d].size %d differs from %d", i, ip.Name, j, pl.Size, size)
			}
			pr.Starts = append(pr.Starts, pl.Start)
			if pl.Start+pl.Size > mem {
				mem = pl.Start + pl.Size
			}
		}
		if ip.SliceCount > compute {
			compute = ip.SliceCount
		}
		profs = append(profs, pr)
	}
	if len(profs) == 0 {
		return nil, fmt.Errorf("build product from NVML: none of the %d reported profiles has a known name", len(info.Profiles))
	}
	p, err := NewProduct(name, mem, compute, profs)
	if err != nil {
		return nil, fmt.Errorf("build product from NVML: %w", err)
	}
	return p, nil
}
