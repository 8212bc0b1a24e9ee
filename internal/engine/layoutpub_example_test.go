package engine_test

import (
	"fmt"
	"time"

	"github.com/drakit/drakit/internal/engine"
)

// ExamplePlanLayouts lays out a node of two cards for what is in use and
// pending, publishes it as one pool of one slice, and shows the fence of
// a re-layout.
func ExamplePlanLayouts() {
	s := acmeScheme()
	node := []engine.LayoutCard{
		{Index: 0, Scheme: s, Layout: engine.Layout{{Profile: "solo", Start: 0, InUse: true}}},
		{Index: 1, Scheme: s},
	}
	// Two solos pending: they go beside the one in use; the free card
	// stays whole.
	out, err := engine.PlanLayouts(node, engine.Demand{"solo": 2})
	if err != nil {
		panic(err)
	}
	for _, c := range out {
		fmt.Printf("card %d: %s\n", c.Index, c.Layout)
	}
	m, err := engine.NewCounterModel([]engine.Card{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}})
	if err != nil {
		panic(err)
	}
	sl, err := m.LayoutSlices("accel.example.com", "node-a", "node-a", 1, out)
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

	// A publisher retires the free whole card before partitions over it
	// appear, and publishes them after the fence.
	pub, err := engine.NewLayoutPublisher([]engine.Card{{Index: 1, Scheme: s}})
	if err != nil {
		panic(err)
	}
	t0 := time.Unix(0, 0)
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 1200 * time.Millisecond} {
		demand := engine.Demand{"duo": 1}
		if at == 0 {
			demand = nil
		}
		v, err := pub.Next(nil, demand, t0.Add(at))
		if err != nil {
			panic(err)
		}
		c := v.Cards[0]
		switch {
		case c.Withheld:
			fmt.Printf("%v: version %d: nothing (held back until %v)\n", at, v.Version, v.Retry.Sub(t0).Round(time.Millisecond))
		case len(c.Layout) == 0:
			fmt.Printf("%v: version %d: whole card\n", at, v.Version)
		default:
			fmt.Printf("%v: version %d: %s\n", at, v.Version, c.Layout)
		}
	}
	// Output:
	// card 0: solo@0*,solo@1,solo@2,solo@3
	// card 1: -
	// pool node-a, 1 slice: acme-0-solo-1 acme-0-solo-2 acme-0-solo-3 acme-0-solo-0 acme-1
	// 0s: version 1: whole card
	// 100ms: version 2: nothing (held back until 1.1s)
	// 1.2s: version 3: duo@0,duo@2
}
