package lifecycle

import (
	"context"
	"errors"
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
// mode on or off): the lifecycle then offers a card whole with
// [WholeCard] keys. SetWhole(card, true) is called only when no
// partition is on the card, and must be idempotent, so that a crash
// between its steps is finished by the next call.
type WholeSwitcher interface {
	SetWhole(ctx context.Context, card string, whole bool) error
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
