package mig

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Sentinel errors of Validate; the returned error wraps exactly one and
// names the offending instance.
var (
	// ErrPlacement: the start is not an allowed placement of the profile.
	ErrPlacement = errors.New("placement not allowed")
	// ErrOverlap: two instances share a memory slice.
	ErrOverlap = errors.New("memory slices overlap")
	// ErrMaxCount: more instances of a profile than the GPU allows.
	ErrMaxCount = errors.New("too many instances of profile")
	// ErrMediaExtensions: more than one "+me" instance on one GPU.
	ErrMediaExtensions = errors.New("more than one +me instance")
	// ErrCompute: the instances need more compute slices than the GPU has
	// (never the case for NVIDIA's tables, possible for NVML-built ones).
	ErrCompute = errors.New("not enough compute slices")
)

// Instance is one GPU instance on a GPU.
type Instance struct {
	// Profile is the profile name, e.g. "3g.40gb".
	Profile string `json:"profile"`
	// Start is the first memory slice of the placement.
	Start int `json:"start"`
	// InUse marks an instance a workload holds: a plan never destroys it.
	InUse bool `json:"inUse,omitempty"`
	// Restartable marks an in-use instance whose workload may be stopped
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

// Layout is the set of GPU instances on one GPU. Order carries no meaning;
// String prints it sorted by start.
type Layout []Instance

// String prints the layout as ParseLayout reads it, e.g.
// "4g.40gb@0*,3g.40gb@4"; the empty layout prints as "-".
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
		if !ok {
			return nil, fmt.Errorf("parse layout item %d %q: want profile@start, e.g. 3g.40gb@4", i, item)
		}
		pn, err := ParseProfileName(name)
		if err != nil {
			return nil, fmt.Errorf("parse layout item %d: %w", i, err)
		}
		st, err := strconv.Atoi(start)
		if err != nil || st < 0 {
			return nil, fmt.Errorf("parse layout item %d %q: start %q is not a non-negative integer", i, item, start)
		}
		in.Profile, in.Start = pn.String(), st
		l = append(l, in)
	}
	return l, nil
}

// state is a GPU's occupancy in the form the enumerator and the planner
// work on: used memory slices, per-profile counts, +me count.
type state struct {
	used    uint32
	counts  [maxProfiles]uint8
	me      uint8
	compute uint8
}

const maxProfiles = 16

func (p *Product) fits(st *state, si int) bool {
	s := p.slots[si]
	pr := &p.Profiles[s.prof]
	return st.used&s.mask == 0 && int(st.counts[s.prof]) < pr.MaxCount && (!pr.MediaExtensions || st.me == 0) &&
		int(st.compute)+pr.ComputeSlices <= p.ComputeSlices
}

func (p *Product) add(st *state, si int) {
	s := p.slots[si]
	st.used |= s.mask
	st.counts[s.prof]++
	st.compute += uint8(p.Profiles[s.prof].ComputeSlices)
	if p.Profiles[s.prof].MediaExtensions {
		st.me++
	}
}

func (p *Product) remove(st *state, si int) {
	s := p.slots[si]
	st.used &^= s.mask
	st.counts[s.prof]--
	st.compute -= uint8(p.Profiles[s.prof].ComputeSlices)
	if p.Profiles[s.prof].MediaExtensions {
		st.me--
	}
}

func (p *Product) slotIndex(prof, start int) int {
	for i, s := range p.slots {
		if s.prof == prof && s.start == start {
			return i
		}
	}
	return -1
}

// Validate checks a layout against the placement rules: known profile,
// allowed start, no shared memory slice, per-profile maximum, at most one
// "+me" instance, compute slices within the GPU's. The error names the
// instance and wraps ErrUnknownProfile, ErrPlacement, ErrOverlap,
// ErrMaxCount, ErrMediaExtensions or ErrCompute.
func (p *Product) Validate(l Layout) error {
	_, err := p.stateOf(l)
	return err
}

