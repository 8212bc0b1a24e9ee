package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
)

// ErrCardBusy is wrapped by [Manager.PrepareClaim]'s error for a card
// wanted whole while a claim holds one of its partitions, or a
// partition wanted while a claim holds its card whole. The scheduler
// never allocates both (they share the card's counters); the refusal
// covers a new claim prepared before the old one is unprepared.
var ErrCardBusy = errors.New("card is in use")

// ErrConfigMismatch is wrapped by [Manager.PrepareClaim]'s error for a
// partition that another claim holds with another configuration (see
// [ConfigCreator]): it is made afresh for this claim once the other is
// unprepared, so the kubelet's retry succeeds then.
var ErrConfigMismatch = errors.New("partition is held with another configuration")

// PrepareClaim makes the claim's partitions on dynamic cards: for each
// device that keyOf names on a [Dynamic] card, the journal records that
// the claim holds it, then the tool makes it ([Tool.Create]; on a card
// left in whole mode it switches the card back first). A card wanted
// whole ([WholeCard]) is recorded as held, its partitions that no claim
// holds are destroyed, and it is switched to whole mode (by a
// [WholeSwitcher]; a tool without one needs no switch). A device with
// admin access, one that is no partition, or one on a card that is not
// dynamic is left alone (nothing is made for it). It holds the locks of
// the claim's cards (taken in sorted order) until it returns, so a claim
// with a partition on a lost card delays other claims' work on its other
// cards until the lost card's tool call fails or ctx ends.
//
// With [WithConfigs], the opaque configuration of every device of the
// claim is decoded and checked first: a bad one fails the prepare
// (a [driver.ClaimError] with [driver.ReasonConfig]) before anything is
// recorded or made, and a good one reaches a [ConfigCreator].
//
// A failed PrepareClaim leaves nothing of the claim: what it holds is
// released and destroyed again; what cannot be destroyed stays recorded
// as the claim's, and the claim's next release (the runtime's rollback
// calls UnprepareClaim) or the next start destroys it. Repeating it for
// a prepared claim changes nothing (Create is idempotent).
func (m *Manager) PrepareClaim(ctx context.Context, claim driver.Claim, devs []driver.AllocatedDevice) error {
	configs, err := m.decode(devs)
	if err != nil {
		return err
	}
	keys, err := m.wanted(devs)
	if err != nil || len(keys) == 0 {
		return err
	}
	uid := string(claim.UID)
	var cards []string
	for _, k := range keys {
		if !slices.Contains(cards, k.Card) {
			cards = append(cards, k.Card)
		}
	}
	unlock, err := m.lockCards(ctx, cards)
	if err != nil {
		return err
	}
	defer unlock()
	made := false
	for _, k := range keys {
		if k.Whole {
			err = m.takeWhole(ctx, k, uid)
		} else {
			var p Partition
			if p, err = m.create(ctx, k, uid, configs[k]); err == nil {
				m.remember(p)
				made = true
				klog.FromContext(ctx).V(2).Info("Made partition", "claim", claim.ClaimRef.String(), "key", k.String(), "id", p.ID)
			}
		}
		if err != nil {
			if rerr := m.release(ctx, uid, cards); rerr != nil {
				err = fmt.Errorf("%w (undo: %v)", err, rerr)
			}
			made = true // something may have been made and destroyed
			break
		}
	}
	if made {
		m.rep.changed()
	}
	return err
}

// decode decodes and checks the configuration of every device (with a
// scheme, WithConfigs), and returns it by the device's partition key,
// as JSON too for the journal.
func (m *Manager) decode(devs []driver.AllocatedDevice) (map[Key]config, error) {
	if m.o.configs == nil {
		return nil, nil
	}
	out := map[Key]config{}
	for _, dev := range devs {
		v, err := m.o.configs.Decode(dev)
		if err != nil {
			err = fmt.Errorf("device %s: %w", dev.ID(), err)
			return nil, driver.NewClaimError(driver.ReasonConfig, err)
		}
		k, ok := m.keyOf(dev, nil)
		if _, seen := out[k]; !ok || seen || v == nil {
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("device %s: record its configuration: %w", dev.ID(), err)
		}
		out[k] = config{value: v, raw: raw}
	}
	return out, nil
}

// config is a device's decoded configuration and its JSON.
type config struct {
	value any
	raw   json.RawMessage
}

