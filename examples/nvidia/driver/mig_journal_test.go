package driver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
)

// holdersOf reads the journal and returns the claims holding k; ok is
// false when no intent for k is recorded.
func holdersOf(t *testing.T, j *Journal, k Key) (claims []string, ok bool) {
	t.Helper()
	in, err := j.Intents()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(in, func(x Intent) bool { return x.Same(k) })
	if i < 0 {
		return nil, false
	}
	return in[i].Claims, true
}

// An intent whose last holder was released before its device could be
// destroyed stays released in the file, so that the next Release (of
// any claim) returns it again: a destroy that failed once is retried,
// not forgotten (the file once dropped the difference between "released"
// and "recorded without a holder", and the device leaked).
func TestJournalReleasedIntentIsReturnedAgain(t *testing.T) {
	j := journal(t)
	k := Key{GPU: 4, UUID: "GPU-4", ProfileID: 19, Start: 2}
	if err := j.Hold(k, "a"); err != nil {
		t.Fatal(err)
	}
	free, err := j.Release("a")
	if err != nil || !slices.ContainsFunc(free, k.Same) {
		t.Fatalf("release a: %v, %v; want %s", free, err, k)
	}
	// The destroy failed: nothing forgotten. Another claim's release
	// must hand the device back for destroying.
	free, err = j.Release("b")
	if err != nil || !slices.ContainsFunc(free, k.Same) {
		t.Fatalf("release b after a's destroy failed: %v, %v; want %s again", free, err, k)
	}
	// An intent recorded without a holder is not a released one.
	r := Key{GPU: 4, UUID: "GPU-4", ProfileID: 19, Start: 3}
	if err := j.Record(r); err != nil {
		t.Fatal(err)
	}
	if free, _ := j.Release("c"); slices.ContainsFunc(free, r.Same) {
		t.Errorf("release c returned %s, recorded without a holder", r)
	}
}

// HoldUnless checks and holds in one write: a refusal writes nothing and
// comes back as it is.
func TestJournalHoldUnless(t *testing.T) {
	j := journal(t)
	whole := WholeKey(4, "GPU-4")
	if err := j.Hold(whole, "w"); err != nil {
		t.Fatal(err)
	}
	k := Key{GPU: 4, UUID: "GPU-4", ProfileID: 19, Start: 0}
	refusal := errors.New("in use whole")
	var seen []Intent
	err := j.HoldUnless(k, "m", func(in []Intent) error {
		seen = in
		if slices.ContainsFunc(in, func(x Intent) bool { return x.Whole && len(x.Claims) > 0 }) {
			return refusal
		}
		return nil
	})
	if err != refusal {
		t.Fatalf("hold next to a whole-GPU holder: %v, want the refusal as it is", err)
	}
	if len(seen) != 1 || !seen[0].Same(whole) {
		t.Errorf("the check saw %v, want the whole-GPU intent", seen)
	}
	if _, ok := holdersOf(t, j, k); ok {
		t.Error("a refused hold was written")
	}
	if err := j.HoldUnless(k, "m", func([]Intent) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if claims, _ := holdersOf(t, j, k); !cmp.Equal(claims, []string{"m"}) {
		t.Errorf("held by %v, want [m]", claims)
	}
}

// Drop undoes what the claim alone held and forgets it only after the
// undo: during the undo the journal still names the claim; a device
// another claim holds is left; a failed undo keeps the intent, released,
// and the next Drop of any claim undoes it.
func TestJournalDrop(t *testing.T) {
	j := journal(t)
	only := Key{GPU: 4, UUID: "GPU-4", ProfileID: 19, Start: 0}
	shared := Key{GPU: 4, UUID: "GPU-4", ProfileID: 19, Start: 1}
	fails := Key{GPU: 4, UUID: "GPU-4", ProfileID: 19, Start: 2}
	for _, h := range []struct {
		k Key
		c string
	}{{only, "a"}, {shared, "a"}, {shared, "b"}, {fails, "a"}} {
		if err := j.Hold(h.k, h.c); err != nil {
			t.Fatal(err)
		}
	}
	var undone []string
	done, err := j.Drop("a", func(k Key) error {
		if claims, _ := holdersOf(t, j, k); !slices.Contains(claims, "a") {
			t.Errorf("while %s is undone the journal says it is held by %v: a crash now would lose it", k, claims)
		}
		undone = append(undone, k.String())
		if k.Same(fails) {
			return errors.New("destroy failed")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "destroy failed") {
		t.Fatalf("drop a: %v, want the undo's error", err)
	}
	if want := []string{only.String(), fails.String()}; !cmp.Equal(undone, want) {
		t.Errorf("undone %v, want %v (not the device b still holds)", undone, want)
	}
	if len(done) != 1 || !done[0].Same(only) {
		t.Errorf("done %v, want [%s]", done, only)
	}
	if _, ok := holdersOf(t, j, only); ok {
		t.Errorf("%s still recorded after its undo", only)
	}
	if claims, _ := holdersOf(t, j, shared); !cmp.Equal(claims, []string{"b"}) {
		t.Errorf("%s held by %v, want [b]", shared, claims)
	}
	if claims, ok := holdersOf(t, j, fails); !ok || claims == nil || len(claims) != 0 {
		t.Errorf("%s after its undo failed: recorded %v with holders %#v, want released ([])", fails, ok, claims)
	}

	undone = nil
	if _, err := j.Drop("b", func(k Key) error { undone = append(undone, k.String()); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{shared.String(), fails.String()}; !cmp.Equal(undone, want) {
		t.Errorf("drop b undid %v, want %v (the one left undone too)", undone, want)
	}
	if in, _ := j.Intents(); len(in) != 0 {
		t.Errorf("journal after both drops: %v", in)
	}
	if _, err := j.Drop("b", func(k Key) error { t.Errorf("undo %s for a claim that holds nothing", k); return nil }); err != nil {
		t.Fatal(err)
	}
}

// A MIG device whose destroy fails at unprepare is destroyed by the
// kubelet's next unprepare of the claim, which then succeeds: it never
// leaks (once, the retry found nothing to do and the device stayed until
// the driver restarted).
func TestFailedDestroyIsRetried(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(0))
	c := f.prepared(t, "a", alloc("gpu-5-1g-18gb-3"))
	if got := instances(t, f.sim, 5); len(got) != 1 {
		t.Fatalf("GPU 5 after the prepare: %v", got)
	}
	if err := f.sim.InjectFault(nvmlsim.Fault{Op: nvmlsim.FaultDestroyGPUInstance, GPU: 5, Code: nvml.ErrorUnknown}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.UnprepareClaim(ctx, c.ClaimRef, nil); err == nil {
		t.Fatal("unprepare with a failing destroy succeeded")
	}
	if err := f.d.UnprepareClaim(ctx, c.ClaimRef, nil); err != nil {
		t.Fatalf("unprepare again: %v", err)
	}
	if got := instances(t, f.sim, 5); len(got) != 0 {
		t.Errorf("GPU 5 after the claim was unprepared: %v, want nothing (leaked)", got)
	}
	if in, err := f.d.journal.Intents(); err != nil || len(in) != 0 {
		t.Errorf("journal after the unprepare: %v, %v", in, err)
	}
}
