package mig_test

import (
	"fmt"
	"time"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
)

func ExampleLookup() {
	p, err := mig.Lookup("NVIDIA H100 80GB HBM3")
	if err != nil {
		panic(err)
	}
	pr, _ := p.Profile("3g.40gb")
	fmt.Println(p.Name, pr.Name, pr.ID, pr.Placements())
	// Output: H100-80GB 3g.40gb 9 [{0 4} {4 4}]
}

func ExamplePlanFleet() {
	// A real driver takes the product from what NVML reports (FromNVML);
	// the built-in table serves here.
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		panic(err)
	}
	fleet := []mig.FleetGPU{
		{Node: "node-a", Index: 0, Product: p, Layout: mig.Layout{{Profile: "4g.40gb", Start: 0, InUse: true}}},
		{Node: "node-a", Index: 1, Product: p},
	}
	plan, err := mig.PlanFleet(fleet, []mig.Request{{Profile: "1g.10gb"}, {Profile: "2g.20gb"}})
	if err != nil {
		panic(err)
	}
	for _, op := range plan.Operations {
		fmt.Println(op)
	}
	for _, g := range plan.After {
		fmt.Println(p.Picture(fmt.Sprintf("gpu-%d", g.Index), g.Layout))
	}
	// Output:
	// create  node-a/gpu-0 2g.20gb@4 (request 1)
	// create  node-a/gpu-0 1g.10gb@6 (request 0)
	// gpu-0        |4g.40gb*                           |2g.20gb*         |1g.10gb*|........|
	// gpu-1        |........|........|........|........|........|........|........|........|
}

func ExampleNewCounterModel() {
	p, _ := mig.Lookup("A30-24GB")
	m, err := mig.NewCounterModel([]mig.GPU{{Index: 0, Product: p}})
	if err != nil {
		panic(err)
	}
	for _, d := range m.Devices[:4] {
		fmt.Println(d.Name)
	}
	fmt.Println(len(m.Devices), "devices,", len(m.CounterSets[0].Counters), "counters")
	// Output:
	// gpu-0
	// gpu-0-1g-6gb-0
	// gpu-0-1g-6gb-1
	// gpu-0-1g-6gb-2
	// 14 devices, 6 counters
}

// The heuristic alone places 55 of these 56 compute slices on 8 H100s;
// the exact search finds the complete packing and says so.
func ExamplePlanFleet_exactSearch() {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		panic(err)
	}
	var fleet []mig.FleetGPU
	for i := 0; i < 8; i++ {
		fleet = append(fleet, mig.FleetGPU{Node: "node-a", Index: i, Product: p})
	}
	var reqs []mig.Request
	for _, c := range []struct {
		profile string
		n       int
	}{{"1g.10gb", 10}, {"2g.20gb", 6}, {"3g.40gb", 5}, {"4g.40gb", 3}, {"7g.80gb", 1}} {
		for j := 0; j < c.n; j++ {
			reqs = append(reqs, mig.Request{Profile: c.profile})
		}
	}
	for _, budget := range []time.Duration{0, mig.DefaultSearchBudget} {
		plan, err := mig.PlanFleet(fleet, reqs, plan.WithSearchBudget(budget))
		if err != nil {
			panic(err)
		}
		fmt.Printf("budget %s: %d compute slices, %d unplaced, search ran %v, optimal %v\n",
			budget, plan.PlacedCompute, len(plan.Unplaced), plan.Search.Ran, plan.Search.Optimal)
	}
	// Output:
	// budget 0s: 55 compute slices, 1 unplaced, search ran false, optimal false
	// budget 500ms: 56 compute slices, 0 unplaced, search ran true, optimal true
}

// A driver publishes the counter model like any inventory: Pools gives
// device pools in the planner's order, which device splits under the API
// limits. Devices map back to GPU, profile and placement by name.
func ExampleCounterModel_Pools() {
	p, _ := mig.Lookup("H200-141GB")
	var gpus []mig.GPU
	var node []mig.FleetGPU
	for i := 0; i < 8; i++ {
		gpus = append(gpus, mig.GPU{Index: i, Product: p, Profiles: mig.DefaultProfiles(p)})
		node = append(node, mig.FleetGPU{Node: "node-a", Index: i, Product: p})
	}
	node[0].Layout = mig.Layout{{Profile: "3g.71gb", Start: 0, InUse: true}}
	model, err := mig.NewCounterModel(gpus)
	if err != nil {
		panic(err)
	}
	pref, err := mig.Preference(node, mig.WithProfiles(mig.DefaultProfiles))
	if err != nil {
		panic(err)
	}
	if model, err = model.Reorder(pref); err != nil {
		panic(err)
	}
	inv := &device.Inventory{Driver: "gpu.example.com", Pools: model.Pools("node-a")}
	for _, d := range inv.Pools[0].Devices[8:10] {
		ref, _ := mig.ParseDeviceName(d.Name())
		fmt.Printf("%s: GPU %d, %s at %d\n", d.Name(), ref.GPU, ref.Profile, ref.Start)
	}
	res, err := inv.DriverResources()
	if err != nil {
		panic(err)
	}
	for _, s := range res.Pools["node-a"].Slices {
		fmt.Printf("slice: %d counter sets, %d devices\n", len(s.SharedCounters), len(s.Devices))
	}
	// Output:
	// gpu-0-1g-18gb-6: GPU 0, 1g.18gb at 6
	// gpu-0-1g-18gb-4: GPU 0, 1g.18gb at 4
	// slice: 8 counter sets, 0 devices
	// slice: 0 counter sets, 64 devices
	// slice: 0 counter sets, 56 devices
}

