package mig

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// randomFillInUse makes n GPUs, products round robin, each with one
// random layout that uses all its compute slices, every profile ("+me"
// included) allowed; each instance of it is in use with probability
// inUse (left on the GPU, marked InUse) and requested otherwise. A
// complete packing exists by construction: the drawn layouts are one,
// independent of any planner. The fill is a function of the seed.
func randomFillInUse(seed int64, ps []*Product, n int, inUse float64) ([]FleetGPU, []Request) {
	rng := rand.New(rand.NewSource(seed))
	full := map[*Product][]Layout{}
	for _, p := range ps {
		var all []string
		for _, pr := range p.Profiles {
			all = append(all, pr.Name)
		}
		full[p] = fullLayouts(p, all)
	}
	var fleet []FleetGPU
	var reqs []Request
	for i := 0; i < n; i++ {
		p := ps[i%len(ps)]
		var l Layout
		for _, in := range full[p][rng.Intn(len(full[p]))] {
			if rng.Float64() < inUse {
				in.InUse = true
				l = append(l, in)
			} else {
				reqs = append(reqs, Request{Profile: in.Profile})
			}
		}
		node := fmt.Sprintf("node-%d", i/8)
		fleet = append(fleet, FleetGPU{Node: node, Index: i % 8, Product: p, Layout: l})
	}
	rng.Shuffle(len(reqs), func(a, b int) { reqs[a], reqs[b] = reqs[b], reqs[a] })
	return fleet, reqs
}

// fillMixes are the product mixes of the in-use fills.
func fillMixes(t testing.TB) []struct {
	name string
	ps   []*Product
} {
	h, a, h2 := mustLookup(t, "H100-80GB"), mustLookup(t, "A100-40GB"), mustLookup(t, "H200-141GB")
	return []struct {
		name string
		ps   []*Product
	}{
		{"H100-80GB", []*Product{h}},
		{"H100-80GB+A100-40GB", []*Product{h, a}},
		{"H200-141GB+A100-40GB", []*Product{h2, a}},
	}
}

// processCPU is the process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPlanFleetFillInUse: fills of 128 GPUs with partitions already in
// use (10%, 30% and 50% of each drawn layout's instances) and the rest
// requested, "+me" profiles included, three product mixes, 30 seeds per
// row (6 with -short; DRAKIT_INUSE_FILLS sets another count), are placed
// completely within the default work budget. Before the cover search,
// 15, 4 and 21 of 30 fills with 10% in use were left incomplete, the
// work budget spent in the neighbourhood search. The log gives the CPU
// time per plan (median and largest) and the most work, per row.
func TestPlanFleetFillInUse(t *testing.T) {
	fillInUse(t, 128, 30)
}

// TestPlanFleetFillInUse1000 is TestPlanFleetFillInUse at 1,000 GPUs, 3
// seeds per row; DRAKIT_INUSE_FILLS_1000 sets another count. Skipped
// with -short.
func TestPlanFleetFillInUse1000(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000-GPU fills: not with -short")
	}
	fillInUse(t, 1000, 3)
}

func fillInUse(t *testing.T, n, runs int) {
	env := "DRAKIT_INUSE_FILLS"
	if n != 128 {
		env += "_" + strconv.Itoa(n)
	}
	if testing.Short() {
		runs = max(runs/5, 1)
	}
	if s := os.Getenv(env); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("%s=%q: want a positive count", env, s)
		}
		runs = v
	}
	for _, frac := range []int{10, 30, 50} {
		for mi, mix := range fillMixes(t) {
			missed, maxWork := 0, 0
			var cpu []time.Duration
			for i := 0; i < runs; i++ {
				seed := int64(n*1000 + frac*10 + mi + i*100_000)
				fleet, reqs := randomFillInUse(seed, mix.ps, n, float64(frac)/100)
				c0 := processCPU()
				plan, err := PlanFleet(fleet, reqs)
				cpu = append(cpu, processCPU()-c0)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, fleet, reqs, plan)
				maxWork = max(maxWork, plan.Search.Nodes)
				if len(plan.Unplaced) > 0 {
					missed++
					var left []string
					for _, u := range plan.Unplaced {
						left = append(left, reqs[u.Request].Profile)
					}
					t.Errorf("%d GPUs %s, %d%% in use, seed %d: %d of %d requests unplaced %v, search %+v",
						n, mix.name, frac, seed, len(plan.Unplaced), len(reqs), left, plan.Search)
				}
			}
			sort.Slice(cpu, func(a, b int) bool { return cpu[a] < cpu[b] })
			r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond / 10) }
			t.Logf("%d GPUs %-20s %2d%% in use: %d of %d fills incomplete; "+
				"CPU per plan median %v, min %v, max %v; most work %d of %d",
				n, mix.name, frac, missed, runs, r(cpu[len(cpu)/2]), r(cpu[0]), r(cpu[len(cpu)-1]),
				maxWork, DefaultSearchWork)
		}
	}
}

