package cluster

import (
	"context"
	"os"
	"testing"
	"time"
)

// HoldNodeLock takes every node slot for the rest of the test, so that no
// other drakit node (of a test package running in parallel) starts or
// stops meanwhile; Start in this process shares slot 0.
func HoldNodeLock(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var held []*os.File
	release := func() {
		for _, f := range held {
			f.Close()
		}
	}
	for slot := 0; slot < nodeSlots(); slot++ {
		f, err := lockSlot(ctx, slot)
		if err != nil {
			release()
			t.Fatal(err)
		}
		held = append(held, f)
	}
	nodeLockHeld = held
	t.Cleanup(func() {
		nodeLockHeld = nil
		release()
	})
}
