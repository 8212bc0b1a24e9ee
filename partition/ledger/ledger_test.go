package ledger_test

import (
	"errors"
	"math/rand"
	"slices"
	"testing"

	"cmp"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
)

func h100(t testing.TB) *partition.Scheme {
	t.Helper()
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	return p.Scheme()
}

func dev(name string) ledger.Device { return ledger.Device{Pool: "n1/layout", Name: name} }

var claimA = ledger.ClaimRef{UID: "a", Namespace: "ns", Name: "a"}
var claimB = ledger.ClaimRef{UID: "b", Namespace: "ns", Name: "b"}

// TestAdmit: an Open device moves to Held; the same claim may be
// admitted again (a retried write); another claim, a device that is not
// Open and a ledger not seeded are refused, changing nothing.
func TestAdmit(t *testing.T) {
	l := &ledger.Ledger{
		Node:   "n1",
		Seeded: true,
		Open:   []ledger.Device{dev("gpu-0-1g-10gb-0"), dev("gpu-0-1g-10gb-1")},
	}
	if err := l.Admit(claimA, "10", []ledger.Device{dev("gpu-0-1g-10gb-0")}); err != nil {
		t.Fatal(err)
	}
	if l.IsOpen(dev("gpu-0-1g-10gb-0")) ||
		!slices.Equal(l.Holder(dev("gpu-0-1g-10gb-0")), []ledger.ClaimRef{claimA}) {
		t.Fatalf("after Admit: open %v held %v", l.Open, l.Held)
	}
	if err := l.Admit(claimA, "12", []ledger.Device{dev("gpu-0-1g-10gb-0")}); err != nil {
		t.Fatalf("a retried write of the same claim: %v", err)
	}
	before := l.Clone()
	var notOpen *ledger.NotOpenError
	err := l.Admit(claimB, "11", []ledger.Device{dev("gpu-0-1g-10gb-0"), dev("gpu-0-1g-10gb-1")})
	if !errors.As(err, &notOpen) ||
		!slices.Equal(notOpen.Devices, []ledger.Device{dev("gpu-0-1g-10gb-0")}) {
		t.Fatalf("another claim's allocation of a held device: %v", err)
	}
	if diff := gocmp.Diff(before, l); diff != "" {
		t.Fatalf("a refusal changed the ledger (-before +after):\n%s", diff)
	}
	unseeded := &ledger.Ledger{Node: "n2", Open: []ledger.Device{dev("gpu-0")}}
	if err := unseeded.Admit(claimA, "1", []ledger.Device{dev("gpu-0")}); !errors.Is(
		err,
		ledger.ErrNotSeeded,
	) {
		t.Fatalf("unseeded: %v", err)
	}
}

