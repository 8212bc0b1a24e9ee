package plan_test

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
)

// TestConcurrentEntryPoints backs the package's "safe for concurrent use"
// and "deterministic": every entry point runs eight times at once on
// cards that share one scheme (and its memoized scores), and each result
// equals the one computed alone. Run it with -race.
func TestConcurrentEntryPoints(t *testing.T) {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Scheme()
	layouts := []string{"3g.40gb@0*,1g.10gb@4*", "1g.10gb@0*,1g.10gb@2*,1g.10gb@6*", "", "4g.40gb@0*"}
	var fleet []partition.FleetCard
	var layout []partition.LayoutCard
	var nodes []plan.Node
	for i, l := range layouts {
		in, err := partition.ParseLayout(l)
		if err != nil {
			t.Fatal(err)
		}
		for j := range in {
			in[j].Restartable = true
		}
		node := fmt.Sprintf("node-%d", i/2)
		fleet = append(fleet, partition.FleetCard{Node: node, Index: i % 2, Scheme: s, Layout: in})
		layout = append(layout, partition.LayoutCard{Index: i, Scheme: s, Layout: in})
		if i%2 == 0 {
			nodes = append(nodes, plan.Node{Name: node})
		}
		nodes[len(nodes)-1].Cards = append(nodes[len(nodes)-1].Cards,
			plan.NodeCard{Index: i % 2, Scheme: s, InUse: in})
	}
	reqs := []plan.Request{{Profile: "3g.40gb"}, {Profile: "2g.20gb"}, {Profile: "1g.10gb"},
		{Profile: "4g.40gb"}}
	pending := []plan.PendingRequest{{ID: "a", Profiles: []string{"3g.40gb"}},
		{ID: "b", Profiles: []string{"1g.10gb", "1g.10gb"}}}
	calls := map[string]func() (any, error){
		"PlanFleet": func() (any, error) { return plan.PlanFleet(fleet, reqs) },
		"Optimum":   func() (any, error) { return plan.Optimum(fleet[:2], reqs) },
		"Defragment": func() (any, error) {
			return plan.Defragment(fleet, plan.Request{Profile: "7g.80gb"}, plan.WithMaxMoves(2))
		},
		"PlanLayouts": func() (any, error) {
			return plan.PlanLayouts(layout, plan.Demand{"2g.20gb": 2, partition.WholeCard: 1})
		},
		"AssignFleet": func() (any, error) { return plan.AssignFleet(nodes, pending) },
		"Preference": func() (any, error) {
			return counter.Preference(fleet[:2], counter.WithFitOnly())
		},
	}
	for name, call := range calls {
		want, err := call()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var wg sync.WaitGroup
		got := make([]any, 8)
		errs := make([]error, 8)
		for i := range got {
			wg.Go(func() { got[i], errs[i] = call() })
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil || !reflect.DeepEqual(got[i], want) {
				t.Errorf("%s, run %d at once: %v, %v; want %v alone", name, i, got[i], errs[i], want)
			}
		}
	}
}
