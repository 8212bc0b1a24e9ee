package bench

import (
	"context"
	"testing"

	"github.com/drakit/drakit/mig"
)

// TestFleetLayoutBurst: a burst of 100 1g pods on an idle fleet of 8 and
// 32 nodes, with a 7g arriving 2 s in. With the ledger and its planner
// the burst re-lays out no more nodes than it lands on, every 1g is
// placed, the fleet always offers a whole GPU while it has an idle one,
// and the 7g is placed; the decision-fence layout (every node laying out
// for the cluster's demand) re-lays out every node and leaves windows
// without a whole GPU, what issue 46 found, so the model tells them
// apart. Every allocation of the model is validated (Product.Validate)
// as it is made.
func TestFleetLayoutBurst(t *testing.T) {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	fp := DefaultFleetLayoutParams()
	for _, n := range []int{8, 32} {
		l, err := SimulateFleetBurst(
			context.Background(),
			p,
			n,
			"1g.10gb",
			100,
			"7g.80gb",
			2,
			LedgerShape,
			fp,
		)
		if err != nil {
			t.Fatal(err)
		}
		if l.Relaid > l.Landed+1 || l.NoWhole > 0 || l.Large <= 0 || l.Large > 60 {
			t.Errorf(
				"%d nodes, ledger: %+v; want relaid <= landed (+1 for the 7g), no window without a whole GPU, the 7g placed",
				n,
				l,
			)
		}
		f, err := SimulateFleetBurst(
			context.Background(),
			p,
			n,
			"1g.10gb",
			100,
			"7g.80gb",
			2,
			LayoutShape,
			fp,
		)
		if err != nil {
			t.Fatal(err)
		}
		if f.Relaid != n || f.NoWhole == 0 {
			t.Errorf(
				"%d nodes, the decision-fence layout: %+v; the model should see every node re-laid out and a window without a whole GPU",
				n,
				f,
			)
		}
		t.Logf("%d nodes: ledger %+v; decision fence %+v", n, l, f)
	}
}

// TestFleetLayoutOnline runs the online model briefly on every shape (8
// nodes, 600 pods): every allocation valid, and the ledger places pods.
func TestFleetLayoutOnline(t *testing.T) {
	p, err := mig.Lookup("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range []Shape{Counters, LayoutShape, LedgerShape} {
		r, err := SimulateFleetLayout(
			context.Background(),
			p,
			8,
			0.8,
			sh,
			600,
			1,
			DefaultFleetLayoutParams(),
		)
		if err != nil {
			t.Fatal(err)
		}
		if r.Accepted < 0.5 {
			t.Errorf("%s: compute-weighted acceptance %.3f", sh, r.Accepted)
		}
	}
}
