package engine

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// Sentinel errors of Validate; the returned error wraps exactly one and
// names the offending instance.
var (
	// ErrPlacement: the start is not one of the profile's placements.
	ErrPlacement = errors.New("placement not allowed")
	// ErrOverlap: two partitions share a placed unit.
	ErrOverlap = errors.New("placements overlap")
	// ErrMaxCount: more partitions of a profile than the card allows.
	ErrMaxCount = errors.New("too many instances of profile")
	// ErrExtra: the partitions need more of an extra counter than the
	// card has.
	ErrExtra = errors.New("extra counter exhausted")
	// ErrCompute: the partitions need more counted compute units than
	// the card has.
	ErrCompute = errors.New("not enough compute units")
	// ErrMemory: the partitions need more counted memory units than the
	// card has.
	ErrMemory = errors.New("not enough memory units")
	// ErrPartitions: more partitions than Scheme.MaxPartitions.
	ErrPartitions = errors.New("too many partitions")
	// ErrMode: two partitions need different card-wide modes.
	ErrMode = errors.New("card-wide modes differ")
)

// Instance is one partition on a card.
type Instance struct {
	// Profile is the profile's name.
	Profile string `json:"profile"`
	// Start is the placement's start (Placement.Start).
	Start int `json:"start"`
	// InUse marks a partition a workload holds: a plan never destroys it.
	InUse bool `json:"inUse,omitempty"`
	// Restartable marks an in-use partition whose workload may be stopped
	// and started again elsewhere, so that Defragment may move it. It
	// means nothing without InUse; PlanFleet and Preference ignore it.
	Restartable bool `json:"restartable,omitempty"`
}

// String prints "profile@start", with a trailing "*" when in use.
func (in Instance) String() string {
	s := in.Profile + "@" + strconv.Itoa(in.Start)
	if in.InUse {
		s += "*"
	}
	return s
}

// Layout is the set of partitions on one card. Order carries no meaning;
// String prints it sorted by start.
type Layout []Instance

// String prints the layout as ParseLayout reads it, e.g.
// "half@0*,quarter@2"; the empty layout prints as "-".
func (l Layout) String() string {
	if len(l) == 0 {
		return "-"
	}
	c := l.Sorted()
	parts := make([]string, len(c))
	for i, in := range c {
		parts[i] = in.String()
	}
	return strings.Join(parts, ",")
}

// Sorted returns a copy sorted by start, then profile name.
func (l Layout) Sorted() Layout {
	c := append(Layout(nil), l...)
	sort.Slice(c, func(i, j int) bool {
		if c[i].Start != c[j].Start {
			return c[i].Start < c[j].Start
		}
		return c[i].Profile < c[j].Profile
	})
	return c
}

// ParseLayout reads a comma-separated list of "profile@start" items, each
// optionally followed by "*" for in use; "" and "-" are the empty layout.
// Profile names are taken as written (a scheme's lookups apply its
// Canonical).
func ParseLayout(s string) (Layout, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "-" {
		return Layout{}, nil
	}
	var l Layout
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		in := Instance{}
		if strings.HasSuffix(item, "*") {
			in.InUse = true
			item = strings.TrimSuffix(item, "*")
		}
		name, start, ok := strings.Cut(item, "@")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("parse layout item %d %q: want profile@start", i, item)
		}
		st, err := strconv.Atoi(start)
		if err != nil || st < 0 {
			return nil, fmt.Errorf("parse layout item %d %q: start %q is not a non-negative integer", i, item, start)
		}
		in.Profile, in.Start = name, st
		l = append(l, in)
	}
	return l, nil
}

// state is a card's occupancy in the form the enumerator and the planner
// work on. Fields compare in the order lessState uses.
type state struct {
	used    uint64 // placed units: memory in bits 0..31, compute in 32..63
	counts  [maxProfiles]uint8
	extra   [maxExtras]uint8
	compute uint8 // counted compute units taken
	memory  uint8 // counted memory units taken
	n       uint8 // partitions
	mode    uint8 // 1 + the mode of the card's partitions; 0: none
	moded   uint8 // partitions with a mode
}

