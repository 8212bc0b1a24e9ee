package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver"
)

// UnprepareClaim releases the claim's holds (by claim UID: devs are not
// needed, so a claim whose checkpoint record was lost is released too):
// each partition whose last holder it was is destroyed, and a card it
// held whole is switched back to partitions (a failure to switch is
// logged, not returned: the card's next partition switches it). The
// journal still names the claim as a holder until the destroys are
// done, in one write after them, so a process killed on the way leaves
// every partition that may exist recorded and the runtime's next
// unprepare finishes it. It is idempotent; a claim that holds nothing
// costs one read of the journal.
//
// Partitions that an earlier release left undestroyed (a lost card) are
// destroyed too when their card is free; their failures are logged and
// never fail this claim: a lost card fails the unprepares of its own
// partitions only.
func (m *Manager) UnprepareClaim(ctx context.Context, claim driver.ClaimRef, devs []driver.AllocatedDevice) error {
	if err := m.release(ctx, string(claim.UID), nil); err != nil {
		return fmt.Errorf("release partitions of claim %s: %w", claim, err)
	}
	return nil
}

// release drops claim uid's holds and undoes what is left without a
// holder. The locks of the cards in locked are held by the caller; for
// those the caller's own claim left, release takes no lock (and in a
// rollback, leaves the claim's keys on other cards to a later release).
func (m *Manager) release(ctx context.Context, uid string, locked []string) error {
	logger := klog.FromContext(ctx)
	intents, err := m.journal.intents()
	if err != nil {
		return err
	}
	var mine, left []Key
	holds := false
	for _, in := range intents {
		switch {
		case in.drop(uid):
			holds = true
			if in.Released() {
				mine = append(mine, in.Key)
			}
		case in.Released():
			left = append(left, in.Key)
		}
	}
	if !holds && len(left) == 0 {
		return nil
	}
	var done []Key
	var errs error
	changed := false
	work := func(keys []Key, own bool) {
		for len(keys) > 0 {
			card := keys[0].Card
			n := 1
			for n < len(keys) && keys[n].Card == card {
				n++
			}
			batch := keys[:n]
			keys = keys[n:]
			unlock := func() {}
			switch {
			case slices.Contains(locked, card):
			case own && locked == nil:
				u, err := m.folder.lockCard(ctx, card)
				if err != nil {
					errs = errors.Join(errs, err)
					continue
				}
				unlock = u
			default:
				// Another claim's leftover, or a rollback's key on a card
				// it does not hold: never wait for a card that may be
				// lost or busy.
				u, ok := m.folder.tryLockCard(card)
				if !ok {
					continue
				}
				unlock = u
			}
			for _, k := range batch {
				if err := m.undo(ctx, k); err != nil {
					if own {
						errs = errors.Join(errs, err)
					} else {
						logger.Error(err, "Could not destroy a partition an earlier release left; the next release or start tries again", "key", k.String())
					}
					continue
				}
				done = append(done, k)
				changed = changed || !k.Whole
				fault("release/undone")
			}
			unlock()
		}
	}
	work(mine, true)
	work(left, false)
	if err := m.journal.settle(uid, done); err != nil {
		errs = errors.Join(errs, err)
	}
	fault("release/settled")
	if changed {
		m.rep.changed()
	}
	return errs
}

// undo destroys the partition at k, or switches a card held whole back
// to partitions (a failure is logged: the card's next partition tries
// again). A card that is gone took its partitions with it.
func (m *Manager) undo(ctx context.Context, k Key) error {
	logger := klog.FromContext(ctx)
	if k.Whole {
		sw, ok := m.tool.(WholeSwitcher)
		if !ok {
			return nil
		}
		// The card is idle now (the kubelet unprepares after the
		// claim's containers are gone): switching now spares the next
		// partition the wait.
		if err := sw.SetWhole(ctx, k.Card, false); err != nil && !errors.Is(err, ErrCardGone) {
			logger.Error(err, "Could not switch a card back from whole mode; its next partition tries again", "key", k.String())
		}
		return nil
	}
	err := m.tool.Destroy(ctx, k)
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
