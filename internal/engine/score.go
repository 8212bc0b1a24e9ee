package engine

import "sync"

// Fragmentation scoring shared by the batch planner and the online order.
//
// The score of a card's state measures what its free space can still
// hold: for every plain profile (one that takes no extra counter), its
// compute units squared times how many more partitions of it alone would
// fit, plus FreeCardBonus when the card is empty. A placement's loss is
// the score before minus the score after; the planner picks the
// placement with the least loss, which keeps whole cards free and large
// aligned blocks intact (a small partition goes where it blocks no large
// one).

// FreeCardBonus is added to the score of a card with no partitions. With
// a whole-card profile's weight (49 for 7 compute units) it makes
// breaking a free card cost more than any placement on a partly used
// one, so a planner breaks a free card only when no partly used card can
// take the partition. A scheme whose profiles weigh more (compute units
// squared, summed over what fits) can break that promise; the package's
// tests check it for every scheme they use.
const FreeCardBonus = 100

// scorer memoizes state scores for one scheme. Each Scheme owns its
// scorer (NewScheme builds it), so the memo lives exactly as long as the
// scheme: no process-global cache keyed by scheme, which would grow
// without bound when schemes come from what hardware reports (a new one
// per discovery). The memo is bounded by the scheme's valid layouts and
// shared by every planning run on the scheme, so it is guarded by a
// mutex.
type scorer struct {
	s     *Scheme
	order [][]int // per profile, its slots by first placed unit
	mu    sync.Mutex
	memo  map[state]int
}

func newScorer(s *Scheme) *scorer {
	sc := &scorer{s: s, memo: map[state]int{}}
	for pi := range s.Profiles {
		sc.order = append(sc.order, sc.byFirstUnit(pi))
	}
	return sc
}

// score returns the fragmentation score of st (higher is better).
func (sc *scorer) score(st state) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if v, ok := sc.memo[st]; ok {
		return v
	}
	s := sc.s
	v := 0
	for pi, pr := range s.Profiles {
		if s.info[pi].hasExtra {
			continue
		}
		v += scoreWeight(pr.Compute) * sc.maxMore(st, pi)
	}
	if st.empty() {
		v += FreeCardBonus
	}
	sc.memo[st] = v
	return v
}

// maxMore is how many more partitions of profile pi fit in st. With one
// placed dimension, greedy by ascending first unit is exact: all
// placements of a profile have one size. With two, an exact search
// decides.
func (sc *scorer) maxMore(st state, pi int) int {
	s := sc.s
	if s.Memory.Placed && s.Compute.Placed && s.Profiles[pi].Memory > 0 {
		return sc.maxMoreExact(st, pi, 0)
	}
	n := 0
	for _, si := range sc.order[pi] {
		if s.fits(&st, si) {
			s.add(&st, si)
			n++
		}
	}
	return n
}

// byFirstUnit lists profile pi's slots by their first placed unit.
func (sc *scorer) byFirstUnit(pi int) []int {
	s := sc.s
	var out []int
	for si, sl := range s.slots {
		if sl.prof == pi {
			out = append(out, si)
		}
	}
	first := func(si int) int {
		if s.Memory.Placed && s.Profiles[pi].Memory > 0 {
			return s.slots[si].mem
		}
		return s.slots[si].comp
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && first(out[j]) < first(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// maxMoreExact is maxMore by exhaustive search over pi's slots from from.
func (sc *scorer) maxMoreExact(st state, pi, from int) int {
	s := sc.s
	best := 0
	for si := from; si < len(s.slots); si++ {
		if s.slots[si].prof != pi || !s.fits(&st, si) {
			continue
		}
		next := st
		s.add(&next, si)
		best = max(best, 1+sc.maxMoreExact(next, pi, si+1))
	}
	return best
}

// scoreWeight is a profile's weight in the score: its compute units
// squared, so that keeping room for one large partition counts more than
// room for as many compute units in small ones (measured online on MIG:
// compute squared beats compute by about 2 points of compute-weighted
// acceptance at load 1.0 on 8 x H100).
func scoreWeight(compute int) int { return compute * compute }
