package driver_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/cdi"
	. "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// reconcilingHW is the fake hardware with a Reconciler that remembers
// what it was told.
type reconcilingHW struct {
	Preparer
	held [][]HeldClaim
}

func (r *reconcilingHW) Reconcile(_ context.Context, held []HeldClaim) error {
	r.held = append(r.held, held)
	return nil
}

// bootEngine builds an engine on e's folders that sees boot ID boot and
// recovers.
func (e *env) bootEngine(t *testing.T, p Preparer, boot string) *TestEngine {
	t.Helper()
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := cdi.NewWriter(e.cdiDir, testDriver, CDIClass)
	if err != nil {
		t.Fatal(err)
	}
	eng := NewTestEngine(testDriver, store, specs, p)
	eng.SetBootID(boot)
	if err := eng.Recover(ctxFor(t)); err != nil {
		t.Fatalf("recover: %v", err)
	}
	return eng
}

// TestRebootUndoesEveryClaim: a restart under the same boot ID keeps the
// prepared claims; one under a new boot ID (the node rebooted) undoes
// every claim through the vendor's unprepare before the engine serves, so
// the next prepare does the work afresh.
func TestRebootUndoesEveryClaim(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	rhw := &reconcilingHW{Preparer: e.hw}
	e.eng = e.bootEngine(t, rhw, "boot-1")
	claim := testClaim("c1", alloc{request: "gpu", device: "dev-0"})
	if r := e.eng.Prepare(ctx, claim); r.Err != nil {
		t.Fatalf("prepare: %v", r.Err)
	}

	e.eng = e.bootEngine(t, rhw, "boot-1") // a restart
	if d := cmp.Diff(map[types.UID]checkpoint.State{"c1": checkpoint.StatePrepared}, e.records(t)); d != "" {
		t.Fatalf("checkpoint after a restart (-want +got):\n%s", d)
	}
	if holders, _ := e.hw.Holders(); len(holders) != 1 {
		t.Fatalf("devices after a restart: %v, want dev-0 held", holders)
	}

	e.eng = e.bootEngine(t, rhw, "boot-2") // a reboot
	if recs := e.records(t); len(recs) != 0 {
		t.Errorf("checkpoint after a reboot: %v, want empty", recs)
	}
	if holders, _ := e.hw.Holders(); len(holders) != 0 {
		t.Errorf("devices after a reboot: %v, want none (undone by the vendor's unprepare)", holders)
	}
	if files := e.specFiles(t); len(files) != 0 {
		t.Errorf("CDI specs after a reboot: %v", files)
	}
	if r := e.eng.Prepare(ctx, claim); r.Err != nil {
		t.Fatalf("prepare after the reboot: %v", r.Err)
	}
	if holders, _ := e.hw.Holders(); len(holders) != 1 {
		t.Errorf("devices after the prepare that followed the reboot: %v, want dev-0 held", holders)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}

	// The reconcile hook saw, at each start, what the runtime held.
	var got [][]string
	for _, h := range rhw.held {
		var s []string
		for _, c := range h {
			for _, d := range c.Devices {
				s = append(s, string(c.UID)+"/"+d.Device)
			}
		}
		got = append(got, s)
	}
	if d := cmp.Diff([][]string{nil, {"c1/dev-0"}, nil}, got); d != "" {
		t.Errorf("held claims told to the reconciler at each start (-want +got):\n%s", d)
	}
}
