package mig

import "sync"

// Fragmentation scoring shared by the batch planner and the online order.
//
// The score of a GPU's state measures what its free space can still hold:
// for every plain (non-"+me") profile, its compute slices squared times how
// many more instances of it alone would fit, plus FreeGPUBonus when the GPU
// is empty. A placement's loss is the score before minus the score after; the
// planner picks the placement with the least loss, which keeps whole GPUs
// free and large aligned blocks intact (a 1g goes where it blocks no 4g).

// FreeGPUBonus is added to the score of a GPU with no instances. With the
// whole-GPU profile's weight (49 for 7g) it makes breaking a free GPU cost
// more than any placement on a partly used one, so a planner breaks a free
// GPU only when no partly used GPU can take the instance.
const FreeGPUBonus = 100

// scorer memoizes state scores for one product. Each Product owns its
// scorer (NewProduct builds it), so the memo lives exactly as long as the
// product: no process-global cache keyed by product, which would grow
// without bound when products come from NVML (FromNVML builds a new one
// per discovery). The memo is bounded by the product's valid layouts
// (2,318 for the largest table) and shared by every planning run on the
// product, so it is guarded by a mutex.
type scorer struct {
	p    *Product
	mu   sync.Mutex
	memo map[state]int
}

func newScorer(p *Product) *scorer { return &scorer{p: p, memo: map[state]int{}} }

// score returns the fragmentation score of st (higher is better).
func (s *scorer) score(st state) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.memo[st]; ok {
		return v
	}
	p := s.p
	v := 0
	for pi, pr := range p.Profiles {
		if pr.MediaExtensions {
			continue
		}
		v += scoreWeight(pr.ComputeSlices) * s.maxMore(st, pi)
	}
	if st.used == 0 {
		v += FreeGPUBonus
	}
	s.memo[st] = v
	return v
}

// maxMore is how many more instances of profile pi fit in st. Greedy by
// ascending start is exact: all placements of a profile have one size.
func (s *scorer) maxMore(st state, pi int) int {
	n := 0
	for si, sl := range s.p.slots {
		if sl.prof != pi {
			continue
		}
		if s.p.fits(&st, si) {
			s.p.add(&st, si)
			n++
		}
	}
	return n
}

// scoreWeight is a profile's weight in the score: its compute slices
// squared, so that keeping room for one large instance counts more than
// room for as many compute slices in small ones (measured online: compute
// squared beats compute by about 2 points of compute-weighted acceptance
// at load 1.0 on 8 x H100).
func scoreWeight(compute int) int { return compute * compute }
