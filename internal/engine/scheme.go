package engine

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// ErrUnknownProfile is returned (wrapped) when a profile name is not one
// of a scheme's profiles.
var ErrUnknownProfile = errors.New("unknown profile")

// ErrSchemeNotBuilt is returned (wrapped) for a nil *Scheme or one not
// built by NewScheme (a struct literal lacks the placement tables the
// planner needs).
var ErrSchemeNotBuilt = errors.New("scheme not built by NewScheme")

// ErrInvalidScheme is wrapped by NewScheme's errors.
var ErrInvalidScheme = errors.New("invalid partition scheme")

// Limits of a scheme, set by the planner's compact state of a card.
const (
	// MaxProfiles is the most profiles a scheme may have.
	MaxProfiles = 16
	// MaxPlacedUnits is the most units a placed dimension may have.
	MaxPlacedUnits = 32
	// MaxCountedUnits is the most units a counted dimension may have.
	MaxCountedUnits = 255
	// MaxExtras is the most extra counters a scheme may have.
	MaxExtras = 4
)

const (
	maxProfiles = MaxProfiles
	maxExtras   = MaxExtras
)

// Units is one of a card's two resources, memory or compute, as the
// hardware divides it.
type Units struct {
	// Count is how many units the card has; 0 means the scheme does not
	// divide this resource (no profile may then use it).
	Count int `json:"count"`
	// Placed is true when a partition sits on particular units, at one of
	// its profile's allowed placements: each unit is its own counter of
	// capacity 1, and two partitions never share a unit. When false, the
	// units are one counter that partitions take by count, wherever they
	// sit.
	Placed bool `json:"placed,omitempty"`
}

// Placement is one place where a partition of a profile may sit.
type Placement struct {
	// Start names the placement: it is unique among the profile's
	// placements and appears in layouts ("profile@start"), device names
	// and plans. The vendor chooses it, usually the first unit of the
	// dimension its tool addresses partitions by.
	Start int `json:"start"`
	// Memory is the first memory unit the partition covers, when memory
	// is placed and the profile takes memory units; 0 otherwise.
	Memory int `json:"memory,omitempty"`
	// Compute is the first compute unit the partition covers, when
	// compute is placed; 0 otherwise.
	Compute int `json:"compute,omitempty"`
}

// Extra is a per-card counter beyond memory and compute, such as media
// engines that at most one partition may own: its capacity is what the
// card has, and each profile says how much of it a partition takes
// (Profile.Extras). The whole card takes all of it.
type Extra struct {
	// Name is the counter's name (a DNS label), unique in the scheme.
	Name string `json:"name"`
	// Capacity is what one card has, 1 to 255.
	Capacity int `json:"capacity"`
}

// Profile is one kind of partition a scheme offers.
type Profile struct {
	// Name is the vendor's name of the profile, unique in the scheme. Its
	// DNS form (lower case, every run of other characters than a-z and
	// 0-9 replaced by one "-") names the profile's devices and must be
	// unique too.
	Name string `json:"name"`
	// ID is the vendor's number of the profile (published as an
	// attribute; names the profile's instance counter where one is
	// needed). IDs of profiles that need one must differ.
	ID int `json:"id"`
	// Compute is the compute units a partition takes, at least 1.
	Compute int `json:"compute"`
	// Memory is the memory units a partition takes; 0 when it takes none
	// (it shares the card's memory).
	Memory int `json:"memory,omitempty"`
	// MemoryBytes is the partition's memory, published as its memory
	// capacity; 0 publishes none.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// MaxCount is the most partitions of this profile one card holds, 1
	// to 255.
	MaxCount int `json:"maxCount"`
	// Placements are where a partition may sit; at least one. Each
	// placement's units must lie within the card.
	Placements []Placement `json:"placements"`
	// Extras are the extra counters (Scheme.Extras, by name) a partition
	// takes, and how much of each.
	Extras map[string]int `json:"extras,omitempty"`
	// Mode, when set, is the card-wide mode the partition needs: all
	// partitions with a mode on one card must have the same one (a card
	// whose compute partition mode is set for all of it, say). Profiles
	// without a mode mix with any. Modes need a placed dimension that
	// every profile with a mode covers (compute, or memory when compute
	// is counted).
	Mode string `json:"mode,omitempty"`
	// Capacities are further capacities published on the profile's
	// devices (engines, say), by bare name as the device package takes
	// them.
	Capacities map[string]resource.Quantity `json:"capacities,omitempty"`
}

