package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drakit/drakit/driver"
)

func TestPrepareAndRelease(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	e.open(WithDynamicCards("c1", "c2"))
	if err := e.reconcile(); err != nil {
		t.Fatal(err)
	}
	e.prepare("a", "c1-2u-0", "c2-4u-4")
	e.prepare("b", "c1-1u-2")
	if got := e.parts("c1"); got != "1u@2 2u@0" {
		t.Fatalf("card c1: %q", got)
	}
	if p, ok := e.m.Made(Key{Card: "c2", Profile: "4u", Start: 4}); !ok || !p.Complete || !strings.HasPrefix(p.ID, "P-") {
		t.Errorf("Made c2-4u-4: %+v %v", p, ok)
	}
	if got, want := e.intents(), "c1/2u@0:a c1/1u@2:b c2/4u@4:a"; got != want {
		t.Errorf("journal %q, want %q", got, want)
	}
	// A repeated prepare changes nothing.
	e.prepare("a", "c1-2u-0", "c2-4u-4")
	for range 2 { // idempotent
		if err := e.release("a"); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.parts("c1") + "|" + e.parts("c2"); got != "1u@2|" {
		t.Errorf("cards after a's release: %q", got)
	}
	if _, ok := e.m.Made(Key{Card: "c2", Profile: "4u", Start: 4}); ok {
		t.Error("Made still has a destroyed partition")
	}
	if err := e.release("b"); err != nil {
		t.Fatal(err)
	}
	if got := e.intents() + e.parts("c1"); got != "" {
		t.Errorf("after both releases: %q", got)
	}
}

// A partition shared by two claims is destroyed when its last holder goes.
func TestSharedPartition(t *testing.T) {
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"))
	e.prepare("a", "c1-2u-2")
	e.prepare("b", "c1-2u-2")
	if err := e.release("a"); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "2u@2" {
		t.Fatalf("after the first holder: %q", got)
	}
	if err := e.release("b"); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "" {
		t.Fatalf("after the last holder: %q", got)
	}
}

// Without WithDynamicCards nothing is dynamic: an empty card in
// partition mode is not taken for the lifecycle's (no inference), and
// neither prepare, reconcile nor release touches what is on it.
func TestNoCardIsDynamicByDefault(t *testing.T) {
	e := newEnv(t, "c1")
	e.open()
	if s := e.m.State("c1"); s != NotDynamic {
		t.Fatalf("state of an unnamed empty card: %q", s)
	}
	e.prepare("a", "c1-2u-0")
	if got := e.parts("c1"); got != "" {
		t.Errorf("prepare on a card not named dynamic made %q", got)
	}
	e.admin("c1", "4u", 0) // the administrator's layout, after the start
	e.open()
	if err := e.reconcile(); err != nil {
		t.Fatal(err)
	}
	if err := e.release("a"); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "4u@0" {
		t.Errorf("the administrator's partition after a restart and a release: %q", got)
	}
}

// A device allocated with admin access is never made, destroyed or
// switched.
func TestAdminAccessChangesNothing(t *testing.T) {
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"))
	e.prepare("user", "c1-2u-0")
	ds := devs("c1-2u-0", "c1-1u-4", "c1")
	for i := range ds {
		ds[i].AdminAccess = true
	}
	if err := e.m.PrepareClaim(context.Background(), claim("admin"), ds); err != nil {
		t.Fatal(err)
	}
	h := held("admin", "c1-2u-0")
	h.Devices[0].AdminAccess = true
	if err := e.release("admin"); err != nil {
		t.Fatal(err)
	}
	e.open(WithDynamicCards("c1"))
	if err := e.reconcile(h, held("user", "c1-2u-0")); err != nil {
		t.Fatal(err)
	}
	if got, want := e.parts("c1")+"|"+e.intents(), "2u@0|c1/2u@0:user"; got != want {
		t.Errorf("after an admin-access claim: %q, want %q", got, want)
	}
	// Without the user's claim the admin-access claim holds nothing.
	e.open(WithDynamicCards("c1"))
	if err := e.reconcile(h); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "" {
		t.Errorf("a partition only an admin-access claim names: %q, want destroyed", got)
	}
}

// A failed create leaves nothing: the partition made in part is
// destroyed, and the claim's other partitions too.
func TestFailedPrepareRollsBack(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	e.open(WithDynamicCards("c1", "c2"))
	e.tool.fail = func(op string, k Key) error {
		if op == "create/2" && k.Card == "c2" {
			return errors.New("out of engines")
		}
		return nil
	}
	err := e.m.PrepareClaim(context.Background(), claim("a"), devs("c1-2u-0", "c2-2u-0"))
	if err == nil || !strings.Contains(err.Error(), "out of engines") {
		t.Fatalf("prepare with a failing create: %v", err)
	}
	if got := e.parts("c1") + "|" + e.parts("c2") + "|" + e.intents(); got != "||" {
		t.Errorf("after the failed prepare: %q, want nothing", got)
	}
	// The rules of the tool: an overlapping partition fails and leaves
	// the one that holds the place.
	e.tool.fail = nil
	e.prepare("b", "c1-4u-0")
	if err := e.m.PrepareClaim(context.Background(), claim("c"), devs("c1-2u-2")); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("overlapping prepare: %v", err)
	}
	if got := e.parts("c1") + "|" + e.intents(); got != "4u@0|c1/4u@0:b" {
		t.Errorf("after the overlapping prepare: %q", got)
	}
}