// BenchmarkPlanFleetFillInUse1000 plans fills of 1,000 GPUs (H100-80GB
// with A100-40GB, "+me" included) with 10% of the partitions in use and
// the rest requested, 4 seeds in turn.
func BenchmarkPlanFleetFillInUse1000(b *testing.B) {
	benchFillInUse(b, 1000)
}

// BenchmarkPlanFleetFillInUse128 is BenchmarkPlanFleetFillInUse1000 at
// 128 GPUs.
func BenchmarkPlanFleetFillInUse128(b *testing.B) {
	benchFillInUse(b, 128)
}

func benchFillInUse(b *testing.B, n int) {
	ps := fillMixes(b)[1].ps
	type inst struct {
		fleet []FleetGPU
		reqs  []Request
	}
	var is []inst
	for s := range 4 {
		f, r := randomFillInUse(int64(s+1), ps, n, 0.1)
		is = append(is, inst{f, r})
	}
	i := 0
	for b.Loop() {
		in := is[i%len(is)]
		i++
		if _, err := PlanFleet(in.fleet, in.reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPlanFleetFillInUseAgainstOptimum: on fleets small enough for
// Optimum (8 GPUs, at most 30 requests), fills with 10% to 50% of the
// partitions in use, "+me" profiles included, some with requests that
// do not all fit added (so that the searches run and cannot place
// everything), PlanFleet reaches Optimum's value every time, and plans
// the same fleet the same way twice, to the search's node counts (the
// per-card repair took unplaced requests in map order, which reached
// the neighbourhood search's work: seeds 8037 and 9009 differed).
func TestPlanFleetFillInUseAgainstOptimum(t *testing.T) {
	runs := 40
	if testing.Short() {
		runs = 10
	}
	searched := 0
	for mi, mix := range fillMixes(t) {
		for i := 0; i < runs; i++ {
			seed := int64(7000 + mi*1000 + i)
			frac := 0.1 + 0.1*float64(i%5)
			fleet, reqs := randomFillInUse(seed, mix.ps, OptimumMaxGPUs, frac)
			rng := rand.New(rand.NewSource(seed))
			if i%2 == 1 {
				// Over-ask: a few more requests of random profiles.
				for range 4 {
					p := mix.ps[rng.Intn(len(mix.ps))]
					reqs = append(reqs, Request{Profile: p.Profiles[rng.Intn(len(p.Profiles))].Name})
				}
			}
			rng.Shuffle(len(reqs), func(a, b int) { reqs[a], reqs[b] = reqs[b], reqs[a] })
			if len(reqs) > OptimumMaxRequests {
				reqs = reqs[:OptimumMaxRequests]
			}
			want, err := Optimum(fleet, reqs)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := PlanFleet(fleet, reqs)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, fleet, reqs, plan)
			if plan.Search.Ran {
				searched++
			}
			if got := plan.Value(); got != want {
				t.Errorf("%s seed %d (%d requests): PlanFleet %+v, Optimum %+v, search %+v",
					mix.name, seed, len(reqs), got, want, plan.Search)
			}
			again, err := PlanFleet(fleet, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(plan, again, planCmp); diff != "" {
				t.Errorf("%s seed %d: two runs differ:\n%s", mix.name, seed, diff)
			}
		}
	}
	t.Logf("%d fleets, the searches ran on %d", 3*runs, searched)
}
