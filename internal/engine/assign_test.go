package engine_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
	"github.com/drakit/drakit/mig"
)

func h100Scheme(t testing.TB) *partition.Scheme {
	t.Helper()
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	return p.Scheme()
}

// idleFleet is n nodes of 8 idle H100s, offered whole.
func idleFleet(s *partition.Scheme, n int) []partition.Node {
	var out []partition.Node
	for i := 0; i < n; i++ {
		node := partition.Node{Name: fmt.Sprintf("node-%03d", i)}
		for c := 0; c < 8; c++ {
			node.Cards = append(
				node.Cards,
				partition.NodeCard{Index: c, Scheme: s, FreeWhole: true},
			)
		}
		out = append(out, node)
	}
	return out
}

func burst(n int, profile string) []partition.PendingRequest {
	var out []partition.PendingRequest
	for i := 0; i < n; i++ {
		out = append(
			out,
			partition.PendingRequest{ID: fmt.Sprintf("r%03d", i), Profiles: []string{profile}},
		)
	}
	return out
}

// TestAssignFleetBurstLandsOnFewNodes: a 100-pod 1g burst on an idle
// fleet of 8, 32 and 128 nodes is laid out on 2 nodes (56 1g a node),
// whatever the fleet's size; a 7g arriving with it gets a whole idle
// card of a third node at once.
func TestAssignFleetBurstLandsOnFewNodes(t *testing.T) {
	s := h100Scheme(t)
	for _, n := range []int{8, 32, 128} {
		reqs := append(
			burst(100, "1g.10gb"),
			partition.PendingRequest{ID: "big", Profiles: []string{"7g.80gb"}},
		)
		a, err := partition.AssignFleet(idleFleet(s, n), reqs)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Unplaced) > 0 || len(a.Relaid) > 3 {
			t.Errorf("%d nodes: relaid %v, unplaced %v", n, a.Relaid, a.Unplaced)
		}
		total := 0
		for _, d := range a.Demand {
			total += d["1g.10gb"]
		}
		if total != 100 {
			t.Errorf("%d nodes: %d 1g assigned, want 100: %v", n, total, a.Demand)
		}
	}
}

// TestAssignFleetPrefersOpenDevices: a request whose profile a node
// offers free now goes there (no re-layout), and candidates are
// respected.
func TestAssignFleetPrefersOpenDevices(t *testing.T) {
	s := h100Scheme(t)
	nodes := idleFleet(s, 3)
	nodes[2].Cards[5] = partition.NodeCard{
		Index:  5,
		Scheme: s,
		InUse:  partition.Layout{{Profile: "3g.40gb", Start: 0, InUse: true}},
		Free:   partition.Layout{{Profile: "2g.20gb", Start: 4}, {Profile: "1g.10gb", Start: 6}},
	}
	a, err := partition.AssignFleet(nodes, []partition.PendingRequest{
		{ID: "two", Profiles: []string{"2g.20gb"}},
		{ID: "pinned", Profiles: []string{"1g.10gb"}, Nodes: []string{"node-001"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Placed["two"] != "node-002" || a.Placed["pinned"] != "node-001" ||
		!slices.Equal(a.Relaid, []string{"node-001"}) {
		t.Errorf("placed %v relaid %v", a.Placed, a.Relaid)
	}
}

// TestAssignFleetNoStarvation: on a fleet where every card runs a 1g, a
// 7g fits nowhere; once it has waited the aging it reserves one card
// (the least used), and the 50 younger 1g requests are not assigned to
// that card: 42 fit on the others. A 3g that has waited longer than younger whole-card requests is
// planned before them, so whole cards do not take every idle card while
// it waits.
func TestAssignFleetNoStarvation(t *testing.T) {
	s := h100Scheme(t)
	nodes := idleFleet(s, 1)
	for c := range nodes[0].Cards {
		nodes[0].Cards[c] = partition.NodeCard{Index: c, Scheme: s,
			InUse: partition.Layout{{Profile: "1g.10gb", Start: c % 7, InUse: true}}}
	}
	reqs := append(
		[]partition.PendingRequest{{ID: "big", Profiles: []string{"7g.80gb"}, Waited: time.Minute}},
		burst(50, "1g.10gb")...)
	a, err := partition.AssignFleet(nodes, reqs)
	if err != nil {
		t.Fatal(err)
	}
	res := a.Reserved["node-000"]
	if len(res) != 1 || res[0].Profile != "7g.80gb" {
		t.Fatalf("reserved %v, want one card for 7g.80gb", res)
	}
	if got := a.Demand["node-000"]["1g.10gb"]; got != 7*6 {
		t.Errorf(
			"1g assigned %d, want the 42 free slots of the 7 cards not reserved: %v",
			got,
			a.Demand,
		)
	}

	idle := idleFleet(s, 1)
	reqs = []partition.PendingRequest{
		{ID: "old-3g", Profiles: []string{"3g.40gb"}, Waited: time.Minute},
	}
	for i := 0; i < 8; i++ {
		reqs = append(
			reqs,
			partition.PendingRequest{
				ID:       fmt.Sprint("whole-", i),
				Profiles: []string{partition.WholeCard},
			},
		)
	}
	a, err = partition.AssignFleet(idle, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if a.Placed["old-3g"] == "" || len(a.Unplaced) != 1 {
		t.Errorf(
			"placed %v unplaced %v: want the aged 3g placed and one whole card short",
			a.Placed,
			a.Unplaced,
		)
	}
}