// A card wanted whole: its partitions no claim holds are destroyed, it
// is refused while a claim holds a partition of it and a partition is
// refused while a claim holds it whole; its release switches it back,
// and a card left whole (the switch failed) is switched back by its next
// partition and at start.
func TestWholeCard(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"))
	e.prepare("p", "c1-1u-0")
	if err := e.m.PrepareClaim(ctx, claim("w"), devs("c1")); !errors.Is(err, ErrCardBusy) || !strings.Contains(err.Error(), "held by claim p") {
		t.Fatalf("whole while p holds a partition: %v", err)
	}
	if got := e.parts("c1"); got != "1u@0" {
		t.Fatalf("after the refused whole prepare: %q", got)
	}
	if err := e.release("p"); err != nil {
		t.Fatal(err)
	}
	e.admin("c1", "2u", 4) // a destroy that failed, or anyone's: no claim holds it
	e.prepare("w", "c1")
	if got := e.parts("c1"); got != "whole" {
		t.Fatalf("card prepared whole: %q", got)
	}
	if err := e.m.PrepareClaim(ctx, claim("q"), devs("c1-1u-0")); !errors.Is(err, ErrCardBusy) || !strings.Contains(err.Error(), "in use whole by claim w") {
		t.Fatalf("partition while w holds the card whole: %v", err)
	}
	// A restart with the claim held keeps the card whole.
	e.open(WithDynamicCards("c1"))
	if err := e.reconcile(held("w", "c1")); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "whole" {
		t.Fatalf("after a restart with the whole claim held: %q", got)
	}
	// The switch back fails: the release succeeds, the card stays whole,
	// and the next partition switches it.
	e.tool.fail = func(op string, k Key) error {
		if op == "whole" {
			return errors.New("in use by another client")
		}
		return nil
	}
	if err := e.release("w"); err != nil {
		t.Fatal(err)
	}
	e.tool.fail = nil
	if got := e.parts("c1"); got != "whole" {
		t.Fatalf("after a release whose switch failed: %q", got)
	}
	e.prepare("r", "c1-1u-6")
	if got := e.parts("c1"); got != "1u@6" {
		t.Fatalf("a partition on a card left whole: %q", got)
	}
	// A restart with no whole claim switches a card left whole back.
	if err := e.release("r"); err != nil {
		t.Fatal(err)
	}
	_ = e.tool.set("c1", func(c *fakeCard) { c.Whole = true })
	e.open(WithDynamicCards("c1"))
	if err := e.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "" {
		t.Fatalf("a card left whole after a restart without whole claims: %q", got)
	}
}