func ExampleDefaultProfiles() {
	for _, name := range []string{"H200-141GB", "A30-24GB"} {
		p, _ := mig.Lookup(name)
		fmt.Println(name, mig.DefaultProfiles(p))
	}
	// Output:
	// H200-141GB [1g.18gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb]
	// A30-24GB [1g.6gb 2g.12gb 4g.24gb]
}

// A dynamic-MIG driver's publication after every change: the default
// profiles, the planner's order, only what can still be allocated. GPU 0
// runs a 3g and a 4g instance, so it is full: only its two in-use
// devices remain, and GPU 1's 1g placements come first.
func ExampleCounterModel_PreferredPools() {
	p, _ := mig.Lookup("H100-80GB")
	model, err := mig.NewCounterModel([]mig.GPU{
		{Index: 0, Product: p, Profiles: mig.DefaultProfiles(p)},
		{Index: 1, Product: p, Profiles: mig.DefaultProfiles(p)},
	})
	if err != nil {
		panic(err)
	}
	node := []mig.FleetGPU{
		{Node: "node-a", Index: 0, Product: p, Layout: mig.Layout{{Profile: "4g.40gb", Start: 0, InUse: true}, {Profile: "3g.40gb", Start: 4, InUse: true}}},
		{Node: "node-a", Index: 1, Product: p},
	}
	pools, err := model.PreferredPools("node-a", node, counter.WithFitOnly())
	if err != nil {
		panic(err)
	}
	fmt.Println(len(model.Devices), "devices in the model,", len(pools[0].Devices), "published")
	for _, d := range pools[0].Devices[:3] {
		fmt.Println(d.Name())
	}
	// Output:
	// 30 devices in the model, 17 published
	// gpu-1
	// gpu-1-1g-10gb-6
	// gpu-1-1g-10gb-4
}

func ExampleDefragment() {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		panic(err)
	}
	// GPU 0 runs four restartable 1g instances at placements 0, 2, 4 and
	// 6, so that no four free memory slices start at 0. GPU 1
	// runs a 4g and a 1g that must stay where they are.
	one := func(start int) mig.Instance {
		return mig.Instance{Profile: "1g.10gb", Start: start, InUse: true, Restartable: true}
	}
	fleet := []mig.FleetGPU{
		{Node: "node-a", Index: 0, Product: p, Layout: mig.Layout{one(0), one(2), one(4), one(6)}},
		{Node: "node-a", Index: 1, Product: p, Layout: mig.Layout{{Profile: "4g.40gb", Start: 0, InUse: true}, {Profile: "1g.10gb", Start: 4, InUse: true}}},
	}
	d, err := mig.Defragment(fleet, mig.Request{Profile: "4g.40gb"}, plan.WithMaxMoves(2))
	if err != nil {
		panic(err)
	}
	fmt.Println("found:", d.Found, "complete:", d.Complete)
	for _, m := range d.Moves {
		fmt.Println("move", m)
	}
	fmt.Printf("4g.40gb goes to %s/gpu-%d@%d\n", d.Target.Node, d.Target.GPU, d.Target.Start)
	for _, g := range d.After {
		fmt.Println(p.Picture(fmt.Sprintf("gpu-%d", g.Index), g.Layout))
	}
	// Output:
	// found: true complete: true
	// move node-a/gpu-0 1g.10gb@0 -> node-a/gpu-0@5
	// move node-a/gpu-0 1g.10gb@2 -> node-a/gpu-1@5
	// 4g.40gb goes to node-a/gpu-0@0
	// gpu-0        |4g.40gb*                           |1g.10gb*|1g.10gb*|1g.10gb*|........|
	// gpu-1        |4g.40gb*                           |1g.10gb*|1g.10gb*|........|........|
}

// A node of 12 H100s published as one pool per GPU: a MIG change on one
// GPU rewrites that GPU's pool only, one device slice, which the resource
// slice controller updates in place, so no pool ever goes incomplete.
// Zero-padded names keep the allocator's walk (pools by name) in GPU
// order; each pool is one counter slice and one device slice.
func ExampleCounterModel_GPUPools() {
	p, _ := mig.Lookup("H100-80GB")
	var gpus []mig.GPU
	var node []mig.FleetGPU
	for i := range 12 {
		gpus = append(gpus, mig.GPU{Index: i, Product: p, Profiles: mig.DefaultProfiles(p)})
		node = append(node, mig.FleetGPU{Node: "node-a", Index: i, Product: p})
	}
	node[10].Layout = mig.Layout{{Profile: "3g.40gb", Start: 4, InUse: true}}
	model, err := mig.NewCounterModel(gpus)
	if err != nil {
		panic(err)
	}
	pools, err := model.GPUPools("node-a", node, counter.WithFitOnly())
	if err != nil {
		panic(err)
	}
	for _, pl := range pools[8:] {
		one := &device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{pl}}
		fmt.Printf("%s: %d devices, first %s, %d slices\n", pl.Name, len(pl.Devices), pl.Devices[0].Name(), len(one.ResourceSlices("node-a")))
	}
	// Output:
	// node-a/gpu-08: 15 devices, first gpu-8, 2 slices
	// node-a/gpu-09: 15 devices, first gpu-9, 2 slices
	// node-a/gpu-10: 9 devices, first gpu-10-1g-10gb-0, 2 slices
	// node-a/gpu-11: 15 devices, first gpu-11, 2 slices
}