// empty reports whether the card holds no partition.
func (st *state) empty() bool { return st.n == 0 }

func (s *Scheme) fits(st *state, si int) bool {
	sl := &s.slots[si]
	pr := &s.Profiles[sl.prof]
	in := &s.info[sl.prof]
	if st.used&sl.mask != 0 || int(st.counts[sl.prof]) >= pr.MaxCount {
		return false
	}
	if in.hasExtra {
		for e, v := range in.extra {
			if int(st.extra[e])+int(v) > int(s.extraCap[e]) {
				return false
			}
		}
	}
	if !s.Compute.Placed && int(st.compute)+pr.Compute > s.Compute.Count {
		return false
	}
	if !s.Memory.Placed && int(st.memory)+pr.Memory > s.Memory.Count {
		return false
	}
	if s.MaxPartitions > 0 && int(st.n) >= s.MaxPartitions {
		return false
	}
	return in.mode == 0 || st.mode == 0 || st.mode == in.mode
}

func (s *Scheme) add(st *state, si int) {
	sl := &s.slots[si]
	pr := &s.Profiles[sl.prof]
	in := &s.info[sl.prof]
	st.used |= sl.mask
	st.counts[sl.prof]++
	if in.hasExtra {
		for e, v := range in.extra {
			st.extra[e] += v
		}
	}
	if !s.Compute.Placed {
		st.compute += uint8(pr.Compute)
	}
	if !s.Memory.Placed {
		st.memory += uint8(pr.Memory)
	}
	st.n++
	if in.mode != 0 {
		st.mode = in.mode
		st.moded++
	}
}

func (s *Scheme) remove(st *state, si int) {
	sl := &s.slots[si]
	pr := &s.Profiles[sl.prof]
	in := &s.info[sl.prof]
	st.used &^= sl.mask
	st.counts[sl.prof]--
	if in.hasExtra {
		for e, v := range in.extra {
			st.extra[e] -= v
		}
	}
	if !s.Compute.Placed {
		st.compute -= uint8(pr.Compute)
	}
	if !s.Memory.Placed {
		st.memory -= uint8(pr.Memory)
	}
	st.n--
	if in.mode != 0 {
		st.moded--
		if st.moded == 0 {
			st.mode = 0
		}
	}
}

// computeUsed is the compute units st takes.
func (s *Scheme) computeUsed(st *state) int {
	if s.Compute.Placed {
		return bits.OnesCount64(st.used >> 32)
	}
	return int(st.compute)
}

// memoryUsed is the memory units st takes.
func (s *Scheme) memoryUsed(st *state) int {
	if s.Memory.Placed {
		return bits.OnesCount64(st.used & (1<<32 - 1))
	}
	return int(st.memory)
}

// freeUnits is the placed units st leaves free.
func (s *Scheme) freeUnits(used uint64) int { return s.placed - bits.OnesCount64(used) }

// plural is a noun's plural: the noun and "s".
func plural(noun string) string { return noun + "s" }

// article is the noun with "a" or "an" before it.
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiouAEIOU", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

// Validate checks a layout against the scheme's rules: known profile,
// allowed placement, no shared placed unit, per-profile maximum, extras,
// counted compute and memory, the card's partition limit and one mode
// per card. The error names the instance and wraps ErrUnknownProfile,
// ErrPlacement, ErrOverlap, ErrMaxCount, ErrExtra, ErrCompute,
// ErrMemory, ErrPartitions or ErrMode.
func (s *Scheme) Validate(l Layout) error {
	if err := s.check(); err != nil {
		return fmt.Errorf("validate layout: %w", err)
	}
	_, err := s.stateOf(l)
	return err
}