func (p *Product) stateOf(l Layout) (state, error) {
	var st state
	owner := make([]int, p.MemorySlices)
	for i := range owner {
		owner[i] = -1
	}
	meAt := -1
	for i, in := range l {
		pi, err := p.profileIndex(in.Profile)
		if err != nil {
			return st, fmt.Errorf("validate layout on %s: instances[%d]: %w", p.Name, i, err)
		}
		pr := p.Profiles[pi]
		si := p.slotIndex(pi, in.Start)
		if si < 0 {
			return st, fmt.Errorf("validate layout on %s: instances[%d] (%s@%d): %w: %s may start at %v", p.Name, i, pr.Name, in.Start, ErrPlacement, pr.Name, pr.Starts)
		}
		for m := in.Start; m < in.Start+pr.MemorySlices; m++ {
			if owner[m] >= 0 {
				o := l[owner[m]]
				return st, fmt.Errorf("validate layout on %s: instances[%d] (%s@%d): %w with instances[%d] (%s@%d) on memory slice %d", p.Name, i, pr.Name, in.Start, ErrOverlap, owner[m], o.Profile, o.Start, m)
			}
			owner[m] = i
		}
		if int(st.counts[pi]) >= pr.MaxCount {
			return st, fmt.Errorf("validate layout on %s: instances[%d] (%s@%d): %w %s: at most %d", p.Name, i, pr.Name, in.Start, ErrMaxCount, pr.Name, pr.MaxCount)
		}
		if pr.MediaExtensions {
			if meAt >= 0 {
				return st, fmt.Errorf("validate layout on %s: instances[%d] (%s@%d): %w (instances[%d] is %s)", p.Name, i, pr.Name, in.Start, ErrMediaExtensions, meAt, l[meAt].Profile)
			}
			meAt = i
		}
		if int(st.compute)+pr.ComputeSlices > p.ComputeSlices {
			return st, fmt.Errorf("validate layout on %s: instances[%d] (%s@%d): %w: %d in use, %d more needed, %d exist", p.Name, i, pr.Name, in.Start, ErrCompute, st.compute, pr.ComputeSlices, p.ComputeSlices)
		}
		p.add(&st, si)
	}
	return st, nil
}

// profileFilter turns profile names into a per-profile allow list; no
// names allows all profiles.
func (p *Product) profileFilter(names []string) ([]bool, error) {
	allow := make([]bool, len(p.Profiles))
	if len(names) == 0 {
		for i := range allow {
			allow[i] = true
		}
		return allow, nil
	}
	for _, n := range names {
		i, err := p.profileIndex(n)
		if err != nil {
			return nil, err
		}
		allow[i] = true
	}
	return allow, nil
}

// Layouts enumerates every valid non-empty layout that uses only the given
// profiles (all of the product's profiles when none are given), exactly,
// in a deterministic order. Instances are listed by profile, then start.
func (p *Product) Layouts(profiles ...string) ([]Layout, error) {
	allow, err := p.profileFilter(profiles)
	if err != nil {
		return nil, fmt.Errorf("enumerate layouts: %w", err)
	}
	var out []Layout
	p.walk(allow, func(chosen []int, _ *state) {
		if len(chosen) > 0 {
			out = append(out, p.layoutOf(chosen))
		}
	})
	return out, nil
}

// walk calls fn once for every valid set of slots (the empty set too),
// each set in ascending slot order.
func (p *Product) walk(allow []bool, fn func(chosen []int, st *state)) {
	var st state
	var chosen []int
	var rec func(from int)
	rec = func(from int) {
		fn(chosen, &st)
		for si := from; si < len(p.slots); si++ {
			if !allow[p.slots[si].prof] || !p.fits(&st, si) {
				continue
			}
			p.add(&st, si)
			chosen = append(chosen, si)
			rec(si + 1)
			chosen = chosen[:len(chosen)-1]
			p.remove(&st, si)
		}
	}
	rec(0)
}

func (p *Product) layoutOf(slots []int) Layout {
	l := make(Layout, len(slots))
	for i, si := range slots {
		l[i] = Instance{Profile: p.Profiles[p.slots[si].prof].Name, Start: p.slots[si].start}
	}
	return l
}

// IsMaximal reports whether no instance of the given profiles (all when
// none are given) can be added to the valid layout l.
func (p *Product) IsMaximal(l Layout, profiles ...string) (bool, error) {
	allow, err := p.profileFilter(profiles)
	if err != nil {
		return false, fmt.Errorf("check layout maximal: %w", err)
	}
	st, err := p.stateOf(l)
	if err != nil {
		return false, err
	}
	for si := range p.slots {
		if allow[p.slots[si].prof] && p.fits(&st, si) {
			return false, nil
		}
	}
	return true, nil
}

// Picture draws one GPU's memory slices on one line: each instance is a
// box as wide as its slices, labelled with its profile ("*" when in use);
// a free slice is drawn as dots. label is printed first, padded to 12.
func (p *Product) Picture(label string, l Layout) string {
	const w = 9 // characters per memory slice, separator included
	owner := make([]int, p.MemorySlices)
	for i := range owner {
		owner[i] = -1
	}
	sizes := make([]int, len(l))
	for i, in := range l {
		size := 1
		if pr, err := p.Profile(in.Profile); err == nil {
			size = pr.MemorySlices
		}
		sizes[i] = size
		for m := in.Start; m < in.Start+size && m < p.MemorySlices; m++ {
			if m >= 0 && owner[m] < 0 {
				owner[m] = i
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s |", label)
	for m := 0; m < p.MemorySlices; {
		o := owner[m]
		if o < 0 {
			b.WriteString(strings.Repeat(".", w-1) + "|")
			m++
			continue
		}
		span := 0
		for m+span < p.MemorySlices && owner[m+span] == o {
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
