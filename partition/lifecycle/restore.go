package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/klog/v2"
)

// Restore records partitions that the claims the runtime holds hold by
// the runtime's checkpoint (the vendor's prepared data says the
// lifecycle made them for the claim) but that the state folder no longer
// records: it was lost or wiped since. held maps each such key to the
// UIDs of the claims holding it. Call it before [Manager.Reconcile].
//
// A key on a card that is not [Dynamic] (the administrator dropped the
// card from [WithDynamicCards] in the same restart) makes the card
// [Draining] with the key recorded as the claims': Reconcile keeps the
// partition while a claim holds it, the release destroys it (or, for a
// card held whole, switches it back to partitions), and [Manager.Owns]
// reports it as the lifecycle's, so that a partition the lifecycle made
// is never taken for an administrator's. A key on a Dynamic card needs
// nothing (Reconcile records what a held claim names there), nor does a
// key the journal records already.
func (m *Manager) Restore(ctx context.Context, held map[Key][]string) error {
	intents, err := m.journal.intents()
	if err != nil {
		return fmt.Errorf("restore partitions: %w", err)
	}
	recorded := map[Key]bool{}
	for _, in := range intents {
		recorded[in.Key] = true
	}
	var restored []Key
	for _, k := range slices.SortedFunc(maps.Keys(held), compareKeys) {
		if err := k.check(); err != nil {
			return fmt.Errorf("restore partitions: %w", err)
		}
		if m.State(k.Card) == Dynamic || recorded[k] || len(held[k]) == 0 {
			continue
		}
		unlock, err := m.folder.lockCard(ctx, k.Card)
		if err != nil {
			return fmt.Errorf("restore partitions: %w", err)
		}
		for _, c := range held[k] {
			if err == nil {
				err = m.journal.hold(k, c, nil)
			}
		}
		unlock()
		if err != nil {
			return fmt.Errorf("restore partition %s: %w", k, err)
		}
		restored = append(restored, k)
	}
	if len(restored) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for _, k := range restored {
		if m.states[k.Card] == NotDynamic {
			m.states[k.Card] = Draining
			changed = true
		}
		klog.FromContext(ctx).
			Info("Restored a partition the runtime's checkpoint says the lifecycle made and the "+
				"state folder lost; its card is drained", "key", k.String(), "claims", held[k])
	}
	if !changed {
		return nil
	}
	return writeCards(m.dir, m.states, m.o.writeOption...)
}