func (s *Scheme) stateOf(l Layout) (state, error) {
	var st state
	owner := map[uint64]int{} // unit bit -> instance
	modeAt := -1
	for i, in := range l {
		pi, err := s.profileIndex(in.Profile)
		if err != nil {
			return st, fmt.Errorf("validate layout on %s: instances[%d]: %w", s.Name, i, err)
		}
		pr := s.Profiles[pi]
		what := fmt.Sprintf("validate layout on %s: instances[%d] (%s@%d)", s.Name, i, pr.Name, in.Start)
		si := s.slotIndex(pi, in.Start)
		if si < 0 {
			var starts []int
			for _, pl := range pr.Placements {
				starts = append(starts, pl.Start)
			}
			return st, fmt.Errorf("%s: %w: %s may start at %v", what, ErrPlacement, pr.Name, starts)
		}
		mask := s.slots[si].mask
		for b := uint64(1); mask != 0; b <<= 1 {
			if mask&b == 0 {
				continue
			}
			mask &^= b
			if o, taken := owner[b]; taken {
				unit, noun := bits.TrailingZeros64(b), s.Names.MemoryUnit
				if unit >= 32 {
					unit, noun = unit-32, s.Names.ComputeUnit
				}
				return st, fmt.Errorf("%s: %w with instances[%d] (%s@%d) on %s %d", what, ErrOverlap, o, l[o].Profile, l[o].Start, noun, unit)
			}
			owner[b] = i
		}
		if int(st.counts[pi]) >= pr.MaxCount {
			return st, fmt.Errorf("%s: %w %s: at most %d", what, ErrMaxCount, pr.Name, pr.MaxCount)
		}
		for e, v := range s.info[pi].extra {
			if v > 0 && int(st.extra[e])+int(v) > int(s.extraCap[e]) {
				return st, fmt.Errorf("%s: %w: %s needs %d of %s, %d of %d taken", what, ErrExtra, pr.Name, v, s.Extras[e].Name, st.extra[e], s.extraCap[e])
			}
		}
		if !s.Compute.Placed && int(st.compute)+pr.Compute > s.Compute.Count {
			return st, fmt.Errorf("%s: %w: %d in use, %d more needed, %d exist", what, ErrCompute, st.compute, pr.Compute, s.Compute.Count)
		}
		if !s.Memory.Placed && int(st.memory)+pr.Memory > s.Memory.Count {
			return st, fmt.Errorf("%s: %w: %d in use, %d more needed, %d exist", what, ErrMemory, st.memory, pr.Memory, s.Memory.Count)
		}
		if s.MaxPartitions > 0 && int(st.n) >= s.MaxPartitions {
			return st, fmt.Errorf("%s: %w: a %s holds at most %d", what, ErrPartitions, s.Names.Card, s.MaxPartitions)
		}
		if m := s.info[pi].mode; m != 0 {
			if st.mode != 0 && st.mode != m {
				return st, fmt.Errorf("%s: %w: %s needs mode %s, instances[%d] (%s) mode %s", what, ErrMode, pr.Name, pr.Mode, modeAt, l[modeAt].Profile, s.modes[st.mode-1])
			}
			if modeAt < 0 {
				modeAt = i
			}
		}
		s.add(&st, si)
	}
	return st, nil
}

// profileFilter turns profile names into a per-profile allow list; no
// names allows all profiles.
func (s *Scheme) profileFilter(names []string) ([]bool, error) {
	allow := make([]bool, len(s.Profiles))
	if len(names) == 0 {
		for i := range allow {
			allow[i] = true
		}
		return allow, nil
	}
	for _, n := range names {
		i, err := s.profileIndex(n)
		if err != nil {
			return nil, err
		}
		allow[i] = true
	}
	return allow, nil
}

// Layouts enumerates every valid non-empty layout that uses only the
// given profiles (all of the scheme's profiles when none are given),
// exactly, in a deterministic order. Instances are listed by profile,
// then start.
func (s *Scheme) Layouts(profiles ...string) ([]Layout, error) {
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("enumerate layouts: %w", err)
	}
	allow, err := s.profileFilter(profiles)
	if err != nil {
		return nil, fmt.Errorf("enumerate layouts: %w", err)
	}
	var out []Layout
	s.walk(allow, func(chosen []int, _ *state) {
		if len(chosen) > 0 {
			out = append(out, s.layoutOf(chosen))
		}
	})
	return out, nil
}