// Scheme is one card model's partition scheme: its units, profiles,
// extras, limits and the names its devices and counters are published
// under. Build it with NewScheme; a built scheme is immutable and safe
// for concurrent use.
type Scheme struct {
	// Name is the card model's name, published as an attribute of its
	// devices and used in messages.
	Name string `json:"name"`
	// Memory and Compute are the card's units.
	Memory  Units `json:"memory"`
	Compute Units `json:"compute"`
	// MemoryBytes is the whole card's memory capacity; 0 takes the
	// largest profile's.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// MaxPartitions, when positive, bounds the partitions of one card
	// whatever their profiles.
	MaxPartitions int `json:"maxPartitions,omitempty"`
	// Profiles are the partitions the card offers. NewScheme sorts them:
	// by compute units, then memory units, profiles without extras
	// before those with, the given order breaking ties. The planner's
	// order of a card's devices, and the counter model's, follow it.
	Profiles []Profile `json:"profiles"`
	// Extras are the card's extra counters.
	Extras []Extra `json:"extras,omitempty"`
	// Names are the names the scheme's devices, counters and attributes
	// are published under, and the nouns of messages; empty fields take
	// neutral defaults (see Names).
	Names Names `json:"names"`
	// Canonical, when set, maps a profile name as users or the hardware
	// spell it to the scheme's own ("Half " to "half", say);
	// every lookup of a profile by name tries the name as given first.
	Canonical func(name string) string `json:"-"`

	index    map[string]int
	info     []profInfo
	slots    []slot
	suffix   []string       // per slot: "-<profile DNS form>-<start>"
	bySuffix map[string]int // suffix -> slot
	modes    []string       // mode names; profInfo.mode is the index + 1
	lock     lockPlan
	extraCap [maxExtras]uint8
	placed   int // placed units: memory and compute
	sc       *scorer
}

// profInfo is what the planner precomputes about a profile.
type profInfo struct {
	dns       string
	extra     [maxExtras]uint8
	hasExtra  bool
	mode      uint8 // 1 + index into Scheme.modes; 0: none
	size      int   // placed units it covers
	whole     bool  // on an empty card nothing else fits beside it
	instances bool  // needs its own instance counter
}

// slot is one placement of one profile.
type slot struct {
	prof  int
	start int
	mem   int
	comp  int
	mask  uint64 // memory units in bits 0..31, compute units in 32..63
}

// lockPlan is how the counter model keeps the partitions of a card in
// one mode (see modeLocks).
type lockPlan struct {
	units    int // lock counters, one per unit of the lock dimension
	compute  bool
	capacity int64
	covered  []int64 // per mode: what a partition takes on the units it covers
	other    []int64 // per mode: what it takes on every other unit
}

