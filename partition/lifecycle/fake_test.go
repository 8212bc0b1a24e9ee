package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/drakit/drakit/statefile"
)

// fakeTool is a vendor's partition tool on cards of 8 units, with rules
// like MIG's: profile "<n>u" is n units, placed at a multiple of n;
// partitions must not overlap; a card holds at most 7 partitions and at
// most 3 of "2u"; a card in whole mode holds none, and switches only
// while it holds none. Create and Destroy each take two steps, so a
// process killed between them leaves a partition made in part. Its
// state is a file, shared by the processes of a test, like a card's.
// Cards that are lost answer every call with an error (or, hanging,
// block until their context ends); cards not in the state are gone.
type fakeTool struct {
	doc statefile.Document
	// hang holds the calls on lost cards that hang until it is closed
	// (nil: lost cards fail at once).
	hang chan struct{}
	// fail, when set, is asked before each step ("create", "create/2",
	// "destroy", "destroy/2", "list", "whole") and fails it with its
	// error.
	fail func(op string, k Key) error
}

type fakeCard struct {
	Whole bool       `json:"whole,omitempty"`
	Lost  bool       `json:"lost,omitempty"`
	Parts []fakePart `json:"parts,omitempty"`
}

type fakePart struct {
	Profile  string `json:"profile"`
	Start    int    `json:"start"`
	ID       string `json:"id,omitempty"`
	Complete bool   `json:"complete"`
}

type fakeState struct {
	Cards map[string]*fakeCard `json:"cards"`
}

// toolHook is called at the tool's inner steps ("tool/create-half",
// "tool/destroy-half") by the test binary's crash child.
var toolHook func(point string)

func newFakeTool(path string, cards ...string) (*fakeTool, error) {
	t := &fakeTool{doc: statefile.Document{Path: path, Volatile: true}}
	err := t.change(func(st *fakeState) error {
		for _, c := range cards {
			if st.Cards[c] == nil {
				st.Cards[c] = &fakeCard{}
			}
		}
		return nil
	})
	return t, err
}

func (t *fakeTool) change(fn func(st *fakeState) error) error {
	var st fakeState
	return t.doc.Update(&st, func(bool) (bool, error) {
		if st.Cards == nil {
			st.Cards = map[string]*fakeCard{}
		}
		err := fn(&st)
		return true, err
	})
}

func (t *fakeTool) view() (fakeState, error) {
	var st fakeState
	_, err := t.doc.Read(&st)
	if st.Cards == nil {
		st.Cards = map[string]*fakeCard{}
	}
	return st, err
}

// card checks that the card answers.
func (t *fakeTool) card(_ context.Context, st *fakeState, card string) (*fakeCard, error) {
	c := st.Cards[card]
	if c == nil {
		return nil, fmt.Errorf("card %s: %w", card, ErrCardGone)
	}
	if c.Lost {
		return nil, fmt.Errorf("card %s is lost: it answers nothing until it is reset", card)
	}
	return c, nil
}

// enter is the start of every call on card: a lost card that hangs
// holds the call (and nothing else: no lock is held) until ctx ends or
// hang is closed.
func (t *fakeTool) enter(ctx context.Context, op string, k Key) error {
	if t.fail != nil {
		if err := t.fail(op, k); err != nil {
			return err
		}
	}
	if t.hang == nil {
		return nil
	}
	st, err := t.view()
	if err != nil {
		return err
	}
	if c := st.Cards[k.Card]; c != nil && c.Lost {
		select {
		case <-t.hang:
		case <-ctx.Done():
		}
	}
	return nil
}

func size(profile string) (int, error) {
	var n int
	if _, err := fmt.Sscanf(profile, "%du", &n); err != nil || (n != 1 && n != 2 && n != 4 && n != 8) {
		return 0, fmt.Errorf("no profile %q", profile)
	}
	return n, nil
}

func (t *fakeTool) check(op string, k Key) error {
	if t.fail != nil {
		return t.fail(op, k)
	}
	return nil
}