// walk calls fn once for every valid set of slots (the empty set too),
// each set in ascending slot order.
func (s *Scheme) walk(allow []bool, fn func(chosen []int, st *state)) {
	var st state
	var chosen []int
	var rec func(from int)
	rec = func(from int) {
		fn(chosen, &st)
		for si := from; si < len(s.slots); si++ {
			if !allow[s.slots[si].prof] || !s.fits(&st, si) {
				continue
			}
			s.add(&st, si)
			chosen = append(chosen, si)
			rec(si + 1)
			chosen = chosen[:len(chosen)-1]
			s.remove(&st, si)
		}
	}
	rec(0)
}

func (s *Scheme) layoutOf(slots []int) Layout {
	l := make(Layout, len(slots))
	for i, si := range slots {
		l[i] = Instance{Profile: s.Profiles[s.slots[si].prof].Name, Start: s.slots[si].start}
	}
	return l
}

// IsMaximal reports whether no partition of the given profiles (all when
// none are given) can be added to the valid layout l.
func (s *Scheme) IsMaximal(l Layout, profiles ...string) (bool, error) {
	if err := s.check(); err != nil {
		return false, fmt.Errorf("check layout maximal: %w", err)
	}
	allow, err := s.profileFilter(profiles)
	if err != nil {
		return false, fmt.Errorf("check layout maximal: %w", err)
	}
	st, err := s.stateOf(l)
	if err != nil {
		return false, err
	}
	for si := range s.slots {
		if allow[s.slots[si].prof] && s.fits(&st, si) {
			return false, nil
		}
	}
	return true, nil
}

// Score is the planner's fragmentation score of a valid layout (higher
// is better): for every profile without extras, its compute units
// squared times how many more partitions of it alone would fit, plus
// FreeCardBonus for an empty card. The planner places each partition
// where the score drops least; Defrag.Score sums it over cards.
func (s *Scheme) Score(l Layout) (int, error) {
	if err := s.check(); err != nil {
		return 0, fmt.Errorf("score layout: %w", err)
	}
	st, err := s.stateOf(l)
	if err != nil {
		return 0, err
	}
	return s.sc.score(st), nil
}

// Picture draws one card on one line per placed dimension, memory first:
// each partition is a box as wide as its units, labelled with its
// profile ("*" when in use); a free unit is drawn as dots. label is
// printed first on the first line, padded to 12.
func (s *Scheme) Picture(label string, l Layout) string {
	var lines []string
	if s.Memory.Placed && s.Memory.Count > 0 {
		lines = append(lines, s.pictureLine(label, l, false))
		label = ""
	}
	if s.Compute.Placed {
		lines = append(lines, s.pictureLine(label, l, true))
	}
	return strings.Join(lines, "\n")
}

func (s *Scheme) pictureLine(label string, l Layout, compute bool) string {
	const w = 9 // characters per unit, separator included
	units := s.Memory.Count
	if compute {
		units = s.Compute.Count
	}
	owner := make([]int, units)
	for i := range owner {
		owner[i] = -1
	}
	for i, in := range l {
		first, size := in.Start, 1
		if pi, err := s.profileIndex(in.Profile); err == nil {
			pr := s.Profiles[pi]
			size = pr.Memory
			if compute {
				size = pr.Compute
			}
			if si := s.slotIndex(pi, in.Start); si >= 0 {
				first = s.slots[si].mem
				if compute {
					first = s.slots[si].comp
				}
			}
		}
		for m := first; m < first+size && m < units; m++ {
			if m >= 0 && owner[m] < 0 {
				owner[m] = i
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s |", label)
	for m := 0; m < units; {
		o := owner[m]
		if o < 0 {
			b.WriteString(strings.Repeat(".", w-1) + "|")
			m++
			continue
		}
		span := 0
		for m+span < units && owner[m+span] == o {
			span++
		}
		text := l[o].Profile
		if l[o].InUse {
			text += "*"
		}
		width := span*w - 1
		if len(text) > width {
			text = text[:width]
		}
		b.WriteString(text + strings.Repeat(" ", width-len(text)) + "|")
		m += span
	}
	return b.String()
}
