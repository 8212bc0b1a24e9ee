package lifecycle

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
)

// Key names a partition by what is known before it exists and what
// survives a crash: the card, the profile and where on the card the
// partition starts. The handle a vendor's tool gives a partition (an ID,
// a UUID) is born with the partition, so it cannot name one in an intent
// recorded before the create.
type Key struct {
	// Card is the card's stable identity (a serial number, a UUID),
	// never an index that changes when another card goes away (unbound,
	// lost, reset): a key outlives the process that made it.
	Card string `json:"card"`
	// Profile is the partition's profile in the vendor's scheme, e.g.
	// "1g.18gb"; empty when Whole.
	Profile string `json:"profile,omitempty"`
	// Start is where the partition begins on the card, in the scheme's
	// units (the first memory slice of a MIG device).
	Start int `json:"start,omitempty"`
	// Whole names the card itself, used whole instead of partitioned
	// (see [WholeSwitcher]); Profile and Start are then empty.
	Whole bool `json:"whole,omitempty"`
}

// WholeCard is the key of card used whole.
func WholeCard(card string) Key { return Key{Card: card, Whole: true} }

// String prints "card C profile P at S" or "card C whole".
func (k Key) String() string {
	if k.Whole {
		return fmt.Sprintf("card %s whole", k.Card)
	}
	return fmt.Sprintf("card %s profile %s at %d", k.Card, k.Profile, k.Start)
}

// check says what is wrong with a key a vendor handed over.
func (k Key) check() error {
	switch {
	case k.Card == "":
		return fmt.Errorf("%w: %s: no card", ErrInvalidKey, k)
	case k.Whole && (k.Profile != "" || k.Start != 0):
		return fmt.Errorf("%w: %s: a whole card has no profile or start", ErrInvalidKey, k)
	case !k.Whole && k.Profile == "":
		return fmt.Errorf("%w: %s: no profile", ErrInvalidKey, k)
	case k.Start < 0:
		return fmt.Errorf("%w: %s: negative start", ErrInvalidKey, k)
	}
	return nil
}

// compareKeys orders keys by card, whole first, then start and profile.
func compareKeys(a, b Key) int {
	if c := strings.Compare(a.Card, b.Card); c != 0 {
		return c
	}
	if a.Whole != b.Whole {
		if a.Whole {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Start, b.Start), strings.Compare(a.Profile, b.Profile))
}

// Partition is a partition as a [Tool] lists or makes it.
type Partition struct {
	Key
	// ID is the handle the vendor's tool gave the partition (a MIG
	// device's UUID); empty for a partition made only in part.
	ID string `json:"id,omitempty"`
	// Complete is false for a partition the tool made only in part (a
	// create cut short between its steps): it serves nothing, and the
	// lifecycle destroys it unless a claim holds it.
	Complete bool `json:"complete"`
}

// ErrInvalidKey is wrapped by the error for a key without a card, a
// partition key without a profile, or a whole-card key with one.
var ErrInvalidKey = errors.New("invalid partition key")