// NewScheme checks def and returns the built scheme: a copy with its
// profiles sorted, its names defaulted and the tables the planner and the
// counter model need. Errors wrap ErrInvalidScheme and name the field.
func NewScheme(def Scheme) (*Scheme, error) {
	s := def
	fail := func(format string, a ...any) (*Scheme, error) {
		return nil, fmt.Errorf("build scheme %s: %w: %s", s.Name, ErrInvalidScheme, fmt.Sprintf(format, a...))
	}
	if s.Name == "" {
		return nil, fmt.Errorf("build scheme: %w: name is empty", ErrInvalidScheme)
	}
	for _, d := range []struct {
		name string
		u    Units
	}{{"memory", s.Memory}, {"compute", s.Compute}} {
		limit := MaxCountedUnits
		if d.u.Placed {
			limit = MaxPlacedUnits
		}
		if d.u.Count < 0 || d.u.Count > limit {
			return fail("%s.count %d out of range 0..%d", d.name, d.u.Count, limit)
		}
	}
	if s.Compute.Count < 1 {
		return fail("compute.count must be positive")
	}
	if s.MaxPartitions < 0 || s.MaxPartitions > 255 {
		return fail("maxPartitions %d out of range 0..255", s.MaxPartitions)
	}
	if s.MemoryBytes < 0 {
		return fail("memoryBytes %d is negative", s.MemoryBytes)
	}
	if len(s.Profiles) == 0 || len(s.Profiles) > maxProfiles {
		return fail("%d profiles, want 1 to %d", len(s.Profiles), maxProfiles)
	}
	if len(s.Extras) > maxExtras {
		return fail("%d extras, at most %d", len(s.Extras), maxExtras)
	}
	names, err := s.Names.withDefaults(s.Memory.Placed, s.Compute.Placed)
	if err != nil {
		return fail("%v", err)
	}
	s.Names = names
	extraAt := map[string]int{}
	s.Extras = slices.Clone(s.Extras)
	for i, e := range s.Extras {
		if err := dnsLabel(e.Name); err != nil {
			return fail("extras[%d].name: %v", i, err)
		}
		if _, dup := extraAt[e.Name]; dup {
			return fail("extras[%d]: duplicate extra %q", i, e.Name)
		}
		if e.Capacity < 1 || e.Capacity > 255 {
			return fail("extras[%d] (%s).capacity %d out of range 1..255", i, e.Name, e.Capacity)
		}
		extraAt[e.Name] = i
		s.extraCap[i] = uint8(e.Capacity)
	}
	s.Profiles = slices.Clone(s.Profiles)
	for i := range s.Profiles {
		pr := &s.Profiles[i]
		if err := s.checkProfile(pr, extraAt); err != nil {
			return fail("profiles[%d] (%s)%v", i, pr.Name, err)
		}
	}
	sort.SliceStable(s.Profiles, func(a, b int) bool {
		x, y := s.Profiles[a], s.Profiles[b]
		if x.Compute != y.Compute {
			return x.Compute < y.Compute
		}
		if x.Memory != y.Memory {
			return x.Memory < y.Memory
		}
		return len(x.Extras) == 0 && len(y.Extras) > 0
	})
	s.index = map[string]int{}
	dnsOf := map[string]string{}
	for i, pr := range s.Profiles {
		if _, dup := s.index[pr.Name]; dup {
			return fail("duplicate profile %s", pr.Name)
		}
		s.index[pr.Name] = i
		d := dnsForm(pr.Name)
		if d == "" {
			return fail("profile %q has no letters or digits to name its devices by", pr.Name)
		}
		if o, dup := dnsOf[d]; dup {
			return fail("profiles %s and %s both name their devices %q", o, pr.Name, d)
		}
		dnsOf[d] = pr.Name
		info := profInfo{dns: d}
		for n, v := range pr.Extras {
			info.extra[extraAt[n]] = uint8(v)
			info.hasExtra = true
		}
		if pr.Mode != "" {
			mi := slices.Index(s.modes, pr.Mode)
			if mi < 0 {
				mi = len(s.modes)
				s.modes = append(s.modes, pr.Mode)
			}
			info.mode = uint8(mi + 1)
		}
		if s.Memory.Placed {
			info.size += pr.Memory
		}
		if s.Compute.Placed {
			info.size += pr.Compute
		}
		s.info = append(s.info, info)
	}
	if s.Memory.Placed {
		s.placed += s.Memory.Count
	}
	if s.Compute.Placed {
		s.placed += s.Compute.Count
	}
	s.bySuffix = map[string]int{}
	for i, pr := range s.Profiles {
		s.info[i].instances = s.needsInstanceCounter(i)
		for _, pl := range pr.Placements {
			sl := slot{prof: i, start: pl.Start, mem: pl.Memory, comp: pl.Compute}
			if s.Memory.Placed && pr.Memory > 0 {
				sl.mask |= rangeMask(pl.Memory, pr.Memory)
			}
			if s.Compute.Placed {
				sl.mask |= rangeMask(pl.Compute, pr.Compute) << 32
			}
			suffix := "-" + s.info[i].dns + "-" + strconv.Itoa(pl.Start)
			if j, dup := s.bySuffix[suffix]; dup {
				return fail("profiles %s and %s both name a device %q", s.Profiles[s.slots[j].prof].Name, pr.Name, s.Names.Device+"-0"+suffix)
			}
			s.bySuffix[suffix] = len(s.slots)
			s.slots = append(s.slots, sl)
			s.suffix = append(s.suffix, suffix)
		}
	}
	var empty state
	for i := range s.Profiles {
		st := empty
		si := s.firstSlot(i)
		s.add(&st, si)
		s.info[i].whole = true
		for sj := range s.slots {
			if s.fits(&st, sj) {
				s.info[i].whole = false
				break
			}
		}
	}
	if len(s.modes) > 1 {
		if err := s.planLocks(); err != nil {
			return fail("%v", err)
		}
	}
	out := new(Scheme)
	*out = s
	out.sc = newScorer(out)
	return out, nil
}

