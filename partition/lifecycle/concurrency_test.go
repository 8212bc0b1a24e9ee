package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
	"github.com/drakit/drakit/statefile"
)

// TestReleaseAndPrepareOfOneKey runs claim a's release and claim b's
// prepare of the partition a holds at once, many times, both queued on
// the card behind a third claim's create: a Job's next pod got the device
// the old claim let go before the kubelet unprepared the old claim.
// Whichever gets the card first, b ends up holding a partition that
// exists, and the journal says so (the release decided what it alone held
// before it took the card, and destroyed b's partition: the journal
// named b as the holder of a partition that was gone).
func TestReleaseAndPrepareOfOneKey(t *testing.T) {
	for i := range 40 {
		e := newEnv(t, "c1")
		e.open(WithDynamicCards("c1"))
		e.prepare("a", "c1-2u-0")
		inCreate, gate := make(chan struct{}), make(chan struct{})
		e.tool.fail = func(op string, k Key) error {
			if op == "create" && k.Profile == "1u" {
				close(inCreate)
				<-gate
			}
			return nil
		}
		waiting := make(chan struct{}, 8)
		faults.Hook = func(_ context.Context, point, _ string) error {
			if point == "card/wait" {
				waiting <- struct{}{}
			}
			return nil
		}
		ctx := context.Background()
		errs := make(chan error, 3)
		var wg sync.WaitGroup
		wg.Go(func() { errs <- e.m.PrepareClaim(ctx, claim("x"), devs("c1-1u-4")) })
		<-waiting // x takes the card...
		<-inCreate
		wg.Go(func() { errs <- e.m.PrepareClaim(ctx, claim("b"), devs("c1-2u-0")) })
		<-waiting // ...b waits for it...
		wg.Go(func() { errs <- e.release("a") })
		<-waiting // ...and so does a's release.
		close(gate)
		wg.Wait()
		faults.Hook, e.tool.fail = nil, nil
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
		}
		if got := e.parts("c1") + " | " + e.intents(); got != "1u@4 2u@0 | c1/2u@0:b c1/1u@4:x" {
			t.Fatalf("run %d: cards and journal %q, want b's partition made and recorded", i, got)
		}
	}
}

// TestConcurrentClaims runs prepares and releases of claims that share
// partitions on two cards at once (run it with -race): while a claim
// holds a partition, it is there, complete, whatever the other
// claims do; once every claim is released nothing is left.
func TestConcurrentClaims(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	e.open(WithDynamicCards("c1", "c2"))
	names := []string{"c1-2u-0", "c1-2u-2", "c1-4u-4", "c2-2u-0", "c2-2u-2", "c2-4u-4"}
	ctx := context.Background()
	var wg sync.WaitGroup
	fails := make(chan string, 16)
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 47))
			for i := range 25 {
				uid := fmt.Sprintf("w%d-%d", w, i)
				dev := names[r.IntN(len(names))]
				if err := e.m.PrepareClaim(ctx, claim(uid), devs(dev)); err != nil {
					fails <- fmt.Sprintf("prepare %s %s: %v", uid, dev, err)
					return
				}
				k, _ := fakeKeyOf(devs(dev)[0], nil)
				parts, err := e.tool.List(ctx, k.Card)
				if err != nil || !hasComplete(parts, k) {
					fails <- fmt.Sprintf("claim %s holds %s, and the card has %v (%v)",
						uid, k, parts, err)
					return
				}
				if err := e.release(uid); err != nil {
					fails <- fmt.Sprintf("release %s: %v", uid, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(fails)
	var msgs []string
	for f := range fails {
		msgs = append(msgs, f)
	}
	if len(msgs) > 0 {
		t.Fatal(strings.Join(msgs, "\n"))
	}
	if got := e.parts("c1") + e.parts("c2") + e.intents(); got != "" {
		t.Errorf("after every release: %q, want nothing", got)
	}
}

func hasComplete(parts []Partition, k Key) bool {
	for _, p := range parts {
		if p.Key == k && p.Complete {
			return true
		}
	}
	return false
}

// TestOpenTwiceInOneProcess: two Managers of one process on one state
// folder (a driver that reopens it, a test's restart) share the instance
// lock and take turns per card: their prepares and releases of claims on
// the same cards run at once (run it with -race) and leave every card and
// the journal as the claims say. The folder stays locked until the last
// Close; an Open with other sharing options is refused.
func TestOpenTwiceInOneProcess(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	var ms [2]*Manager
	for i := range ms {
		m, err := Open(e.state, e.tool, fakeKeyOf, WithDynamicCards("c1", "c2"))
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		t.Cleanup(func() { _ = m.Close() })
		ms[i] = m
	}
	if _, err := Open(e.state, e.tool, fakeKeyOf, WithDynamicCards("c1", "c2"),
		WithRollingUpdate("gpu.example.com", "gpus/driver")); !errors.Is(err, ErrStateInUse) {
		t.Fatalf("open with other sharing options: %v, want ErrStateInUse", err)
	}
	names := []string{"c1-2u-0", "c1-2u-2", "c1-4u-4", "c2-2u-0", "c2-2u-2", "c2-4u-4"}
	ctx := context.Background()
	var wg sync.WaitGroup
	fails := make(chan string, 8)
	for w := range 4 {
		m := ms[w%2]
		wg.Go(func() {
			for i := range 20 {
				uid := fmt.Sprintf("w%d-%d", w, i)
				dev := names[(w+i)%len(names)]
				if err := m.PrepareClaim(ctx, claim(uid), devs(dev)); err != nil {
					fails <- fmt.Sprintf("prepare %s %s: %v", uid, dev, err)
					return
				}
				k, _ := fakeKeyOf(devs(dev)[0], nil)
				if parts, err := e.tool.List(ctx, k.Card); err != nil || !hasComplete(parts, k) {
					fails <- fmt.Sprintf("claim %s holds %s, and the card has %v (%v)",
						uid, k, parts, err)
					return
				}
				if err := m.UnprepareClaim(ctx, claim(uid).ClaimRef, nil); err != nil {
					fails <- fmt.Sprintf("release %s: %v", uid, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(fails)
	for f := range fails {
		t.Error(f)
	}
	e.m = ms[0]
	if got := e.parts("c1") + e.parts("c2") + e.intents(); got != "" {
		t.Errorf("after every release: %q, want nothing", got)
	}
	if err := ms[0].Close(); err != nil {
		t.Fatal(err)
	}
	// LockInstance counts each call as a process of its own.
	if l, err := statefile.LockInstance(e.state, lockName); !errors.Is(err, statefile.ErrInUse) {
		_ = l.Release()
		t.Fatalf("lock the folder while one Manager is open: %v, want ErrInUse", err)
	}
	if err := ms[1].Close(); err != nil {
		t.Fatal(err)
	}
	l, err := statefile.LockInstance(e.state, lockName)
	if err != nil {
		t.Fatalf("lock the folder after the last Close: %v", err)
	}
	_ = l.Release()
}
