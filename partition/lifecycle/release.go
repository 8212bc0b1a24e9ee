package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// holder. The locks of the cards in locked are held by the caller (a
// failed prepare's rollback); keys of the claim on other cards are then
// left to a later release.
func (m *Manager) release(ctx context.Context, uid string, locked []string) error {
	logger := klog.FromContext(ctx)
	intents, err := m.journal.intents()
	if err != nil {
		return err
	}
	var mine []Key // the claim is the last holder
	cards := map[string]bool{}
	holds := false
	for _, in := range intents {
		if !slices.Contains(in.Claims, uid) {
			continue
		}
		holds = true
		if len(in.Claims) == 1 {
			mine = append(mine, in.Key)
			cards[in.Card] = true
		}
	}
	if !holds {
		return nil
	}
	var left []Key // released on the claim's cards: an earlier start's failed destroy
	for _, in := range intents {
		if in.Released() && cards[in.Card] {
			left = append(left, in.Key)
		}
	}
	var done, failed []Key
	var errs error
	changed := false
	for _, card := range slices.Sorted(maps.Keys(cards)) {
		unlock := func() {}
		switch {
		case slices.Contains(locked, card):
		case locked == nil:
			u, err := m.folder.lockCard(ctx, card)
			if err != nil {
				errs = errors.Join(errs, err)
				for _, k := range mine {
					if k.Card == card {
						failed = append(failed, k)
					}
				}
				continue
			}
			unlock = u
		default:
			// A rollback's key on a card it does not hold: left, held by
			// the claim, for the runtime's unprepare.
			for _, k := range mine {
				if k.Card == card {
					failed = append(failed, k)
				}
			}
			continue
		}
		for _, k := range mine {
			if k.Card != card {
				continue
			}
			if err := m.undo(ctx, k); err != nil {
				errs = errors.Join(errs, err)
				failed = append(failed, k)
				continue
			}
			done = append(done, k)
			changed = changed || !k.Whole
			fault("release/undone")
		}
		for _, k := range left {
			if k.Card != card {
				continue
			}
			if err := m.undo(ctx, k); err != nil {
				logger.Error(err, "Could not destroy a partition an earlier start left; the next release on its card or the next start tries again", "key", k.String())
				continue
			}
			done = append(done, k)
			changed = true
		}
		unlock()
	}
	if err := m.journal.settle(uid, done, failed); err != nil {
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