func (t *fakeTool) Create(ctx context.Context, k Key) (Partition, error) {
	if err := t.enter(ctx, "create", k); err != nil {
		return Partition{}, err
	}
	n, err := size(k.Profile)
	if err != nil {
		return Partition{}, err
	}
	if k.Start%n != 0 || k.Start+n > 8 {
		return Partition{}, fmt.Errorf("create %s: start %d is no placement of %s", k, k.Start, k.Profile)
	}
	var p Partition
	err = t.change(func(st *fakeState) error {
		c, err := t.card(ctx, st, k.Card)
		if err != nil {
			return err
		}
		if c.Whole {
			return fmt.Errorf("create %s: %w", k, ErrWholeMode)
		}
		count := map[string]int{}
		for _, q := range c.Parts {
			if q.Profile == k.Profile && q.Start == k.Start {
				p = Partition{Key: k, ID: q.ID, Complete: q.Complete}
				return nil // made before, in full or in part
			}
			m, _ := size(q.Profile)
			if k.Start < q.Start+m && q.Start < k.Start+n {
				return fmt.Errorf("create %s: overlaps %s at %d", k, q.Profile, q.Start)
			}
			count[q.Profile]++
		}
		if len(c.Parts) >= 7 || (k.Profile == "2u" && count["2u"] >= 3) {
			return fmt.Errorf("create %s: the card's limits allow no more", k)
		}
		c.Parts = append(c.Parts, fakePart{Profile: k.Profile, Start: k.Start})
		p = Partition{Key: k}
		return nil
	})
	if err != nil || p.Complete {
		return p, err
	}
	if toolHook != nil {
		toolHook("tool/create-half")
	}
	if err := t.check("create/2", k); err != nil {
		return Partition{}, err
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	err = t.change(func(st *fakeState) error {
		c, err := t.card(ctx, st, k.Card)
		if err != nil {
			return err
		}
		for i := range c.Parts {
			if q := &c.Parts[i]; q.Profile == k.Profile && q.Start == k.Start {
				q.ID, q.Complete = "P-"+hex.EncodeToString(id), true
				p = Partition{Key: k, ID: q.ID, Complete: true}
				return nil
			}
		}
		return fmt.Errorf("create %s: destroyed between the steps", k)
	})
	return p, err
}

func (t *fakeTool) Destroy(ctx context.Context, k Key) error {
	if err := t.enter(ctx, "destroy", k); err != nil {
		return err
	}
	found := false
	err := t.change(func(st *fakeState) error {
		c, err := t.card(ctx, st, k.Card)
		if err != nil {
			return err
		}
		for i := range c.Parts {
			if q := &c.Parts[i]; q.Profile == k.Profile && q.Start == k.Start {
				q.Complete, found = false, true // first step: it serves nothing
			}
		}
		return nil
	})
	if err != nil || !found {
		return err
	}
	if toolHook != nil {
		toolHook("tool/destroy-half")
	}
	if err := t.check("destroy/2", k); err != nil {
		return err
	}
	return t.change(func(st *fakeState) error {
		c, err := t.card(ctx, st, k.Card)
		if err != nil {
			return err
		}
		c.Parts = slices.DeleteFunc(c.Parts, func(q fakePart) bool { return q.Profile == k.Profile && q.Start == k.Start })
		return nil
	})
}

func (t *fakeTool) List(ctx context.Context, card string) ([]Partition, error) {
	if err := t.enter(ctx, "list", Key{Card: card}); err != nil {
		return nil, err
	}
	st, err := t.view()
	if err != nil {
		return nil, err
	}
	c, err := t.card(ctx, &st, card)
	if err != nil {
		return nil, err
	}
	var out []Partition
	for _, q := range c.Parts {
		out = append(out, Partition{Key: Key{Card: card, Profile: q.Profile, Start: q.Start}, ID: q.ID, Complete: q.Complete})
	}
	return out, nil
}

func (t *fakeTool) SetWhole(ctx context.Context, card string, whole bool) error {
	if err := t.enter(ctx, "whole", WholeCard(card)); err != nil {
		return err
	}
	return t.change(func(st *fakeState) error {
		c, err := t.card(ctx, st, card)
		if err != nil {
			return err
		}
		if c.Whole == whole {
			return nil
		}
		if whole && len(c.Parts) > 0 {
			return fmt.Errorf("switch card %s to whole mode: it holds %d partitions", card, len(c.Parts))
		}
		c.Whole = whole
		return nil
	})
}

// set changes a card's state behind the lifecycle's back: an
// administrator's partition, a card lost or recovered.
func (t *fakeTool) set(card string, fn func(c *fakeCard)) error {
	return t.change(func(st *fakeState) error {
		c := st.Cards[card]
		if c == nil {
			return fmt.Errorf("no card %s", card)
		}
		fn(c)
		return nil
	})
}

// parts lists a card's partitions as "profile@start" ("~" suffix: made
// in part); "whole" for a card in whole mode.
func (t *fakeTool) parts(card string) ([]string, error) {
	st, err := t.view()
	if err != nil {
		return nil, err
	}
	c := st.Cards[card]
	if c == nil {
		return nil, fmt.Errorf("no card %s", card)
	}
	var out []string
	if c.Whole {
		out = append(out, "whole")
	}
	for _, q := range c.Parts {
		s := fmt.Sprintf("%s@%d", q.Profile, q.Start)
		if !q.Complete {
			s += "~"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}
