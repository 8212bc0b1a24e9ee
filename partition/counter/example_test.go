package counter_test

import (
	"fmt"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
)

// ExampleModel_CardPools publishes a node of two cards of three placed
// units (a "pair" at 0, "one" anywhere), one pool per card, fit-only in
// the planner's order: with a "one" in use at unit 2 of card 0, card 0
// lists the devices that still fit beside it (and the one in use), not
// its whole device; card 1 lists everything, its whole device last.
func ExampleModel_CardPools() {
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "trio",
		Compute: partition.Units{Count: 3, Placed: true},
		Profiles: []partition.Profile{
			{Name: "pair", ID: 2, Compute: 2, MaxCount: 1, Placements: []partition.Placement{{Start: 0}}},
			{Name: "one", ID: 1, Compute: 1, MaxCount: 3, Placements: []partition.Placement{
				{Start: 0}, {Start: 1, Compute: 1}, {Start: 2, Compute: 2}}},
		},
		Names: partition.Names{Device: "trio"},
	})
	if err != nil {
		panic(err)
	}
	m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}})
	if err != nil {
		panic(err)
	}
	node := []partition.FleetCard{
		{Node: "n", Index: 0, Scheme: s,
			Layout: partition.Layout{{Profile: "one", Start: 2, InUse: true}}},
		{Node: "n", Index: 1, Scheme: s},
	}
	pools, err := m.CardPools("n", node, counter.WithFitOnly())
	if err != nil {
		panic(err)
	}
	for _, p := range pools {
		fmt.Print(p.Name, ":")
		for _, d := range p.Devices {
			fmt.Print(" ", d.Name())
		}
		fmt.Println()
	}
	// Output:
	// n/trio-00: trio-0-one-0 trio-0-one-1 trio-0-one-2 trio-0-pair-0
	// n/trio-01: trio-1-one-2 trio-1-one-0 trio-1-one-1 trio-1-pair-0 trio-1
}
