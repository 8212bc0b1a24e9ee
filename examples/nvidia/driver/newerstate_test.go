package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// TestReadsNewerState is the downgrade's side of the state files: what a
// newer driver wrote, with fields this one does not know, is read (a
// downgrade to this image keeps the GPUs' recorded ownership and the MIG
// devices its claims hold), never refused or re-inferred. The runtime's
// checkpoint has its own test (driver/internal/checkpoint: a newer
// version with unknown fields).
func TestReadsNewerState(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	gpus, err := f.sim.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(f.dir, "newer")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	// GPU 5 recorded dynamic by the newer driver, with fields this one
	// does not know; GPU 4 is not named, so it stays the administrator's.
	cards := fmt.Sprintf(
		`{"cards":{%q:"dynamic"},"formatVersion":2,"decidedBy":{%q:"admin"}}`,
		gpus[5].UUID,
		gpus[5].UUID,
	)
	if err := os.WriteFile(
		filepath.Join(state, lifecycle.CardsFile), []byte(cards), 0o600,
	); err != nil {
		t.Fatal(err)
	}
	// A MIG device on GPU 5 the newer driver made for a claim.
	if _, err := f.sim.CreateGPUInstance(5, 19, mig.Placement{Start: 3, Size: 1}); err != nil {
		t.Fatal(err)
	}
	journal := fmt.Sprintf(
		`{"intents":[{"card":%q,"profile":"1g.18gb","start":3,"claims":["uid-1"],"createdAt":`+
			`"2027-01-01T00:00:00Z"}],"compaction":{"every":100}}`,
		gpus[5].UUID,
	)
	if err := os.WriteFile(
		filepath.Join(state, lifecycle.JournalFile), []byte(journal), 0o600,
	); err != nil {
		t.Fatal(err)
	}
	d, err := New(f.sim, "node-1", WithStateDir(state), WithDynamicGPUs(gpus[5].UUID))
	if err != nil {
		t.Fatalf("a newer driver's state: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if _, err := d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	gs := d.hw()
	if d.dynamic(&gs[4]) || !d.dynamic(&gs[5]) {
		t.Errorf(
			"GPU 4 dynamic %v (not named), GPU 5 dynamic %v (named and recorded dynamic)",
			d.dynamic(&gs[4]),
			d.dynamic(&gs[5]),
		)
	}
	in, err := d.lc.Intents()
	if err != nil || len(in) != 1 || in[0].Card != gpus[5].UUID || in[0].Start != 3 ||
		len(in[0].Claims) != 1 ||
		in[0].Claims[0] != "uid-1" {
		t.Errorf("journal intents %+v, %v; want the claim's MIG device on GPU 5", in, err)
	}
}