// TestObserve: an entry goes only when the claim is seen at a newer
// resourceVersion without its devices, or deleted; an allocation seen
// that no entry names is recorded (allocated without Admit).
func TestObserve(t *testing.T) {
	l := &ledger.Ledger{
		Node:   "n1",
		Seeded: true,
		Open:   []ledger.Device{dev("gpu-0-1g-10gb-0"), dev("gpu-0-1g-10gb-1")},
	}
	if err := l.Admit(claimA, "10", []ledger.Device{dev("gpu-0-1g-10gb-0")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    ledger.Observation
		keep bool
	}{
		{"same version, not allocated (the write may still commit)", ledger.Observation{Claim: claimA, ResourceVersion: "10"}, true},
		{"older version", ledger.Observation{Claim: claimA, ResourceVersion: "9"}, true},
		{"newer, allocated with it", ledger.Observation{Claim: claimA, ResourceVersion: "11",
			Allocated: []ledger.Device{dev("gpu-0-1g-10gb-0")}}, true},
		{"another claim", ledger.Observation{Claim: claimB, ResourceVersion: "99"}, true},
		{"newer, not allocated", ledger.Observation{Claim: claimA, ResourceVersion: "11"}, false},
	} {
		c := l.Clone()
		c.Observe(tc.o, false)
		if got := len(c.Held) == 1; got != tc.keep {
			t.Errorf("%s: held %v, want kept %v", tc.name, c.Held, tc.keep)
		}
	}
	c := l.Clone()
	c.Observe(ledger.Observation{Claim: claimA, Deleted: true}, false)
	if len(c.Held) != 0 {
		t.Errorf("deleted: held %v", c.Held)
	}
	c = l.Clone()
	changed, rec := c.Observe(ledger.Observation{Claim: claimB, ResourceVersion: "20",
		Allocated: []ledger.Device{dev("gpu-0-1g-10gb-1")}}, true)
	if !changed || !slices.Equal(rec, []ledger.Device{dev("gpu-0-1g-10gb-1")}) ||
		c.IsOpen(dev("gpu-0-1g-10gb-1")) {
		t.Errorf("record: changed %v recorded %v open %v", changed, rec, c.Open)
	}
}

// TestPublishKeepsInvariant: from random held, busy and open states and
// random demand, Publish leaves Held ∪ Busy ∪ Open valid on every card
// (Check), never opens a held device, and Layout lists every held
// device; publishing twice changes nothing more.
func TestPublishKeepsInvariant(t *testing.T) {
	s := h100(t)
	layouts, err := s.Layouts()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	schemes := func(string) (*partition.Scheme, error) { return s, nil }
	names := s.ProfileNames()
	for i := 0; i < 300; i++ {
		l := &ledger.Ledger{Node: "n1", Seeded: true, Demand: plan.Demand{}}
		cards := make([]ledger.AgentCard, 3)
		for c := range cards {
			cards[c] = ledger.AgentCard{Index: c, Scheme: s}
			full := layouts[rng.Intn(len(layouts))]
			for _, in := range full {
				name, err := s.DeviceName(c, in.Profile, in.Start)
				if err != nil {
					t.Fatal(err)
				}
				switch rng.Intn(4) {
				case 0:
					l.Held = append(
						l.Held,
						ledger.Hold{
							Claim:           ledger.ClaimRef{UID: types.UID("u" + name)},
							ResourceVersion: "5",
							Devices:         []ledger.Device{dev(name)},
						},
					)
				case 1:
					cards[c].Busy = append(cards[c].Busy, in)
				case 2: // a stale open device: Publish must check it
					l.Open = append(l.Open, dev(name))
				}
			}
		}
		slices.SortFunc(l.Open, func(a, b ledger.Device) int { return cmp.Compare(a.Name, b.Name) })
		l.Open = slices.Compact(l.Open)
		for k := rng.Intn(4); k > 0; k-- {
			l.Demand[names[rng.Intn(len(names))]] += 1 + rng.Intn(4)
		}
		if rng.Intn(4) == 0 {
			l.Demand[partition.WholeCard] = 1
		}
		if _, err := l.Publish("n1/layout", cards); err != nil {
			t.Fatal(err)
		}
		if err := l.Check(schemes); err != nil {
			t.Fatalf("case %d: %v\n%+v", i, err, l)
		}
		again := l.Clone()
		if _, err := again.Publish("n1/layout", cards); err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(l.Open, again.Open); diff != "" {
			t.Errorf("case %d: a second Publish changed Open (-first +second):\n%s", i, diff)
		}
		pub, err := l.Layout("n1/layout", cards)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, c := range pub {
			if !c.Withheld && len(c.Layout) == 0 {
				listed[s.CardDeviceName(c.Index)] = true
			}
			for _, in := range c.Layout {
				n, _ := s.DeviceName(c.Index, in.Profile, in.Start)
				listed[n] = true
			}
		}
		for _, d := range l.HeldDevices() {
			if !listed[d.Name] {
				t.Errorf("case %d: held %s not published", i, d)
			}
		}
	}
}

// TestPublishWithholdsForeign: a card some claim holds a device of
// through another pool (an earlier publication's) opens nothing.
func TestPublishWithholdsForeign(t *testing.T) {
	s := h100(t)
	l := &ledger.Ledger{
		Node:   "n1",
		Seeded: true,
		Held: []ledger.Hold{{Claim: claimA, ResourceVersion: "3",
			Devices: []ledger.Device{{Pool: "n1/gpu-00", Name: "gpu-0-1g-10gb-0"}}}},
	}
	w, err := l.Publish(
		"n1/layout",
		[]ledger.AgentCard{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if w[0] == "" || !slices.Equal(l.Open, []ledger.Device{dev("gpu-1")}) {
		t.Fatalf("withheld %v, open %v: want card 0 withheld and card 1 open whole", w, l.Open)
	}
}
