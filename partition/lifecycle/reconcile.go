package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
)

// Reconcile makes the partitions of the dynamic and draining cards, and
// the journal, match the claims the runtime holds (see
// [driver.Reconciler]); the runtime calls it once at start, after it
// undid the claims left half-way and before it serves the kubelet:
//
//   - a partition that a held claim names (by keyOf, or by the journal
//     for a claim the runtime holds) is kept and recorded as that
//     claim's, also when the journal lost it; a claim with admin access
//     holds nothing;
//   - on a [Dynamic] card every other partition, complete or made in
//     part, is destroyed: the card is the lifecycle's;
//   - on a [Draining] card the other partitions that the journal
//     records are destroyed, and those it does not record are the
//     administrator's and left alone; a drained card (nothing of the
//     lifecycle's left) becomes [NotDynamic];
//   - a card that no held claim has whole is switched back from whole
//     mode (a release that crashed before it; a failure is logged);
//   - a lost claim (its checkpoint record was corrupt) keeps what the
//     journal says it holds, until its release.
//
// A card that cannot be read keeps its records as they are and does not
// stop the others; its error is returned with the others' at the end.
func (m *Manager) Reconcile(ctx context.Context, held []driver.HeldClaim) error {
	logger := klog.FromContext(ctx)
	holders := map[Key][]string{}
	claims := map[string]bool{}
	for _, c := range held {
		claims[string(c.UID)] = true
		for _, dev := range c.Devices {
			if dev.AdminAccess {
				continue
			}
			if k, ok := m.keyOf(dev.AllocatedDevice, dev.Data); ok && k.check() == nil {
				holders[k] = append(holders[k], string(c.UID))
			}
		}
	}
	intents, err := m.journal.intents()
	if err != nil {
		return fmt.Errorf("reconcile partitions: %w", err)
	}
	for _, in := range intents {
		for _, c := range in.Claims {
			if claims[c] { // a lost claim's, or one whose device keyOf cannot name now
				holders[in.Key] = append(holders[in.Key], c)
			}
		}
	}
	recorded := map[Key]bool{}
	for _, in := range intents {
		recorded[in.Key] = true
	}
	m.mu.Lock()
	states := maps.Clone(m.states)
	m.mu.Unlock()
	// The cards are reconciled side by side, and a card that does not
	// answer within the card timeout keeps its records as they are: a
	// lost card never holds up the start.
	type result struct {
		keep      []Intent
		destroyed []string
		err       error
	}
	cards := sortedCards(states)
	cctx, cancel := context.WithTimeout(ctx, m.o.cardTimeout)
	defer cancel()
	results := make([]chan result, len(cards))
	for i, card := range cards {
		results[i] = make(chan result, 1)
		go func() {
			unlock, err := m.folder.lockCard(cctx, card)
			if err != nil {
				results[i] <- result{err: err}
				return
			}
			defer unlock()
			k, d, err := m.reconcileCard(cctx, card, states[card], holders, recorded, intents)
			results[i] <- result{k, d, err}
		}()
	}
	var keep []Intent
	var destroyed []string
	var errs error
	for i, card := range cards {
		var r result
		select {
		case r = <-results[i]:
		case <-cctx.Done():
			r = result{err: fmt.Errorf("no answer within %v (%w); its records are kept as they are", m.o.cardTimeout, context.Cause(cctx))}
		}
		if r.err != nil && r.keep == nil {
			r.keep = intentsOn(intents, card)
		}
		keep, destroyed = append(keep, r.keep...), append(destroyed, r.destroyed...)
		if r.err != nil {
			errs = errors.Join(errs, fmt.Errorf("reconcile partitions of card %s: %w", card, r.err))
		}
	}
	slices.SortFunc(keep, func(a, b Intent) int { return compareKeys(a.Key, b.Key) })
	if err := m.journal.replace(keep); err != nil {
		return errors.Join(errs, fmt.Errorf("reconcile partitions: %w", err))
	}
	if err := m.dropDrained(keep); err != nil {
		errs = errors.Join(errs, fmt.Errorf("reconcile partitions: %w", err))
	}
	logger.Info("Reconciled partitions with the held claims", "kept", len(keep), "destroyed", destroyed)
	if len(destroyed) > 0 {
		m.rep.changed()
	}
	return errs
}

