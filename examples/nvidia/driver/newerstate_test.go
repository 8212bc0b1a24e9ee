package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/drakit/drakit/mig"
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
	// GPU 4 recorded static by the newer driver (this one would make it
	// dynamic at first sight: MIG mode on, no MIG devices).
	own := fmt.Sprintf(`{"gpus":{%q:"static",%q:"dynamic"},"formatVersion":2,"decidedBy":{"gpu-4":"admin"}}`, gpus[4].UUID, gpus[5].UUID)
	if err := os.WriteFile(filepath.Join(state, ownershipFile), []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	// A MIG device on GPU 5 the newer driver made for a claim.
	if _, err := f.sim.CreateGPUInstance(5, 19, mig.Placement{Start: 3, Size: 1}); err != nil {
		t.Fatal(err)
	}
	journal := fmt.Sprintf(`{"intents":[{"gpu":5,"gpuUUID":%q,"profileID":19,"start":3,"claims":["uid-1"],"createdAt":"2027-01-01T00:00:00Z"}],"compaction":{"every":100}}`, gpus[5].UUID)
	if err := os.WriteFile(filepath.Join(state, "mig-intents.json"), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := New(f.sim, "node-1", WithStateDir(state))
	if err != nil {
		t.Fatalf("a newer driver's state: %v", err)
	}
	if _, err := d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	if d.gpus[4].dynamic || !d.gpus[5].dynamic {
		t.Errorf("GPU 4 dynamic %v (recorded static), GPU 5 dynamic %v (recorded dynamic)", d.gpus[4].dynamic, d.gpus[5].dynamic)
	}
	j, err := OpenJournal(filepath.Join(state, "mig-intents.json"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := j.Intents()
	if err != nil || len(in) != 1 || in[0].GPU != 5 || in[0].Start != 3 || len(in[0].Claims) != 1 || in[0].Claims[0] != "uid-1" {
		t.Errorf("journal intents %+v, %v; want the claim's MIG device on GPU 5", in, err)
	}
}
