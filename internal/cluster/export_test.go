package cluster

import (
	"context"
	"os"
	"testing"
	"time"
)

// HoldNodeLock takes every node slot for the rest of the test, so that no
// other drakit node (of a test package running in parallel) starts or
// stops meanwhile; Start in this process shares slot 0. It takes them all
// at once or none, so that it holds no slot idle while it waits.
func HoldNodeLock(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	for {
		held, err := tryLockAll()
		if err != nil {
			t.Fatal(err)
		}
		if held != nil {
			nodeLockHeld = held
			t.Cleanup(func() {
				nodeLockHeld = nil
				for _, f := range held {
					f.Close()
				}
			})
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("wait for every node slot: %v", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tryLockAll takes every node slot, or none (nil).
func tryLockAll() ([]*os.File, error) {
	var held []*os.File
	for slot := 0; slot < nodeSlots(); slot++ {
		f, err := tryLock(slotLockPath(slot))
		if err != nil || f == nil {
			for _, h := range held {
				h.Close()
			}
			return nil, err
		}
		held = append(held, f)
	}
	return held, nil
}