// reconcileCard reconciles one card (its lock held) and returns the
// intents to keep and the partitions it destroyed.
func (m *Manager) reconcileCard(ctx context.Context, card string, state CardState, holders map[Key][]string, recorded map[Key]bool, intents []Intent) (keep []Intent, destroyed []string, err error) {
	logger := klog.FromContext(ctx)
	hold := func(k Key, claims []string) {
		c := slices.Clone(claims)
		slices.Sort(c)
		in := Intent{Key: k, Claims: slices.Compact(c)}
		if i := slices.IndexFunc(intents, func(in Intent) bool { return in.Key == k }); i >= 0 {
			in.Config = intents[i].Config
		}
		keep = append(keep, in)
	}
	// On a draining card only what the journal records is the
	// lifecycle's: a held claim's partition it does not record is the
	// administrator's (a claim on it holds it as is).
	mine := func(k Key) bool { return state == Dynamic || recorded[k] }
	whole := WholeCard(card)
	if c := holders[whole]; len(c) > 0 && mine(whole) {
		hold(whole, c)
	} else if mine(whole) {
		if err := m.toolSetWhole(ctx, card, false); err != nil && !errors.Is(err, ErrCardGone) {
			// The card's next partition tries again.
			logger.Error(err, "Could not switch a card no claim holds whole back from whole mode", "card", card)
		}
	}
	parts, err := m.toolList(ctx, card)
	if errors.Is(err, ErrCardGone) {
		// Its partitions went with it: keep only what held claims name,
		// so that their release finds the record.
		for k, c := range holders {
			if k.Card == card && !k.Whole && mine(k) {
				hold(k, c)
			}
		}
		logger.Info("A card with partitions is gone; forgetting what no claim holds", "card", card)
		return keep, nil, nil
	}
	if err != nil {
		return intentsOn(intents, card), nil, err
	}
	listed := map[Key]bool{}
	var errs error
	for _, p := range parts {
		listed[p.Key] = true
		if !mine(p.Key) {
			continue // the administrator's, on a card being drained
		}
		if c := holders[p.Key]; len(c) > 0 {
			hold(p.Key, c)
			continue
		}
		_ = faults.At(ctx, "reconcile/destroy", card)
		if err := m.toolDestroy(ctx, p.Key); err != nil {
			keep = append(keep, Intent{Key: p.Key, Claims: []string{}}) // released: the next release or start destroys it
			errs = errors.Join(errs, fmt.Errorf("destroy %s, which no held claim names: %w", p.Key, err))
			continue
		}
		m.forget(p.Key)
		destroyed = append(destroyed, p.Key.String())
	}
	// A held claim's partition that is not there (destroyed behind the
	// lifecycle's back) stays recorded for its release.
	for k, c := range holders {
		if k.Card == card && !k.Whole && !listed[k] && mine(k) {
			hold(k, c)
		}
	}
	return keep, destroyed, errs
}

// dropDrained removes from the card record the draining cards on which
// nothing of the lifecycle's is left.
func (m *Manager) dropDrained(keep []Intent) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for c, s := range m.states {
		if s == Draining && !slices.ContainsFunc(keep, func(in Intent) bool { return in.Card == c }) {
			delete(m.states, c)
			changed = true
			klog.Background().Info("Card drained: nothing of the lifecycle's is left on it; it is the administrator's", "card", c)
		}
	}
	if !changed {
		return nil
	}
	return writeCards(m.dir, m.states, m.o.writeOption...)
}

// intentsOn is what the journal says of card: what a card that cannot be
// read keeps.
func intentsOn(intents []Intent, card string) []Intent {
	var out []Intent
	for _, in := range intents {
		if in.Card == card {
			out = append(out, in)
		}
	}
	return out
}
