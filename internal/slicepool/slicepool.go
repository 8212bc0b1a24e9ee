// Package slicepool tells, from one driver's ResourceSlices, which of its
// pools the scheduler can allocate from: those whose newest generation is
// complete (all resourceSliceCount slices present). The structured
// allocator refuses an incomplete pool (k8s.io/dynamic-resource-allocation/structured,
// GatherPools), so a driver's devices are usable only once their pool is
// complete. The conformance suite, package testenv and the driver runtime
// wait for that.
package slicepool

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
)

// Pool is one pool's newest generation.
type Pool struct {
	// Name is the pool's name.
	Name string
	// Generation is the newest generation among the pool's slices.
	Generation int64
	// Count is the resourceSliceCount of the newest generation's slices
	// (of the last one read, when they disagree).
	Count int64
	// Slices are the newest generation's slices, in the order given.
	Slices []*resourceapi.ResourceSlice
	counts map[int64]bool
}

// Complete reports whether every slice of the newest generation is
// present and all of them name the same slice count.
func (p *Pool) Complete() bool {
	return int64(len(p.Slices)) == p.Count && len(p.counts) == 1
}

// Problem says why the pool is not complete, or "".
func (p *Pool) Problem() string {
	if p.Complete() {
		return ""
	}
	if len(p.counts) > 1 {
		return fmt.Sprintf("pool %q generation %d: its %d slices disagree on resourceSliceCount", p.Name, p.Generation, len(p.Slices))
	}
	return fmt.Sprintf("pool %q generation %d has %d slices, resourceSliceCount says %d", p.Name, p.Generation, len(p.Slices), p.Count)
}

// Devices returns the names of the devices in the pool's newest
// generation, in slice order.
func (p *Pool) Devices() []string {
	var out []string
	for _, sl := range p.Slices {
		for i := range sl.Spec.Devices {
			out = append(out, sl.Spec.Devices[i].Name)
		}
	}
	return out
}

// Group sorts one driver's slices into pools by name, keeping only each
// pool's newest generation.
func Group(slices []*resourceapi.ResourceSlice) map[string]*Pool {
	ps := map[string]*Pool{}
	for _, sl := range slices {
		p := ps[sl.Spec.Pool.Name]
		if p == nil {
			p = &Pool{Name: sl.Spec.Pool.Name, Generation: sl.Spec.Pool.Generation, counts: map[int64]bool{}}
			ps[sl.Spec.Pool.Name] = p
		}
		switch {
		case sl.Spec.Pool.Generation > p.Generation:
			p.Generation, p.Slices, p.counts = sl.Spec.Pool.Generation, nil, map[int64]bool{}
			fallthrough
		case sl.Spec.Pool.Generation == p.Generation:
			p.Slices = append(p.Slices, sl)
			p.counts[sl.Spec.Pool.ResourceSliceCount] = true
			p.Count = sl.Spec.Pool.ResourceSliceCount
		}
	}
	return ps
}

// Incomplete returns the problems of the pools that are not complete,
// sorted.
func Incomplete(pools map[string]*Pool) []string {
	var out []string
	for _, p := range pools {
		if msg := p.Problem(); msg != "" {
			out = append(out, msg)
		}
	}
	sort.Strings(out)
	return out
}
