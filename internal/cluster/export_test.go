package cluster

import (
	"context"
	"io"
	"testing"
	"time"
)

// HoldNodeLock takes the host-wide node lock for the rest of the test, so
// that no other drakit node (of a test package running in parallel) starts
// or stops meanwhile; Start in this process shares the lock it holds.
func HoldNodeLock(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	f, err := (&state{log: io.Discard}).lockNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodeLockHeld = f
	t.Cleanup(func() {
		nodeLockHeld = nil
		f.Close()
	})
}
