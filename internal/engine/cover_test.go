package engine_test

import (
	"fmt"
	"math/rand"
	"testing"

	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

// fillInUse makes n cards, schemes round robin, each with a random
// maximal layout (Scheme.IsMaximal) of which each partition is in use
// with probability inUse and requested otherwise: a complete plan exists
// by construction. It is a function of the seed.
func fillInUse(
	t testing.TB, seed int64, schemes []*partition.Scheme, n int, inUse float64,
) ([]partition.FleetCard, []partition.Request) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	maximal := map[*partition.Scheme][]partition.Layout{}
	for _, s := range schemes {
		ls, err := s.Layouts()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if ok, err := s.IsMaximal(l); err != nil {
				t.Fatal(err)
			} else if ok {
				maximal[s] = append(maximal[s], l)
			}
		}
	}
	var fleet []partition.FleetCard
	var reqs []partition.Request
	for i := 0; i < n; i++ {
		s := schemes[i%len(schemes)]
		f := partition.FleetCard{Node: fmt.Sprintf("node-%d", i/8), Index: i % 8, Scheme: s}
		for _, in := range maximal[s][rng.Intn(len(maximal[s]))] {
			if rng.Float64() < inUse {
				in.InUse = true
				f.Layout = append(f.Layout, in)
			} else {
				reqs = append(reqs, partition.Request{Profile: in.Profile})
			}
		}
		fleet = append(fleet, f)
	}
	rng.Shuffle(len(reqs), func(a, b int) { reqs[a], reqs[b] = reqs[b], reqs[a] })
	return fleet, reqs
}

// TestPlanFleetFillInUseSchemes: fills of 64 cards of the test schemes
// (one scheme and two mixed) with 10% and 30% of the partitions in use
// and the rest requested are placed completely within the default work
// budget, 20 fills per row. (Package mig's TestPlanFleetFillInUse does
// the same for MIG at 128 and 1,000 GPUs.)
func TestPlanFleetFillInUseSchemes(t *testing.T) {
	in, ti, co := instinctLike(t), tiles(t), cores(t)
	runs := 20
	if testing.Short() {
		runs = 5
	}
	for ki, schemes := range [][]*partition.Scheme{{in}, {ti}, {co}, {in, ti}, {ti, co}} {
		for _, frac := range []int{10, 30} {
			missed, searched := 0, 0
			for i := 0; i < runs; i++ {
				seed := int64(ki*1000 + frac*10 + i)
				fleet, reqs := fillInUse(t, seed, schemes, 64, float64(frac)/100)
				plan, err := partition.PlanFleet(fleet, reqs)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, fleet, reqs, plan)
				if plan.Search.Ran {
					searched++
				}
				if len(plan.Unplaced) > 0 {
					missed++
					t.Errorf("schemes %d, %d%% in use, seed %d: %d of %d requests unplaced, search %+v",
						ki, frac, seed, len(plan.Unplaced), len(reqs), plan.Search)
				}
			}
			t.Logf("schemes %d, %d%% in use: %d of %d fills incomplete, the searches ran on %d",
				ki, frac, missed, runs, searched)
		}
	}
}
