package mig

import (
	"fmt"

	"github.com/drakit/drakit/partition"
)

// Sentinel errors of Validate (partition's); the returned error wraps
// exactly one and names the offending instance.
var (
	// ErrPlacement: the start is not an allowed placement of the profile.
	ErrPlacement = partition.ErrPlacement
	// ErrOverlap: two instances share a memory slice.
	ErrOverlap = partition.ErrOverlap
	// ErrMaxCount: more instances of a profile than the GPU allows.
	ErrMaxCount = partition.ErrMaxCount
	// ErrMediaExtensions: more than one "+me" instance on one GPU (the
	// media-extensions counter, partition.ErrExtra, is exhausted).
	ErrMediaExtensions = partition.ErrExtra
	// ErrCompute: the instances need more compute slices than the GPU has
	// (never the case for NVIDIA's tables, possible for NVML-built ones).
	ErrCompute = partition.ErrCompute
)

// Instance is one GPU instance on a GPU: partition.Instance, whose Start
// is the first memory slice of the placement.
type Instance = partition.Instance

// Layout is the set of GPU instances on one GPU: partition.Layout.
type Layout = partition.Layout

// ParseLayout reads a comma-separated list of "profile@start" items, each
// optionally followed by "*" for in use; "" and "-" are the empty layout
// (partition.ParseLayout). Profile names must parse (ParseProfileName)
// and are kept in canonical form.
func ParseLayout(s string) (Layout, error) {
	l, err := partition.ParseLayout(s)
	if err != nil {
		return nil, err
	}
	for i, in := range l {
		pn, err := ParseProfileName(in.Profile)
		if err != nil {
			return nil, fmt.Errorf("parse layout item %d: %w", i, err)
		}
		l[i].Profile = pn.String()
	}
	return l, nil
}

// Validate checks a layout against the placement rules: known profile,
// allowed start, no shared memory slice, per-profile maximum, at most one
// "+me" instance, compute slices within the GPU's (Scheme().Validate).
// The error names the instance and wraps ErrUnknownProfile, ErrPlacement,
// ErrOverlap, ErrMaxCount, ErrMediaExtensions or ErrCompute.
func (p *Product) Validate(l Layout) error {
	if err := p.check(); err != nil {
		return fmt.Errorf("validate layout: %w", err)
	}
	return p.scheme.Validate(l)
}

// Layouts enumerates every valid non-empty layout that uses only the given
// profiles (all of the product's profiles when none are given), exactly,
// in a deterministic order. Instances are listed by profile, then start.
func (p *Product) Layouts(profiles ...string) ([]Layout, error) {
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("enumerate layouts: %w", err)
	}
	return p.scheme.Layouts(profiles...)
}

// IsMaximal reports whether no instance of the given profiles (all when
// none are given) can be added to the valid layout l.
func (p *Product) IsMaximal(l Layout, profiles ...string) (bool, error) {
	if err := p.check(); err != nil {
		return false, fmt.Errorf("check layout maximal: %w", err)
	}
	return p.scheme.IsMaximal(l, profiles...)
}

// Picture draws one GPU's memory slices on one line: each instance is a
// box as wide as its slices, labelled with its profile ("*" when in use);
// a free slice is drawn as dots. label is printed first, padded to 12.
func (p *Product) Picture(label string, l Layout) string {
	if p.check() != nil {
		return fmt.Sprintf("%-12s |%s", label, l)
	}
	return p.scheme.Picture(label, l)
}
