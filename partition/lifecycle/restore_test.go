package lifecycle

import (
	"context"
	"testing"
)

// The state folder is deleted and the card dropped from the dynamic
// list in the same restart: the runtime's checkpoint still says the
// lifecycle made a's partition. Restore makes it the lifecycle's again
// on a draining card: kept while a holds it, reported owned (never the
// administrator's), destroyed at a's release; the administrator's
// partition beside it is never touched, and the card is then drained.
func TestRestoreAfterLostStateAndDroppedCard(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "c1")
	e.open(WithDynamicCards("c1"))
	a := e.prepare("a", "c1-2u-0")
	_ = e.m.Close()
	e.m = nil
	rm(t, e.state)
	e.admin("c1", "4u", 4) // the administrator's, made meanwhile
	e.open()
	mine := Key{Card: "c1", Profile: "2u", Start: 0}
	held := map[Key][]string{mine: {"a"}, {Card: "c9", Profile: "1u", Start: 1}: nil}
	if err := e.m.Restore(ctx, held); err != nil {
		t.Fatal(err)
	}
	if s := e.m.State("c1"); s != Draining {
		t.Fatalf("card of a restored partition: %q, want draining", s)
	}
	if err := e.reconcile(a); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "2u@0 4u@4" {
		t.Fatalf("after the start: %q, want a's and the administrator's", got)
	}
	for k, want := range map[Key]bool{mine: true, {Card: "c1", Profile: "4u", Start: 4}: false} {
		if own, err := e.m.Owns(k); err != nil || own != want {
			t.Errorf("Owns(%s) = %v, %v; want %v", k, own, err, want)
		}
	}
	if err := e.release("a"); err != nil {
		t.Fatal(err)
	}
	if got := e.parts("c1"); got != "4u@4" {
		t.Fatalf("after a's release: %q, want the administrator's only", got)
	}
	e.open()
	if err := e.reconcile(); err != nil {
		t.Fatal(err)
	}
	if s := e.m.State("c1"); s != NotDynamic {
		t.Errorf("drained card: %q", s)
	}
	// A key on a dynamic card, or already recorded, needs nothing; a bad
	// key is an error.
	e.open(WithDynamicCards("c1"))
	if err := e.m.Restore(ctx, map[Key][]string{mine: {"x"}}); err != nil || e.intents() != "" {
		t.Errorf("restore on a dynamic card: %v, intents %q", err, e.intents())
	}
	if err := e.m.Restore(ctx, map[Key][]string{{Card: "", Profile: "1u"}: {"x"}}); err == nil {
		t.Error("restore of a key without a card succeeded")
	}
}