// checkProfile checks one profile of s and normalizes its placements.
func (s *Scheme) checkProfile(pr *Profile, extraAt map[string]int) error {
	if pr.Name == "" {
		return errors.New(": name is empty")
	}
	if strings.ContainsAny(pr.Name, ",@*") {
		return errors.New(": name contains one of \",@*\", which layouts use")
	}
	if pr.Compute < 1 || pr.Compute > s.Compute.Count {
		return fmt.Errorf(".compute %d out of range 1..%d", pr.Compute, s.Compute.Count)
	}
	if pr.Memory < 0 || pr.Memory > s.Memory.Count {
		return fmt.Errorf(".memory %d out of range 0..%d", pr.Memory, s.Memory.Count)
	}
	if pr.MemoryBytes < 0 {
		return fmt.Errorf(".memoryBytes %d is negative", pr.MemoryBytes)
	}
	if pr.MaxCount < 1 || pr.MaxCount > 255 {
		return fmt.Errorf(".maxCount %d out of range 1..255", pr.MaxCount)
	}
	if len(pr.Placements) == 0 {
		return errors.New(".placements is empty")
	}
	for n, v := range pr.Extras {
		i, ok := extraAt[n]
		if !ok {
			return fmt.Errorf(".extras: %q is not one of the scheme's extras", n)
		}
		if v < 1 || v > s.Extras[i].Capacity {
			return fmt.Errorf(".extras[%s] %d out of range 1..%d", n, v, s.Extras[i].Capacity)
		}
	}
	pr.Extras = cloneInts(pr.Extras)
	pr.Capacities = mapsQ(pr.Capacities)
	pr.Placements = slices.Clone(pr.Placements)
	sort.SliceStable(pr.Placements, func(a, b int) bool { return pr.Placements[a].Start < pr.Placements[b].Start })
	if !s.Compute.Placed && !(s.Memory.Placed && pr.Memory > 0) {
		return errors.New(" covers no placed unit: partitions must sit on units of a placed dimension (compute, or memory every such profile takes), so that two partitions never share a device")
	}
	seen := map[[2]int]bool{}
	for j, pl := range pr.Placements {
		if j > 0 && pr.Placements[j-1].Start == pl.Start {
			return fmt.Errorf(".placements: duplicate start %d", pl.Start)
		}
		if pl.Start < 0 {
			return fmt.Errorf(".placements[%d].start %d is negative", j, pl.Start)
		}
		if err := placedWithin("memory", s.Memory, pr.Memory, pl.Memory); err != nil {
			return fmt.Errorf(".placements[%d] (start %d): %v", j, pl.Start, err)
		}
		if err := placedWithin("compute", s.Compute, pr.Compute, pl.Compute); err != nil {
			return fmt.Errorf(".placements[%d] (start %d): %v", j, pl.Start, err)
		}
		if seen[[2]int{pl.Memory, pl.Compute}] {
			return fmt.Errorf(".placements[%d] (start %d): the same units as another placement", j, pl.Start)
		}
		seen[[2]int{pl.Memory, pl.Compute}] = true
	}
	return nil
}

