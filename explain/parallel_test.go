package explain_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/explain"
)

// TestParallelismChangesNothing: nodes explained at once (WithParallelism,
// run it with -race) give the report that one at a time gives, on a fleet
// where some nodes fit and the others fail for reasons of their own.
func TestParallelismChangesNothing(t *testing.T) {
	snap, claim := migFleet(t, 24, true)
	// Every third node has its GPUs free: the claim fits there.
	kept := snap.Claims[:0]
	for i, c := range snap.Claims {
		if i%3 != 0 {
			kept = append(kept, c)
		}
	}
	snap.Claims = kept
	ctx := context.Background()
	one, err := explain.Claim(ctx, snap, claim, explain.WithParallelism(1))
	if err != nil {
		t.Fatal(err)
	}
	if one.NodesFit != 8 {
		t.Fatalf("%d nodes fit one at a time, want 8", one.NodesFit)
	}
	for range 3 {
		many, err := explain.Claim(ctx, snap, claim, explain.WithParallelism(8))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(one, many); diff != "" {
			t.Fatalf("8 nodes at once differ from one at a time (-one +many):\n%s", diff)
		}
	}
}
