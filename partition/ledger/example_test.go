package ledger_test

import (
	"errors"
	"fmt"
	"github.com/drakit/drakit/partition/plan"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/lifecycle"
)

// A node's agent opens devices for the planner's demand; the webhook
// admits an allocation by moving its device from Open to Held; a
// re-layout that drops a free device closes it in the same write, so an
// allocation made from the older slice is refused.
func Example() {
	p, _ := mig.Lookup("H100-80GB")
	cards := []ledger.AgentCard{{Index: 0, Scheme: p.Scheme()}}
	l := &ledger.Ledger{Node: "n1", Seeded: true, Demand: plan.Demand{"3g.40gb": 2}}
	if _, err := l.Publish("n1/layout", cards); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("open:", l.Open)

	claim := ledger.ClaimRef{UID: "uid-1", Namespace: "default", Name: "one"}
	fmt.Println("admit:", l.Admit(claim, "41", []ledger.Device{l.Open[0]}))

	// The second 3g is no longer asked for: the card is laid out again.
	stale := l.Open[0]
	l.Demand = plan.Demand{"1g.10gb": 4}
	if _, err := l.Publish("n1/layout", cards); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("open:", l.Open)
	other := ledger.ClaimRef{UID: "uid-2", Namespace: "default", Name: "two"}
	var notOpen *ledger.NotOpenError
	fmt.Println(
		"stale allocation refused:",
		errors.As(l.Admit(other, "42", []ledger.Device{stale}), &notOpen),
	)
	// Output:
	// open: [n1/layout/gpu-0-3g-40gb-0 n1/layout/gpu-0-3g-40gb-4]
	// admit: <nil>
	// open: [n1/layout/gpu-0-1g-10gb-4 n1/layout/gpu-0-1g-10gb-5 n1/layout/gpu-0-1g-10gb-6]
	// stale allocation refused: true
}

// ExampleInUse builds a card's Busy set from NVML's list and the MIG
// journal, as a driver does before ledger.Agent.Sync.
func ExampleInUse() {
	p, _ := mig.Lookup("H100-80GB")
	intents := []lifecycle.Intent{{
		Key:    lifecycle.Key{Card: "GPU-0", Profile: "3g.40gb", Start: 0},
		Claims: []string{"claim-a"},
	}}
	u := ledger.InUse{Made: partition.Layout{{Profile: "1g.10gb", Start: 6}}}
	u.Journal, u.Whole = lifecycle.CardInUse(intents, "GPU-0")
	card, errs := u.Card(ledger.AgentCard{Index: 0, Scheme: p.Scheme()})
	fmt.Println(card.Busy, card.BusyWhole, errs)
	// Output: 3g.40gb@0*,1g.10gb@6* false []
}
