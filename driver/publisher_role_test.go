package driver

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// Processes of a driver that start at once on one node (a rolling
// update's instances, a restart racing the old process's exit) settle on
// one publisher: each takes the role at start, the last to record itself
// keeps it, the others release it, and exactly one says it publishes.
// A publisher's process that goes leaves the role to one of the others.
// Run with -race: the record and the liveness locks are the only
// coordination, across processes as across goroutines here.
func TestOnePublisherWhenInstancesStartAtOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const n = 4
	ps := make([]*slicePublisher, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d := &Runtime{
				o: options{lockDir: dir, rollingUpdateUID: types.UID(fmt.Sprint("pod-", i))},
			}
			p, err := newSlicePublisher(d)
			if err != nil {
				t.Error(err)
				return
			}
			ps[i] = p
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	publishers := func() []int {
		got := make([]bool, n)
		var wg sync.WaitGroup
		for i, p := range ps {
			if p == nil {
				continue
			}
			wg.Go(func() {
				ok, err := p.role(ctx)
				if err != nil {
					t.Error(err)
				}
				got[i] = ok
			})
		}
		wg.Wait()
		var out []int
		for i, ok := range got {
			if ok && ps[i].publishing.Load() {
				out = append(out, i)
			}
		}
		return out
	}
	first := publishers()
	if len(first) != 1 {
		t.Fatalf("publishers %v after a start at once, want exactly one", first)
	}
	if again := publishers(); len(again) != 1 || again[0] != first[0] {
		t.Fatalf("publishers %v at the next publish, want %v still", again, first)
	}
	// The publisher's process goes: one of the others takes over.
	ps[first[0]].close()
	ps[first[0]] = nil
	next := publishers()
	if len(next) != 1 || next[0] == first[0] {
		t.Fatalf("publishers %v after publisher %d left, want one other", next, first[0])
	}
	for _, p := range ps {
		if p != nil {
			p.close()
		}
	}
}