// wanted is the keys of the devices whose partitions the lifecycle
// makes: neither admin access nor a card that is not dynamic; sorted by
// card, a whole card before its partitions, each key once.
func (m *Manager) wanted(devs []driver.AllocatedDevice) ([]Key, error) {
	var keys []Key
	for _, dev := range devs {
		if dev.AdminAccess {
			continue // admin access changes nothing on a device
		}
		k, ok := m.keyOf(dev, nil)
		if !ok {
			continue
		}
		if err := k.check(); err != nil {
			return nil, fmt.Errorf("device %s: %w", dev.ID(), err)
		}
		if m.State(k.Card) != Dynamic || slices.Contains(keys, k) {
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys, nil
}

// lockCards takes the locks of cards in order (sorting cards).
func (m *Manager) lockCards(ctx context.Context, cards []string) (func(), error) {
	slices.Sort(cards)
	var unlocks []func()
	unlock := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, c := range cards {
		u, err := m.folder.lockCard(ctx, c)
		if err != nil {
			unlock()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return unlock, nil
}

// holdersOn lists the claims that hold card whole (whole) or one of its
// partitions (!whole).
func holdersOn(intents []Intent, card string, whole bool) []string {
	var out []string
	for _, in := range intents {
		if in.Card == card && in.Whole == whole {
			out = append(out, in.Claims...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// create records that claim uid holds k, then makes it. Card k.Card's
// lock is held.
func (m *Manager) create(ctx context.Context, k Key, uid string, cfg config) (Partition, error) {
	err := m.journal.holdWith(k, uid, cfg.raw, func(in []Intent) error {
		if held := holdersOn(in, k.Card, true); len(held) > 0 {
			return fmt.Errorf("%s: %w whole by claim %s; it can be partitioned once that claim is unprepared", k, ErrCardBusy, strings.Join(held, ", "))
		}
		return nil
	})
	if errors.Is(err, ErrCardBusy) || errors.Is(err, ErrConfigMismatch) {
		return Partition{}, err
	}
	if err != nil {
		return Partition{}, fmt.Errorf("record intent %s for claim %s: %w", k, uid, err)
	}
	_ = faults.At(ctx, "prepare/held", k.Card)
	p, err := m.toolCreate(ctx, k, cfg.value)
	if _, ok := m.tool.(WholeSwitcher); ok && errors.Is(err, ErrWholeMode) {
		// Used whole last, and its release could not switch it back.
		if err := m.toolSetWhole(ctx, k.Card, false); err != nil {
			return Partition{}, fmt.Errorf("create %s: switch the card from whole mode: %w", k, err)
		}
		p, err = m.toolCreate(ctx, k, cfg.value)
	}
	if err != nil {
		return Partition{}, fmt.Errorf("create %s: %w", k, err)
	}
	if p.Key != k || !p.Complete {
		return Partition{}, fmt.Errorf("create %s: the tool returned %+v, not the complete partition at the key", k, p)
	}
	_ = faults.At(ctx, "prepare/created", k.Card)
	return p, nil
}

// takeWhole gives claim uid card k.Card whole: the hold is recorded,
// the card's partitions that no claim holds (a destroy that failed) are
// destroyed, and the card is switched to whole mode (by a WholeSwitcher).
// Card k.Card's lock is held. Each step is idempotent.
func (m *Manager) takeWhole(ctx context.Context, k Key, uid string) error {
	err := m.journal.hold(k, uid, func(in []Intent) error {
		if held := holdersOn(in, k.Card, false); len(held) > 0 {
			return fmt.Errorf("%s: %w: partitions of the card are held by claim %s; it can be used whole once they are unprepared", k, ErrCardBusy, strings.Join(held, ", "))
		}
		return nil
	})
	if errors.Is(err, ErrCardBusy) {
		return err
	}
	if err != nil {
		return fmt.Errorf("record intent %s for claim %s: %w", k, uid, err)
	}
	_ = faults.At(ctx, "whole/held", k.Card)
	parts, err := m.toolList(ctx, k.Card)
	if err != nil {
		return fmt.Errorf("%s: list its partitions: %w", k, err)
	}
	var gone []Key
	for _, p := range parts {
		// No claim holds one (the hold above refused otherwise): a
		// destroy that failed earlier.
		if err := m.toolDestroy(ctx, p.Key); err != nil {
			return fmt.Errorf("%s: destroy %s, which no claim holds: %w", k, p.Key, err)
		}
		m.forget(p.Key)
		gone = append(gone, p.Key)
		klog.FromContext(ctx).Info("Destroyed a partition no claim holds before using its card whole", "key", p.Key.String())
	}
	if err := m.journal.settle("", k.Card, gone, nil); err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	if err := m.toolSetWhole(ctx, k.Card, true); err != nil {
		return fmt.Errorf("%s: switch to whole mode: %w", k, err)
	}
	_ = faults.At(ctx, "whole/switched", k.Card)
	return nil
}