// The operators' faults at start: the journal deleted, the checkpoint
// wiped, the whole state folder deleted, the journal torn. Nothing a held
// claim names is destroyed, nothing else of the lifecycle's is left, and
// the administrator's partitions on a card not named are never touched.
func TestReconcileAfterLostState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(e *env)
		// held: whether the runtime still holds a and b.
		heldA, heldB bool
	}{
		{"journal deleted", func(e *env) { rm(e.t, filepath.Join(e.state, JournalFile)) }, true, true},
		{"journal torn", func(e *env) { write(e.t, filepath.Join(e.state, JournalFile), `{"intents":[{"card":"c1","prof`) }, true, true},
		{"checkpoint wiped", func(e *env) {}, false, false},
		{"state folder deleted", func(e *env) { rm(e.t, e.state) }, true, true},
		{"state folder and checkpoint deleted", func(e *env) { rm(e.t, e.state) }, false, false},
		{"one claim's record lost", func(e *env) {}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "c1", "c2", "c3")
			e.admin("c3", "4u", 0) // the administrator's, on a card not named
			e.open(WithDynamicCards("c1", "c2"))
			a := e.prepare("a", "c1-2u-0", "c2-1u-1")
			b := e.prepare("b", "c1-1u-4")
			e.prepare("gone", "c2-4u-4") // its record is lost in every case
			ids := map[string]string{}
			for _, k := range []Key{{Card: "c1", Profile: "2u", Start: 0}, {Card: "c1", Profile: "1u", Start: 4}} {
				p, _ := e.m.Made(k)
				ids[k.String()] = p.ID
			}
			_ = e.m.Close()
			e.m = nil
			tc.break_(e)
			var h []driverHeld
			if tc.heldA {
				h = append(h, a)
			}
			if tc.heldB {
				h = append(h, b)
			}
			e.open(WithDynamicCards("c1", "c2"))
			if err := e.reconcile(h...); err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{true: "2u@0", false: ""}[tc.heldA]
			if tc.heldB {
				want = strings.TrimSpace("1u@4 " + want)
			}
			if got := e.parts("c1"); got != want {
				t.Errorf("card c1: %q, want %q", got, want)
			}
			if got, want := e.parts("c2"), map[bool]string{true: "1u@1", false: ""}[tc.heldA]; got != want {
				t.Errorf("card c2: %q, want %q (the lost claim's 4u destroyed)", got, want)
			}
			if got := e.parts("c3"); got != "4u@0" {
				t.Errorf("the administrator's card c3: %q", got)
			}
			// Not handed out twice: a kept partition is the one its claim
			// got (not destroyed and made again).
			got, _ := e.tool.List(context.Background(), "c1")
			for _, p := range got {
				if id := ids[p.Key.String()]; id != p.ID {
					t.Errorf("%s is %s now, its claim got %s", p.Key, p.ID, id)
				}
			}
			for _, uid := range []string{"a", "b", "gone"} {
				if err := e.release(uid); err != nil {
					t.Fatal(err)
				}
			}
			if got := e.parts("c1") + e.parts("c2") + e.intents(); got != "" {
				t.Errorf("after every release: %q", got)
			}
		})
	}
}

type driverHeld = driver.HeldClaim

