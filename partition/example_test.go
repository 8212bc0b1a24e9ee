package partition_test

import (
	"fmt"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
)

// An accelerator whose tool splits a card of 4 cores and 4 memory banks
// into partitions of one core and one bank (the bank next to the core)
// or two cores and two banks, all in the vendor's own names.
func acmeScheme() *partition.Scheme {
	const gib = int64(1) << 30
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "acme-a4",
		Compute: partition.Units{Count: 4, Placed: true},
		Memory:  partition.Units{Count: 4, Placed: true},
		Profiles: []partition.Profile{
			{Name: "duo", ID: 2, Compute: 2, Memory: 2, MemoryBytes: 32 * gib, MaxCount: 2, Placements: []partition.Placement{
				{Start: 0, Compute: 0, Memory: 2}, {Start: 2, Compute: 2, Memory: 0}}},
			{Name: "solo", ID: 1, Compute: 1, Memory: 1, MemoryBytes: 16 * gib, MaxCount: 4, Placements: []partition.Placement{
				{Start: 0, Compute: 0, Memory: 1}, {Start: 1, Compute: 1, Memory: 0}, {Start: 2, Compute: 2, Memory: 3}, {Start: 3, Compute: 3, Memory: 2}}},
		},
		Names: partition.Names{
			Card: "accelerator", MemoryUnit: "bank", ComputeUnit: "core",
			Device: "acme", MemoryCounter: "bank-", ComputeCounter: "core-",
			CardType: "accelerator", PartitionType: "slice",
		},
	})
	if err != nil {
		panic(err)
	}
	return s
}

func Example() {
	s := acmeScheme()

	// The rules, with errors in the vendor's words.
	fmt.Println(s.Validate(partition.Layout{{Profile: "duo", Start: 0}, {Profile: "solo", Start: 3}}))

	// The counter model of a node with two cards: what the scheduler
	// allocates from (hand m.Pools(node) to a device.Inventory).
	m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(m.Devices), "devices, counter sets", m.CounterSets[0].Name, m.CounterSets[1].Name)

	// Card 0 runs a solo on core 1 and bank 0, which leaves it room for
	// no duo. Publish what can still be allocated, in the planner's
	// order: the scheduler's first fit for a solo is then card 0's core
	// 0, and card 1 stays whole for duos.
	node := []partition.FleetCard{
		{Node: "node-a", Index: 0, Scheme: s, Layout: partition.Layout{{Profile: "solo", Start: 1, InUse: true}}},
		{Node: "node-a", Index: 1, Scheme: s},
	}
	order, err := counter.Preference(node, counter.WithFitOnly())
	if err != nil {
		panic(err)
	}
	fmt.Println(order)

	// A plan for a fleet: two duos and a solo.
	p, err := plan.PlanFleet(node, []plan.Request{{Profile: "duo"}, {Profile: "duo"}, {Profile: "solo"}})
	if err != nil {
		panic(err)
	}
	for _, op := range p.Operations {
		fmt.Println(op)
	}
	fmt.Println(s.Picture("acme-0", p.After[0].Layout))
	// Output:
	// validate layout on acme-a4: instances[1] (solo@3): placements overlap with instances[0] (duo@0) on bank 2
	// 14 devices, counter sets acme-0-counters acme-1-counters
	// [acme-0-solo-0 acme-0-solo-2 acme-0-solo-3 acme-1-solo-0 acme-1-solo-1 acme-1-solo-2 acme-1-solo-3 acme-0-solo-1 acme-1-duo-0 acme-1-duo-2 acme-1]
	// create  node-a/0 solo@0 (request 2)
	// create  node-a/1 duo@0 (request 0)
	// create  node-a/1 duo@2 (request 1)
	// acme-0       |solo*   |solo*   |........|........|
	//              |solo*   |solo*   |........|........|
}

// A card whose compute partition mode (how many partitions its 8 compute
// dies form) is set for the whole card, independently of its memory mode
// (NPS1: memory interleaved over every HBM stack and shared; NPS4: each
// die's stack its own). Each profile is one combination and names it as
// its Mode, so a card holds partitions of one combination only; the
// counter model keeps it so with one mode counter per die.
func Example_modes() {
	const gib = int64(1) << 30
	parts := func(n int, stacks bool) []partition.Placement {
		var out []partition.Placement
		for i := 0; i < n; i++ {
			pl := partition.Placement{Start: i, Compute: i * 8 / n}
			if stacks {
				pl.Memory = i
			}
			out = append(out, pl)
		}
		return out
	}
	profile := func(name string, n int, stacks bool) partition.Profile {
		pr := partition.Profile{Name: name, Mode: name, Compute: 8 / n, MemoryBytes: 192 * gib / int64(n), MaxCount: n, Placements: parts(n, stacks)}
		if stacks {
			pr.Memory = 1
		}
		return pr
	}
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "accel-192g",
		Compute: partition.Units{Count: 8, Placed: true},
		Memory:  partition.Units{Count: 8, Placed: true},
		Profiles: []partition.Profile{
			profile("SPX/NPS1", 1, false), profile("DPX/NPS1", 2, false), profile("QPX/NPS1", 4, false),
			profile("CPX/NPS1", 8, false), profile("CPX/NPS4", 8, true),
		},
		Names: partition.Names{Device: "xcp", ComputeUnit: "XCD", MemoryUnit: "HBM stack", ComputeCounter: "xcd-", MemoryCounter: "hbm-"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Modes())
	fmt.Println(s.Validate(partition.Layout{{Profile: "CPX/NPS4", Start: 0}, {Profile: "CPX/NPS4", Start: 7}}))
	fmt.Println(s.Validate(partition.Layout{{Profile: "CPX/NPS4", Start: 0}, {Profile: "CPX/NPS1", Start: 7}}))
	m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: s}})
	if err != nil {
		panic(err)
	}
	mode := m.CounterSets[0].Counters["mode-0"]
	fmt.Println(len(m.CounterSets[0].Counters), "counters, mode-0 holds", mode.Value.String())
	// Output:
	// [CPX/NPS1 CPX/NPS4 QPX/NPS1 DPX/NPS1 SPX/NPS1]
	// <nil>
	// validate layout on accel-192g: instances[1] (CPX/NPS1@7): card-wide modes differ: CPX/NPS1 needs mode CPX/NPS1, instances[0] (CPX/NPS4) mode CPX/NPS4
	// 24 counters, mode-0 holds 344
}
