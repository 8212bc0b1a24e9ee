package mig

import (
	"fmt"
	"math/rand"
	"testing"
)

// benchFleet is n H100 GPUs, every other one with random in-use instances,
// and m requests drawn from the notes' mix.
func benchFleet(n, m int, seed int64) ([]FleetGPU, []Request) {
	rng := rand.New(rand.NewSource(seed))
	p, _ := Lookup("H100-80GB")
	layouts, _ := p.Layouts()
	fleet := make([]FleetGPU, n)
	for i := range fleet {
		fleet[i] = FleetGPU{Node: fmt.Sprintf("node-%d", i/8), Index: i % 8, Product: p}
		if i%2 == 0 {
			for _, in := range layouts[rng.Intn(len(layouts))] {
				in.InUse = true
				fleet[i].Layout = append(fleet[i].Layout, in)
			}
		}
	}
	mix := []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb",
		"1g.20gb", "1g.20gb", "2g.20gb", "2g.20gb", "2g.20gb", "2g.20gb", "3g.40gb", "3g.40gb", "3g.40gb",
		"4g.40gb", "4g.40gb", "7g.80gb", "7g.80gb"}
	reqs := make([]Request, m)
	for i := range reqs {
		reqs[i] = Request{Profile: mix[rng.Intn(len(mix))]}
	}
	return fleet, reqs
}

func BenchmarkPlanFleet8GPUs(b *testing.B) {
	fleet, reqs := benchFleet(8, 8, 1)
	for b.Loop() {
		if _, err := PlanFleet(fleet, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlanFleet1000GPUs(b *testing.B) {
	fleet, reqs := benchFleet(1000, 200, 1)
	for b.Loop() {
		if _, err := PlanFleet(fleet, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPreference8GPUs(b *testing.B) {
	fleet, _ := benchFleet(8, 0, 1)
	for b.Loop() {
		if _, err := Preference(fleet); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLayoutsH100(b *testing.B) {
	p, _ := Lookup("H100-80GB")
	for b.Loop() {
		if _, err := p.Layouts(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOptimum8GPUs30Requests(b *testing.B) {
	fleet, reqs := benchFleet(8, 30, 1)
	for b.Loop() {
		if _, err := Optimum(fleet, reqs); err != nil {
			b.Fatal(err)
		}
	}
}