// placedWithin checks a placement's first unit in one dimension.
func placedWithin(dim string, u Units, size, first int) error {
	if !u.Placed || size == 0 {
		if first != 0 {
			return fmt.Errorf("%s %d: %s is not placed for this profile, want 0", dim, first, dim)
		}
		return nil
	}
	if first < 0 || first+size > u.Count {
		return fmt.Errorf("%s units %d..%d do not fit the card's %d", dim, first, first+size-1, u.Count)
	}
	return nil
}

func cloneInts(m map[string]int) map[string]int {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mapsQ(m map[string]resource.Quantity) map[string]resource.Quantity {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]resource.Quantity, len(m))
	for k, v := range m {
		out[k] = v.DeepCopy()
	}
	return out
}

func rangeMask(start, size int) uint64 { return ((1 << size) - 1) << start }

// firstSlot is the first slot of profile pi.
func (s *Scheme) firstSlot(pi int) int {
	for si, sl := range s.slots {
		if sl.prof == pi {
			return si
		}
	}
	return -1
}

// needsInstanceCounter reports whether profile pi's count limit needs its
// own counter: more placements than the limit, and no extra that bounds
// the count as tightly.
func (s *Scheme) needsInstanceCounter(pi int) bool {
	pr := s.Profiles[pi]
	if len(pr.Placements) <= pr.MaxCount {
		return false
	}
	for e, v := range s.info[pi].extra {
		if v > 0 && int(s.extraCap[e])/int(v) <= pr.MaxCount {
			return false
		}
	}
	return true
}

// check reports whether s is a built scheme.
func (s *Scheme) check() error {
	if s == nil {
		return fmt.Errorf("%w: scheme is nil", ErrSchemeNotBuilt)
	}
	if s.index == nil || s.sc == nil {
		return fmt.Errorf("%w: %q", ErrSchemeNotBuilt, s.Name)
	}
	return nil
}

// Profile returns the profile of the given name (or a spelling Canonical
// maps to it); the error wraps ErrUnknownProfile.
func (s *Scheme) Profile(name string) (Profile, error) {
	i, err := s.profileIndex(name)
	if err != nil {
		return Profile{}, err
	}
	return s.Profiles[i], nil
}

func (s *Scheme) profileIndex(name string) (int, error) {
	if i, ok := s.index[name]; ok {
		return i, nil
	}
	if s.Canonical != nil {
		if i, ok := s.index[s.Canonical(name)]; ok {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w %q for %s (have %s)", ErrUnknownProfile, name, s.Name, strings.Join(s.ProfileNames(), ", "))
}

// ProfileNames returns the names of the scheme's profiles in its order.
func (s *Scheme) ProfileNames() []string {
	out := make([]string, len(s.Profiles))
	for i, pr := range s.Profiles {
		out[i] = pr.Name
	}
	return out
}

// Modes returns the scheme's card-wide modes in profile order, each once.
func (s *Scheme) Modes() []string { return slices.Clone(s.modes) }

// slotIndex is the slot of profile prof at start, -1 when none.
func (s *Scheme) slotIndex(prof, start int) int {
	for i, sl := range s.slots {
		if sl.prof == prof && sl.start == start {
			return i
		}
	}
	return -1
}

// dnsForm is a profile name's form in device names: lower case, every run
// of characters other than a-z and 0-9 one "-", none at either end.
func dnsForm(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	return b.String()
}
