package plan_test

import (
	"fmt"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
)

// quadScheme is a card of 4 placed units split into halves (at 0 or 2)
// or quarters (anywhere).
func quadScheme() *partition.Scheme {
	quarters := []partition.Placement{{Start: 0}, {Start: 1, Compute: 1}, {Start: 2, Compute: 2},
		{Start: 3, Compute: 3}}
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "quad",
		Compute: partition.Units{Count: 4, Placed: true},
		Profiles: []partition.Profile{
			{Name: "half", ID: 2, Compute: 2, MaxCount: 2,
				Placements: []partition.Placement{{Start: 0}, {Start: 2, Compute: 2}}},
			{Name: "quarter", ID: 1, Compute: 1, MaxCount: 4, Placements: quarters},
		},
		Names: partition.Names{Device: "quad"},
	})
	if err != nil {
		panic(err)
	}
	return s
}

// ExamplePlanLayouts lays out a node of two cards for what is in use and
// pending, and publishes the layouts as one pool of one slice.
func ExamplePlanLayouts() {
	s := quadScheme()
	node := []partition.LayoutCard{
		{Index: 0, Scheme: s, Layout: partition.Layout{{Profile: "quarter", Start: 0, InUse: true}}},
		{Index: 1, Scheme: s},
	}
	// Two quarters pending: they go beside the one in use; the free card
	// stays whole.
	out, err := plan.PlanLayouts(node, plan.Demand{"quarter": 2})
	if err != nil {
		panic(err)
	}
	for _, c := range out {
		fmt.Printf("card %d: %s\n", c.Index, c.Layout)
	}
	m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}})
	if err != nil {
		panic(err)
	}
	sl, err := m.LayoutSlices("accel.example.com", "node-a", "node-a", 1, partition.Published(out))
	if err != nil {
		panic(err)
	}
	for _, x := range sl {
		fmt.Printf("pool %s, %d slice:", x.Spec.Pool.Name, x.Spec.Pool.ResourceSliceCount)
		for _, d := range x.Spec.Devices {
			fmt.Print(" ", d.Name)
		}
		fmt.Println()
	}
	// Output:
	// card 0: quarter@0*,quarter@1,quarter@2,quarter@3
	// card 1: -
	// pool node-a, 1 slice: quad-0-quarter-1 quad-0-quarter-2 quad-0-quarter-3 quad-0-quarter-0 quad-1
}

// ExampleDefragment finds the one move that makes room for a half on a
// card whose two quarters sit one in each half.
func ExampleDefragment() {
	s := quadScheme()
	fleet := []partition.FleetCard{{Node: "node-a", Index: 0, Scheme: s, Layout: partition.Layout{
		{Profile: "quarter", Start: 1, InUse: true, Restartable: true},
		{Profile: "quarter", Start: 2, InUse: true},
	}}}
	d, err := plan.Defragment(fleet, plan.Request{Profile: "half"}, plan.WithMaxMoves(1))
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Found, d.Moves, d.After[0].Layout)
	// Output:
	// true [node-a/0 quarter@1 -> node-a/0@3] half@0*,quarter@2*,quarter@3*
}
