package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/statefile"
)

// JournalFile is the intent journal's file in the state folder.
const JournalFile = "intents.json"

// Intent is one record of the intent journal: a partition the lifecycle
// made or is about to make, and the claims that hold it.
type Intent struct {
	Key
	// Claims are the UIDs of the claims that hold the partition, sorted;
	// empty (not nil, [] in the file) once the last holder was released
	// and until the partition is destroyed.
	Claims []string `json:"claims"`
	// Config is the configuration the partition was made with, as JSON
	// (see [ConfigCreator]); empty when none applied.
	Config json.RawMessage `json:"config,omitempty"`
}

// Released reports whether the intent's last holder went: its partition
// is to be destroyed, then the intent forgotten.
func (in Intent) Released() bool { return len(in.Claims) == 0 }

// CardInUse returns what intents (Manager.Intents) hold in use on card,
// a Key's Card: the partitions of the intents not released (being made
// for a claim, or made and held), in intents' order, and
// whether one holds the card whole. A released intent is left out: its
// partition is in use only while the hardware still lists it. This is
// what partition/ledger.InUse takes from the journal.
func CardInUse(intents []Intent, card string) (partition.Layout, bool) {
	var out partition.Layout
	whole := false
	for _, in := range intents {
		switch {
		case in.Card != card || in.Released():
		case in.Whole:
			whole = true
		default:
			out = append(out, partition.Instance{Profile: in.Profile, Start: in.Start, InUse: true})
		}
	}
	return out, whole
}

// drop removes claim from the intent's holders without changing the
// slice it was given; true when claim held it.
func (in *Intent) drop(claim string) bool {
	n := slices.Index(in.Claims, claim)
	if n < 0 {
		return false
	}
	in.Claims = slices.Delete(slices.Clone(in.Claims), n, n+1)
	return true
}

type journalDoc struct {
	Intents []Intent `json:"intents"`
}

// find is the index of the intent for k, -1 when there is none.
func (d *journalDoc) find(k Key) int {
	return slices.IndexFunc(d.Intents, func(i Intent) bool { return i.Key == k })
}

// ErrCorruptJournal is wrapped by the error of a journal file that cannot
// be decoded. [Open] moves such a file aside and starts a new journal,
// which [Manager.Reconcile] rebuilds from the partitions and the claims
// the runtime holds.
var ErrCorruptJournal = errors.New("partition intent journal is corrupt")

// journal is the file of intents: each change is one atomic replace of
// the file under its lock (statefile.Document), durable before it
// returns unless volatile.
type journal struct{ file statefile.Document }

// corrupt wraps a decode error with ErrCorruptJournal.
func (j *journal) corrupt(err error) error {
	var de *statefile.DecodeError
	if errors.As(err, &de) {
		return fmt.Errorf("%w: %s: %w", ErrCorruptJournal, j.file.Path, err)
	}
	return err
}

// ReadIntents returns the intent journal in the state folder dir (empty
// when there is none), as the process that holds the folder last wrote
// it, without taking the folder's lock: what a check of a node, or a
// test, reads of the running driver's records.
func ReadIntents(dir string) ([]Intent, error) {
	j := journal{file: statefile.Document{Path: filepath.Join(dir, JournalFile)}}
	return j.intents()
}

// intents returns the recorded intents, by key.
func (j *journal) intents() ([]Intent, error) {
	var d journalDoc
	if _, err := j.file.Read(&d); err != nil {
		return nil, fmt.Errorf("read partition intent journal: %w", j.corrupt(err))
	}
	slices.SortFunc(d.Intents, func(a, b Intent) int { return compareKeys(a.Key, b.Key) })
	return d.Intents, nil
}

// update changes the journal under its lock; fn says whether it changed
// anything, or refuses with an error, in which case nothing is written
// and the error is returned as it is.
func (j *journal) update(fn func(d *journalDoc) (bool, error)) error {
	var d journalDoc
	var refused error
	err := j.file.Update(&d, func(bool) (bool, error) {
		changed, err := fn(&d)
		if err != nil {
			refused = err
			return false, nil
		}
		return changed, nil
	})
	if err != nil {
		return j.corrupt(err)
	}
	return refused
}

// hold records that claim holds k, after refuse (nil: none) accepted
// the intents as they are, in one read-modify-write.
func (j *journal) hold(k Key, claim string, refuse func([]Intent) error) error {
	return j.holdWith(k, claim, nil, refuse)
}

// holdWith is hold for a partition made with configuration cfg: another
// holder with another configuration refuses it.
func (j *journal) holdWith(k Key, claim string, cfg json.RawMessage,
	refuse func([]Intent) error) error {
	return j.update(func(d *journalDoc) (bool, error) {
		if refuse != nil {
			if err := refuse(d.Intents); err != nil {
				return false, err
			}
		}
		i := d.find(k)
		if i < 0 {
			d.Intents = append(d.Intents, Intent{Key: k, Claims: []string{claim}, Config: cfg})
			return true, nil
		}
		in := &d.Intents[i]
		if slices.Contains(in.Claims, claim) {
			return false, nil
		}
		if !in.Released() && !sameJSON(in.Config, cfg) {
			return false, fmt.Errorf("%s: %w by claim %s (%s, this claim %s)", k, ErrConfigMismatch,
				strings.Join(in.Claims, ", "), orNone(in.Config), orNone(cfg))
		}
		in.Config = cfg
		d.Intents[i].Claims = append(slices.Clone(d.Intents[i].Claims), claim)
		slices.Sort(d.Intents[i].Claims)
		return true, nil
	})
}

// settle removes claim (none when "") from every intent on card but
// those in kept (their destroy failed: the claim still holds them), and
// forgets the intents on card whose partitions are gone (done) and that
// no claim holds any more, in one write.
func (j *journal) settle(claim, card string, done, kept []Key) error {
	return j.update(func(d *journalDoc) (bool, error) {
		changed := false
		out := d.Intents[:0]
		for _, in := range d.Intents {
			if in.Card != card {
				out = append(out, in)
				continue
			}
			if claim != "" && !slices.Contains(kept, in.Key) && in.drop(claim) {
				changed = true
			}
			if in.Released() && slices.Contains(done, in.Key) {
				changed = true
				continue
			}
			out = append(out, in)
		}
		d.Intents = out
		return changed, nil
	})
}

// replace makes intents the journal's whole content.
func (j *journal) replace(intents []Intent) error {
	return j.update(func(d *journalDoc) (bool, error) {
		same := func(a, b Intent) bool {
			return a.Key == b.Key && slices.Equal(a.Claims, b.Claims) && sameJSON(a.Config, b.Config)
		}
		if slices.EqualFunc(d.Intents, intents, same) {
			return false, nil
		}
		d.Intents = slices.Clone(intents)
		return true, nil
	})
}

// sameJSON reports whether two configurations are equal as JSON, the
// file's indentation aside.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil &&
		bytes.Equal(ca.Bytes(), cb.Bytes())
}

func orNone(cfg json.RawMessage) string {
	var c bytes.Buffer
	if len(cfg) == 0 || json.Compact(&c, cfg) != nil {
		return "no configuration"
	}
	return c.String()
}
