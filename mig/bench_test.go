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

// benchMixed is n GPUs, H100-80GB and A100-40GB alternating, every other
// pair with random in-use instances, and m requests of either product's
// plain profiles.
func benchMixed(n, m int, seed int64) ([]FleetGPU, []Request) {
	rng := rand.New(rand.NewSource(seed))
	ps := []*Product{testProduct("H100-80GB"), testProduct("A100-40GB")}
	fleet := make([]FleetGPU, n)
	for i := range fleet {
		p := ps[i%2]
		fleet[i] = FleetGPU{Node: fmt.Sprintf("node-%d", i/8), Index: i % 8, Product: p}
		if (i/2)%2 == 0 {
			layouts, _ := p.Layouts()
			for _, in := range layouts[rng.Intn(len(layouts))] {
				in.InUse = true
				fleet[i].Layout = append(fleet[i].Layout, in)
			}
		}
	}
	reqs := make([]Request, m)
	for i := range reqs {
		p := ps[rng.Intn(2)]
		for {
			pr := p.Profiles[rng.Intn(len(p.Profiles))]
			if !pr.MediaExtensions {
				reqs[i] = Request{Profile: pr.Name}
				break
			}
		}
	}
	return fleet, reqs
}

// BenchmarkPlanFleet1000GPUsMixed is BenchmarkPlanFleet1000GPUs on a
// mixed H100-80GB and A100-40GB fleet.
func BenchmarkPlanFleet1000GPUsMixed(b *testing.B) {
	fleet, reqs := benchMixed(1000, 200, 1)
	for b.Loop() {
		if _, err := PlanFleet(fleet, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanFleetFill64Mixed plans exact fills of 64 empty GPUs (32
// H100-80GB, 32 A100-40GB), where the searches run.
func BenchmarkPlanFleetFill64Mixed(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	type inst struct {
		fleet []FleetGPU
		reqs  []Request
	}
	var is []inst
	for range 8 {
		f, r := randomFill(rng, []*Product{testProduct("H100-80GB"), testProduct("A100-40GB")}, 64)
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

// BenchmarkDefragment8GPUs asks for a 4g on a nearly full node of 8 H100s
// whose instances all may restart, at most two moves.
func BenchmarkDefragment8GPUs(b *testing.B) {
	p := testProduct("H100-80GB")
	fleet := make([]FleetGPU, 8)
	layouts := []string{"1g.10gb@0,1g.10gb@2,1g.10gb@4,1g.10gb@6", "2g.20gb@0,1g.10gb@3,3g.40gb@4", "4g.40gb@0,2g.20gb@4", "1g.20gb@0,2g.20gb@2,2g.20gb@4",
		"3g.40gb@0,1g.10gb@5", "1g.10gb@1,2g.20gb@2,1g.20gb@6", "7g.80gb@0", "3g.40gb@0,3g.40gb@4"}
	for i, s := range layouts {
		l, err := ParseLayout(s)
		if err != nil {
			b.Fatal(err)
		}
		for j := range l {
			l[j].InUse, l[j].Restartable = true, true
		}
		fleet[i] = FleetGPU{Node: "node-0", Index: i, Product: p, Layout: l}
	}
	for b.Loop() {
		d, err := Defragment(fleet, Request{Profile: "4g.40gb"}, WithMaxMoves(2))
		if err != nil || !d.Found {
			b.Fatalf("%+v %v", d, err)
		}
	}
}
