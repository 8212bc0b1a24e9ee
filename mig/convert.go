package mig

import (
	"fmt"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/plan"
)

// The planner, the counter model and the defragmenter are package
// partition's; mig hands them the products' schemes and turns the
// results back into NVIDIA's terms (GPUs, products). These are the
// conversions.

// toCards turns a fleet into partition's, checking every product: the
// error (prefixed by what) wraps ErrFleet and ErrProductNotBuilt.
func toCards(what string, fleet []FleetGPU) ([]partition.FleetCard, error) {
	out := make([]partition.FleetCard, len(fleet))
	for i, f := range fleet {
		if err := f.Product.check(); err != nil {
			return nil, fmt.Errorf("%s: %w: fleet[%d].product: %w", what, ErrFleet, i, err)
		}
		out[i] = partition.FleetCard{Node: f.Node, Index: f.Index, Scheme: f.Product.scheme, Layout: f.Layout}
	}
	return out, nil
}

// fromCards turns partition's cards back into fleet GPUs; like is the
// fleet they came from, in the same order, whose products they take.
func fromCards(cards []partition.FleetCard, like []FleetGPU) []FleetGPU {
	if cards == nil {
		return nil
	}
	out := make([]FleetGPU, len(cards))
	for i, c := range cards {
		out[i] = FleetGPU{Node: c.Node, Index: c.Index, Product: like[i].Product, Layout: c.Layout}
	}
	return out
}

func toRequest(r Request) plan.Request {
	return plan.Request{ID: r.ID, Profile: r.Profile, Node: r.Node, Card: r.GPU}
}

// checkRequest checks what partition leaves to the scheme: the profile
// name must parse, the GPU index must not be negative.
func checkRequest(r Request) error {
	if _, err := ParseProfileName(r.Profile); err != nil {
		return fmt.Errorf("%w: %w", ErrFleet, err)
	}
	if r.GPU != nil && *r.GPU < 0 {
		return fmt.Errorf("%w: gpu %d is negative", ErrFleet, *r.GPU)
	}
	return nil
}

func fromAssignment(a plan.Assignment) Assignment {
	return Assignment{Request: a.Request, Node: a.Node, GPU: a.Card, Profile: a.Profile, Start: a.Start, Reused: a.Reused}
}

// productOf is the product whose scheme s is: the catalog's entry, or a
// product built from the scheme (for WithProfiles).
func productOf(s *partition.Scheme) *Product {
	for _, p := range builtin {
		if p.scheme == s {
			return p
		}
	}
	p := &Product{Name: s.Name, MemorySlices: s.Memory.Count, ComputeSlices: s.Compute.Count, index: map[string]int{}, scheme: s}
	for i, sp := range s.Profiles {
		pr := Profile{Name: sp.Name, ID: sp.ID, ComputeSlices: sp.Compute, MemorySlices: sp.Memory, MemoryMiB: sp.MemoryBytes >> 20,
			MaxCount: sp.MaxCount, MediaExtensions: sp.Extras[CounterMediaExtensions] > 0}
		for _, pl := range sp.Placements {
			pr.Starts = append(pr.Starts, pl.Start)
		}
		n := func(name string) int {
			q, ok := sp.Capacities[name]
			if !ok {
				return 0
			}
			return int(q.Value())
		}
		pr.Engines = Engines{n(CapMultiprocessors), n(CapCopyEngines), n(CapDecoders), n(CapEncoders), n(CapJpegEngines), n(CapOfaEngines)}
		p.Profiles = append(p.Profiles, pr)
		p.index[pr.Name] = i
	}
	return p
}
