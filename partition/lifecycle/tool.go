package lifecycle

import (
	"context"
	"errors"

	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
)

// Tool is what a vendor implements for its partitions: the binding of
// its partition tool or library (NVML for MIG). The lifecycle calls it
// only for cards the administrator named dynamic (and for cards being
// drained, to destroy what it made there), only with keys the intent
// journal records, and never twice at once for one card.
//
// An error for a card that is no longer on the node wraps [ErrCardGone]:
// its partitions went with it, and their intents are forgotten. Any
// other error (a card that is lost, hung or refuses) keeps the intents,
// and the step is tried again by the next release and the next start;
// it never stops the work on another card.
type Tool interface {
	// Create makes the partition at k and returns it, complete. It must
	// be idempotent: a complete partition at k is returned as it is, and
	// one made only in part (a crash between the tool's steps) is
	// completed. It fails for a partition that overlaps another or that
	// the card's limits do not allow; what a failed Create leaves at k
	// the lifecycle destroys. On a card in whole mode it fails with an
	// error wrapping [ErrWholeMode].
	Create(ctx context.Context, k Key) (Partition, error)
	// Destroy removes the partition at k, complete or made in part, and
	// nothing else. A partition that is not there is success.
	Destroy(ctx context.Context, k Key) error
	// List returns every partition on card, complete or made in part:
	// the lifecycle's and anyone else's. A card in whole mode has none.
	List(ctx context.Context, card string) ([]Partition, error)
}

// WholeSwitcher is optionally implemented by a [Tool] whose cards serve
// either as partitions or whole, with a mode switch between the two (MIG
// mode on or off). SetWhole(card, true) is called when a claim takes the
// card whole ([WholeCard]), only when no partition is on the card, and
// SetWhole(card, false) when its last holder is released (or when Create
// says [ErrWholeMode]). It must be idempotent, so that a crash between
// its steps is finished by the next call.
//
// A Tool whose cards need no switch (a card used whole is a card with no
// partition) does not implement it: a whole card is offered all the same,
// and the lifecycle keeps the guard: it refuses the card whole while a
// claim holds one of its partitions and a partition while a claim holds
// the card whole ([ErrCardBusy]), and destroys the card's partitions that
// no claim holds before it hands the card over whole.
type WholeSwitcher interface {
	SetWhole(ctx context.Context, card string, whole bool) error
}

// ConfigCreator is optionally implemented by a [Tool] whose partitions
// take a setting from the claim when they are made (a partition's memory
// mode, its compute share). The lifecycle then calls CreateWithConfig
// instead of Create, with the device's opaque configuration as the
// driver's [driver.ConfigScheme] decoded it (see [WithConfigs]; nil when
// none applies), checked before anything of the claim was made. It is
// Create's contract otherwise, with this addition: a partition at k made
// before with another setting (a destroy that failed) is given the
// setting, or the call fails. Two claims share a partition only with
// equal configurations ([ErrConfigMismatch]).
type ConfigCreator interface {
	CreateWithConfig(ctx context.Context, k Key, config any) (Partition, error)
}

var (
	// ErrCardGone is wrapped by a [Tool]'s error for a card that is no
	// longer on the node: its partitions are gone with it.
	ErrCardGone = errors.New("card is not on this node")
	// ErrWholeMode is wrapped by [Tool.Create]'s error on a card in
	// whole mode; the lifecycle switches the card back (a
	// [WholeSwitcher]) and creates again.
	ErrWholeMode = errors.New("card is in whole mode")
)

// The Manager's calls of the tool, each between two steps of the fault
// seam (a test binary kills the process there, or fails the call as a
// lost card does).

func (m *Manager) toolCreate(ctx context.Context, k Key, config any) (Partition, error) {
	if err := faults.At(ctx, "tool/create", k.Card); err != nil {
		return Partition{}, err
	}
	var p Partition
	var err error
	if cc, ok := m.tool.(ConfigCreator); ok {
		p, err = cc.CreateWithConfig(ctx, k, config)
	} else {
		p, err = m.tool.Create(ctx, k)
	}
	_ = faults.At(ctx, "tool/created", k.Card)
	return p, err
}

func (m *Manager) toolDestroy(ctx context.Context, k Key) error {
	if err := faults.At(ctx, "tool/destroy", k.Card); err != nil {
		return err
	}
	err := m.tool.Destroy(ctx, k)
	_ = faults.At(ctx, "tool/destroyed", k.Card)
	return err
}

func (m *Manager) toolList(ctx context.Context, card string) ([]Partition, error) {
	if err := faults.At(ctx, "tool/list", card); err != nil {
		return nil, err
	}
	parts, err := m.tool.List(ctx, card)
	_ = faults.At(ctx, "tool/listed", card)
	return parts, err
}

// toolSetWhole switches card's mode; a tool without a switch has
// nothing to do.
func (m *Manager) toolSetWhole(ctx context.Context, card string, whole bool) error {
	sw, ok := m.tool.(WholeSwitcher)
	if !ok {
		return nil
	}
	if err := faults.At(ctx, "tool/switch", card); err != nil {
		return err
	}
	err := sw.SetWhole(ctx, card, whole)
	_ = faults.At(ctx, "tool/switched", card)
	return err
}
