package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
)

// UnprepareClaim releases the claim's holds (by claim UID: devs are not
// needed, so a claim whose checkpoint record was lost is released too):
// each partition whose last holder it was is destroyed, and a card it
// held whole is switched back to partitions (a failure to switch is
// logged, not returned: the card's next partition switches it). The
// journal still names the claim as a holder until the destroys are
// done, in one write after them, so a process killed on the way leaves
// every partition that may exist recorded and the runtime's next
// unprepare finishes it. A partition whose destroy fails stays recorded
// as the claim's, and the error is returned: the kubelet retries the
// unprepare, which destroys it then. It is idempotent; a claim that holds
// nothing costs one read of the journal.
//
// A release works on the cards of the claim's own partitions only: a
// lost card fails the unprepares of its own partitions and never
// another's. On those cards it also destroys what an earlier start could
// not (released intents), logging a failure.
func (m *Manager) UnprepareClaim(ctx context.Context, claim driver.ClaimRef, devs []driver.AllocatedDevice) error {
	if err := m.release(ctx, string(claim.UID), nil); err != nil {
		return fmt.Errorf("release partitions of claim %s: %w", claim, err)
	}
	return nil
}

// release drops claim uid's holds and undoes what is left without a
// holder, card by card: under each card's lock it reads the journal as
// it is then, so that a prepare of the same partition by another claim,
// before or after, is either seen (the partition stays, held by the
// other claim) or comes after the destroy (and makes it again). The
// locks of the cards in locked are held by the caller (a failed
// prepare's rollback); keys of the claim on other cards are then left
// to a later release.
func (m *Manager) release(ctx context.Context, uid string, locked []string) error {
	intents, err := m.journal.intents()
	if err != nil {
		return err
	}
	var cards []string // the cards the claim holds something on
	for _, in := range intents {
		if slices.Contains(in.Claims, uid) && !slices.Contains(cards, in.Card) {
			cards = append(cards, in.Card)
		}
	}
	slices.Sort(cards)
	var errs error
	changed := false
	for _, card := range cards {
		unlock := func() {}
		switch {
		case slices.Contains(locked, card):
		case locked == nil:
			u, err := m.folder.lockCard(ctx, card)
			if err != nil {
				errs = errors.Join(errs, err)
				continue // the claim keeps its holds there, for the next release
			}
			unlock = u
		default:
			// A rollback's key on a card it does not hold: left, held by
			// the claim, for the runtime's unprepare.
			continue
		}
		c, err := m.releaseCard(ctx, uid, card)
		unlock()
		changed = changed || c
		errs = errors.Join(errs, err)
	}
	if changed {
		m.rep.changed()
	}
	return errs
}

// releaseCard drops claim uid's holds on card, whose lock is held:
// the partitions it was the last holder of are destroyed, and so are
// the released ones an earlier start could not destroy; then the journal
// forgets them, in one write. changed reports a partition destroyed.
func (m *Manager) releaseCard(ctx context.Context, uid, card string) (changed bool, err error) {
	intents, err := m.journal.intents()
	if err != nil {
		return false, err
	}
	var done, failed []Key
	var errs error
	for _, in := range intents {
		switch {
		case in.Card != card:
			continue
		case slices.Equal(in.Claims, []string{uid}): // the last holder
			if err := m.undo(ctx, in.Key); err != nil {
				errs = errors.Join(errs, err)
				failed = append(failed, in.Key)
				continue
			}
			_ = faults.At(ctx, "release/undone", card)
		case in.Released(): // an earlier start's failed destroy
			if err := m.undo(ctx, in.Key); err != nil {
				klog.FromContext(ctx).Error(err, "Could not destroy a partition an earlier start "+
					"left; the next release on its card or the next start tries again",
					"key", in.Key.String())
				continue
			}
		default:
			continue
		}
		done = append(done, in.Key)
		changed = changed || !in.Whole
	}
	if err := m.journal.settle(uid, card, done, failed); err != nil {
		errs = errors.Join(errs, err)
	}
	_ = faults.At(ctx, "release/settled", card)
	return changed, errs
}

// undo destroys the partition at k, or switches a card held whole back
// to partitions (a failure is logged: the card's next partition tries
// again). A card that is gone took its partitions with it.
func (m *Manager) undo(ctx context.Context, k Key) error {
	logger := klog.FromContext(ctx)
	if k.Whole {
		// The card is idle now (the kubelet unprepares after the
		// claim's containers are gone): switching now spares the next
		// partition the wait.
		if err := m.toolSetWhole(ctx, k.Card, false); err != nil && !errors.Is(err, ErrCardGone) {
			logger.Error(err, "Could not switch a card back from whole mode; its next partition tries again", "key", k.String())
		}
		return nil
	}
	err := m.toolDestroy(ctx, k)
	if errors.Is(err, ErrCardGone) {
		logger.Info("The partition's card is gone; forgetting the partition", "key", k.String())
		err = nil
	}
	if err != nil {
		return fmt.Errorf("destroy %s: %w", k, err)
	}
	m.forget(k)
	logger.V(2).Info("Destroyed partition", "key", k.String())
	return nil
}
