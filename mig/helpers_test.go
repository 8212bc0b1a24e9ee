package mig

import (
	"testing"

	"github.com/drakit/drakit/partition"
)

// The planner's internals are package partition's; these helpers give the
// tests of this package what they read of them through exported API.

const maxProfiles = partition.MaxProfiles

func pinOK(r Request, f FleetGPU) bool {
	return (r.Node == "" || f.Node == r.Node) && (r.GPU == nil || f.Index == *r.GPU)
}

// fullLayouts returns p's valid layouts of the given profiles (all when
// none) that use all its compute slices, in enumeration order; names
// must be the product's.
func fullLayouts(p *Product, names []string) []Layout {
	ls, err := p.Layouts(names...)
	if err != nil {
		panic(err)
	}
	var out []Layout
	for _, l := range ls {
		c := 0
		for _, in := range l {
			pr, _ := p.Profile(in.Profile)
			c += pr.ComputeSlices
		}
		if c == p.ComputeSlices {
			out = append(out, l)
		}
	}
	return out
}

// layoutScore is the planner's fragmentation score of a valid layout.
func layoutScore(t testing.TB, p *Product, l Layout) int {
	t.Helper()
	v, err := p.Scheme().Score(l)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
