package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/drakit/drakit/statefile"
)

// CardsFile is the record of the cards' states in the state folder.
const CardsFile = "cards.json"

// CardState is how the lifecycle treats a card.
type CardState string

const (
	// NotDynamic is every card the administrator did not name dynamic
	// and on which the lifecycle has nothing of its own: it never
	// creates, destroys or switches anything on it.
	NotDynamic CardState = ""
	// Dynamic is a card the administrator named ([WithDynamicCards]):
	// every partition on it is the lifecycle's, made at prepare, and at
	// start each one that no held claim names is destroyed.
	Dynamic CardState = "dynamic"
	// Draining is a card that was dynamic and is no longer named (or
	// that the intent journal names without it being named): nothing
	// new is made on it; the partitions the journal says the lifecycle
	// made stay while claims hold them and are destroyed when their
	// last holder goes (at start, those no held claim names); every
	// other partition on it is the administrator's and is never
	// touched. Once nothing of the lifecycle's is left on it, the card
	// is NotDynamic and its record is removed.
	Draining CardState = "draining"
)

type cardsDoc struct {
	Cards map[string]CardState `json:"cards"`
}

// readCards reads the record of card states in dir; a missing record is
// empty.
func readCards(dir string) (map[string]CardState, error) {
	var doc cardsDoc
	b, err := os.ReadFile(filepath.Join(dir, CardsFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return map[string]CardState{}, nil
	case err != nil:
		return nil, fmt.Errorf("read card record: %w", err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCorruptCards, filepath.Join(dir, CardsFile), err)
	}
	for c, s := range doc.Cards {
		if s != Dynamic && s != Draining {
			return nil, fmt.Errorf("%w: %s: card %s has state %q", errCorruptCards, filepath.Join(dir, CardsFile), c, s)
		}
	}
	if doc.Cards == nil {
		doc.Cards = map[string]CardState{}
	}
	return doc.Cards, nil
}

var errCorruptCards = errors.New("card record is corrupt")

// ReadCards returns the card states recorded in the state folder dir
// (empty when there is no record), as the last process that ran on it
// left them, without taking the folder's lock: what a read-only check of
// a node shows as the running driver's choice.
func ReadCards(dir string) (map[string]CardState, error) { return readCards(dir) }

// writeCards records the card states in dir.
func writeCards(dir string, cards map[string]CardState, opts ...statefile.WriteOption) error {
	b, err := json.MarshalIndent(cardsDoc{Cards: cards}, "", "  ")
	if err != nil {
		return fmt.Errorf("record card states: %w", err)
	}
	if err := statefile.WriteFile(filepath.Join(dir, CardsFile), append(b, '\n'), opts...); err != nil {
		return fmt.Errorf("record card states: %w", err)
	}
	return nil
}

// decideCards is the cards' states at start: the named cards are
// dynamic; a card recorded before, or that the journal names, and that
// is not named is draining.
func decideCards(named []string, recorded map[string]CardState, intents []Intent) map[string]CardState {
	out := map[string]CardState{}
	for c := range recorded {
		out[c] = Draining
	}
	for _, in := range intents {
		out[in.Card] = Draining
	}
	for _, c := range named {
		out[c] = Dynamic
	}
	return out
}

// sortedCards lists the cards of states, sorted.
func sortedCards(states map[string]CardState) []string {
	return slices.Sorted(maps.Keys(states))
}