func rm(t testing.TB, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func write(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A lost claim (its checkpoint record was corrupt) keeps what the
// journal says it holds until its release.
func TestLostClaimKeepsItsPartitions(t *testing.T) {
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"))
	e.prepare("lost", "c1-2u-2")
	e.open(WithDynamicCards("c1"))
	lost := held("lost")
	lost.Lost, lost.Prepared = true, false
	if err := e.reconcile(lost); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "2u@2" {
		t.Fatalf("a lost claim's partition after the start: %q", got)
	}
	if err := e.release("lost"); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "" {
		t.Fatalf("after the lost claim's release: %q", got)
	}
}

// A card the administrator no longer names is drained: what held claims
// use stays until their release, the lifecycle's other partitions go at
// start, the administrator's are never touched, nothing new is made, and
// once drained the card is the administrator's.
func TestCardDroppedWhileClaimsHoldIt(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	e.open(WithDynamicCards("c1", "c2"))
	a := e.prepare("a", "c1-2u-0")
	e.prepare("b", "c1-1u-2") // its record is lost
	e.open(WithDynamicCards("c2"))
	if s := e.m.State("c1"); s != Draining {
		t.Fatalf("state of the dropped card: %q", s)
	}
	e.admin("c1", "4u", 4) // the administrator's, made while it drains
	if err := e.reconcile(a); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "2u@0 4u@4" {
		t.Fatalf("draining card after the start: %q, want a's and the administrator's", got)
	}
	for _, k := range []struct {
		k    Key
		want bool
	}{{Key{Card: "c1", Profile: "2u", Start: 0}, true}, {Key{Card: "c1", Profile: "4u", Start: 4}, false}} {
		if own, err := e.m.Owns(k.k); err != nil || own != k.want {
			t.Errorf("Owns(%s) = %v, %v; want %v", k.k, own, err, k.want)
		}
	}
	e.prepare("c", "c1-1u-2") // nothing new on a draining card
	if got := e.parts("c1"); got != "2u@0 4u@4" {
		t.Fatalf("a prepare on a draining card made something: %q", got)
	}
	if err := e.release("a"); err != nil {
		t.Fatal(err)
	}
	e.open(WithDynamicCards("c2"))
	if err := e.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "4u@4" {
		t.Errorf("drained card: %q, want the administrator's only", got)
	}
	if s := e.m.State("c1"); s != NotDynamic {
		t.Errorf("state of the drained card: %q", s)
	}
	if rec, _ := ReadCards(e.state); rec["c1"] != NotDynamic || rec["c2"] != Dynamic {
		t.Errorf("recorded card states %v", rec)
	}
}

// Naming a card dynamic hands it over: a partition a held claim names is
// kept and recorded as that claim's, every other one is destroyed.
func TestCardNamedLater(t *testing.T) {
	e := newEnv(t, "c1")
	e.admin("c1", "2u", 0)
	e.admin("c1", "2u", 2)
	e.open()
	e.prepare("s", "c1-2u-0") // a claim on the administrator's partition
	e.open(WithDynamicCards("c1"))
	if err := e.reconcile(held("s", "c1-2u-0")); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1") + "|" + e.intents(); got != "2u@0|c1/2u@0:s" {
		t.Errorf("card named dynamic: %q", got)
	}
}

// One lost card fails the release of its own partitions only: every
// other claim is released without a call on the lost card, the failed
// release destroys its partition once the card is back, and a hung card
// never holds up the work
// on another.
func TestLostCardNeverBlocksAnother(t *testing.T) {
	t.Run("fails", func(t *testing.T) {
		e := newEnv(t, "c1", "c2")
		e.open(WithDynamicCards("c1", "c2"))
		e.prepare("a", "c1-2u-0")
		e.prepare("b", "c2-2u-0")
		e.prepare("c", "c2-1u-4")
		_ = e.tool.set("c1", func(c *fakeCard) { c.Lost = true })
		if err := e.release("a"); err == nil {
			t.Fatal("release of a partition on a lost card succeeded")
		}
		// Another card's release never calls the tool on the lost card
		// (a call there may hang until the card is reset).
		var onLost []string
		e.tool.fail = func(op string, k Key) error {
			if k.Card == "c1" {
				onLost = append(onLost, op+" "+k.String())
			}
			return nil
		}
		for _, uid := range []string{"b", "c"} {
			if err := e.release(uid); err != nil {
				t.Fatalf("release of %s on card c2 while c1 is lost: %v", uid, err)
			}
		}
		if len(onLost) > 0 {
			t.Errorf("releases on card c2 called the tool on lost card c1: %v", onLost)
		}
		e.tool.fail = nil
		e.prepare("d", "c2-4u-4")
		if got := e.parts("c2"); got != "4u@4" {
			t.Errorf("card c2: %q", got)
		}
		// The card is reset: the kubelet's next unprepare of a
		// destroys its partition.
		_ = e.tool.set("c1", func(c *fakeCard) { c.Lost = false })
		for _, uid := range []string{"a", "d"} {
			if err := e.release(uid); err != nil {
				t.Fatal(err)
			}
		}
		if got := e.parts("c1") + e.parts("c2") + e.intents(); got != "" {
			t.Errorf("after the lost card came back: %q", got)
		}
	})
	t.Run("hangs", func(t *testing.T) {
		e := newEnv(t, "c1", "c2")
		e.tool.hang = make(chan struct{})
		e.open(WithDynamicCards("c1", "c2"), WithCardTimeout(100*time.Millisecond))
		e.prepare("a", "c1-2u-0")
		e.prepare("b", "c2-2u-0")
		_ = e.tool.set("c1", func(c *fakeCard) { c.Lost = true })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		hung := make(chan error, 1)
		go func() { hung <- e.m.UnprepareClaim(ctx, claim("a").ClaimRef, nil) }()
		for e.waiting("c1") == 0 {
			time.Sleep(time.Millisecond)
		}
		if err := e.release("b"); err != nil {
			t.Fatalf("release on c2 while a call on c1 hangs: %v", err)
		}
		e.prepare("c", "c2-1u-4")
		if err := e.m.Reconcile(context.Background(), []driver.HeldClaim{held("a", "c1-2u-0"), held("c", "c2-1u-4")}); err == nil || !strings.Contains(err.Error(), "card c1") {
			t.Errorf("reconcile with a hung card: %v, want c1's error", err)
		}
		close(e.tool.hang)
		if err := <-hung; err == nil {
			t.Error("the hung release succeeded on a lost card")
		}
	})
}

// waiting reports whether a call on card holds its lock.
func (e *env) waiting(card string) int { return len(e.m.folder.card(card)) }

// Changes are notified once per batch: the first after the delay, the
// ones within the interval together, once.
func TestRepublishCoalesces(t *testing.T) {
	var n atomic.Int32
	notified := make(chan struct{}, 10)
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"), WithRepublish(func() { n.Add(1); notified <- struct{}{} }, 0, time.Hour))
	e.prepare("a", "c1-1u-0")
	<-notified
	for i := range 5 {
		e.prepare(fmt.Sprint("b", i), fmt.Sprintf("c1-1u-%d", i+1))
	}
	e.m.Changed()
	e.m.rep.mu.Lock()
	pending := e.m.rep.pending
	e.m.rep.mu.Unlock()
	if got := n.Load(); got != 1 || !pending {
		t.Errorf("after 6 changes within the interval: %d notifications, one pending %v; want 1 and one pending", got, pending)
	}
}

func TestOpenRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	tool := &fakeTool{}
	for name, tc := range map[string]struct {
		dir  string
		tool Tool
		kf   KeyFunc
		opts []Option
		want string
	}{
		"no folder":      {"", tool, fakeKeyOf, nil, "state folder is empty"},
		"no tool":        {dir, nil, fakeKeyOf, nil, "required"},
		"no key func":    {dir, tool, nil, nil, "required"},
		"empty card":     {dir, tool, fakeKeyOf, []Option{WithDynamicCards("c1", "")}, "empty name"},
		"nil notify":     {dir, tool, fakeKeyOf, []Option{WithRepublish(nil, 0, 0)}, "notify is nil"},
		"negative delay": {dir, tool, fakeKeyOf, []Option{WithRepublish(func() {}, -1, 0)}, "negative"},
	} {
		if _, err := Open(tc.dir, tc.tool, tc.kf, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"))
	bad := func(d []string) {
		t.Helper()
		err := e.m.PrepareClaim(context.Background(), claim("x"), devs(d...))
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("prepare %v: %v, want ErrInvalidKey", d, err)
		}
	}
	bad([]string{"c1-2u--2"})
	bad([]string{"-2u-0"})
}

// A release names the claim as a holder of every partition it destroys
// until the destroys are done (a process killed meanwhile leaves each
// partition that may still exist recorded); a partition another claim
// holds is left; a destroy that fails keeps the partition recorded as the
// claim's, and the claim's next release (the kubelet retries a failed
// unprepare) destroys it (once, the retry found nothing to do and the
// partition stayed until a restart).
func TestReleaseKeepsTheHolderUntilTheDestroy(t *testing.T) {
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"))
	e.prepare("a", "c1-1u-0", "c1-1u-1", "c1-1u-2")
	e.prepare("b", "c1-1u-1")
	var destroyed []string
	failed := false
	e.tool.fail = func(op string, k Key) error {
		if op != "destroy" {
			return nil
		}
		destroyed = append(destroyed, fmt.Sprint(k.Start))
		in, err := e.m.Intents()
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(in, func(i Intent) bool { return i.Key == k }); i < 0 || len(in[i].Claims) == 0 {
			t.Errorf("while %s is destroyed the journal has %v: a crash now would lose it", k, in)
		}
		if k.Start == 2 && !failed {
			failed = true
			return errors.New("destroy failed")
		}
		return nil
	}
	if err := e.release("a"); err == nil || !strings.Contains(err.Error(), "destroy failed") {
		t.Fatalf("release a: %v, want the destroy's error", err)
	}
	if got := strings.Join(destroyed, ","); got != "0,2" {
		t.Errorf("release a destroyed %s, want 0,2 (not 1, which b holds)", got)
	}
	if got, want := e.intents(), "c1/1u@1:b c1/1u@2:a"; got != want {
		t.Errorf("journal after a's failed release: %q, want %q (1u@2 still a's)", got, want)
	}
	destroyed = nil
	e.prepare("c", "c1-4u-4")
	if err := e.release("c"); err != nil || strings.Join(destroyed, ",") != "4" {
		t.Fatalf("release c: %v, destroyed %v; want its own partition only", err, destroyed)
	}
	destroyed = nil
	if err := e.release("a"); err != nil || strings.Join(destroyed, ",") != "2" {
		t.Fatalf("a's release again: %v, destroyed %v; want 2", err, destroyed)
	}
	if got := e.parts("c1") + "|" + e.intents(); got != "1u@1|c1/1u@1:b" {
		t.Errorf("after a's second release: %q", got)
	}
	destroyed = nil
	if err := e.release("nobody"); err != nil || len(destroyed) > 0 {
		t.Errorf("release of a claim that holds nothing: %v, destroyed %v", err, destroyed)
	}
}
