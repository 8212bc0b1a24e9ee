package driver

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drakit/drakit/statefile"
)

// Journal is an Owner backed by a file of intent records: Record (or
// Hold) a key before Lifecycle.Create, Forget it after Lifecycle.Destroy
// returned nil (Drop releases a claim, destroys and forgets in one
// write). Each change is durable (fsynced; see WithoutFsync) before
// it returns and safe against other processes using the same file
// (flock). Keys are matched with Key.Same, so a key with the GPU's UUID
// still names its device after the GPU's NVML index changed. An intent
// may name the claims that hold its device (Hold, Release), so that a
// device shared by several claims is destroyed only when its last holder
// goes. The reference driver uses one (see Owner).
type Journal struct {
	file statefile.Document
}

var _ Owner = (*Journal)(nil)

// Intent is one record of the journal: a device the driver made or is
// about to make, and the claims (UIDs) that hold it.
type Intent struct {
	Key
	// Claims are the UIDs of the claims holding the device: nil (null in
	// the file) when the intent was recorded without one (Record), empty
	// (not nil; [] in the file) when its last holder was released and
	// the device is yet to be destroyed.
	Claims []string `json:"claims"`
}

// drop removes claim from the intent's holders; an intent whose last
// holder goes is released (Claims empty, not nil). It reports whether
// claim held the intent, and never changes the slice it was given.
func (in *Intent) drop(claim string) bool {
	n := slices.Index(in.Claims, claim)
	if n < 0 {
		return false
	}
	in.Claims = slices.Delete(slices.Clone(in.Claims), n, n+1)
	if len(in.Claims) == 0 {
		in.Claims = []string{} // released: distinct from never held
	}
	return true
}

// released reports whether the intent's last holder went: its device is
// to be destroyed, then the intent forgotten. An intent recorded without
// holders (Record) is not released.
func (in Intent) released() bool { return in.Claims != nil && len(in.Claims) == 0 }

type journalDoc struct {
	Intents []Intent `json:"intents"`
}

// ErrCorruptJournal is wrapped by the journal's errors when its file
// cannot be decoded.
var ErrCorruptJournal = errors.New("MIG intent journal is corrupt")

// JournalOption configures OpenJournal.
type JournalOption func(*Journal)

// WithoutFsync makes the journal's changes survive a killed process (each
// is written to a temporary file and renamed over the journal) but not a
// power loss: they are not fsynced. That is enough for intents about MIG
// devices, which a power loss destroys too (a GPU comes up from a reset
// without MIG devices), and saves the journal's two fsyncs per change on
// the prepare path.
func WithoutFsync() JournalOption {
	return func(j *Journal) { j.file.Volatile = true }
}

// OpenJournal opens the journal at path, creating its folder; the file is
// created at the first Record. A file that cannot be decoded is an error
// wrapping ErrCorruptJournal that says what to do.
func OpenJournal(path string, opts ...JournalOption) (*Journal, error) {
	if path == "" {
		return nil, fmt.Errorf("open MIG intent journal: path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open MIG intent journal: %w", err)
	}
	j := &Journal{file: statefile.Document{Path: path}}
	for _, o := range opts {
		o(j)
	}
	if _, err := j.Keys(); err != nil {
		return nil, fmt.Errorf("open MIG intent journal: %w", err)
	}
	return j, nil
}

// Path is the journal's file.
func (j *Journal) Path() string { return j.file.Path }

// update changes the journal document under its lock.
func (j *Journal) update(fn func(d *journalDoc) bool) error {
	var d journalDoc
	err := j.file.Update(&d, func(bool) (bool, error) { return fn(&d), nil })
	return j.corrupt(err)
}

// corrupt wraps a decode error with ErrCorruptJournal and what to do.
func (j *Journal) corrupt(err error) error {
	var de *statefile.DecodeError
	if errors.As(err, &de) {
		return fmt.Errorf("%w: %s cannot be decoded (%v): move it away and restart the driver; the driver then rebuilds it from the MIG devices on its GPUs and the claims it holds: %w", ErrCorruptJournal, j.file.Path, de.Err, err)
	}
	return err
}

func (d *journalDoc) find(k Key) int {
	return slices.IndexFunc(d.Intents, func(i Intent) bool { return i.Same(k) })
}

// Record writes the intent to create the device at k.
func (j *Journal) Record(k Key) error {
	err := j.update(func(d *journalDoc) bool {
		if d.find(k) >= 0 {
			return false
		}
		d.Intents = append(d.Intents, Intent{Key: k})
		return true
	})
	if err != nil {
		return fmt.Errorf("record MIG intent %s: %w", k, err)
	}
	return nil
}

// Hold records that claim holds the device at k, recording the intent to
// create it if there is none.
func (j *Journal) Hold(k Key, claim string) error { return j.HoldUnless(k, claim, nil) }

// HoldUnless is Hold after a check: refuse (nil: none) is called with the
// recorded intents under the journal's lock, and when it returns an
// error nothing is written and that error is returned as it is. The
// check and the hold are one read-modify-write, so no other process's
// change comes between them.
func (j *Journal) HoldUnless(k Key, claim string, refuse func([]Intent) error) error {
	var d journalDoc
	var refused error
	err := j.file.Update(&d, func(bool) (bool, error) {
		if refuse != nil {
			if refused = refuse(d.Intents); refused != nil {
				return false, nil
			}
		}
		i := d.find(k)
		if i < 0 {
			d.Intents = append(d.Intents, Intent{Key: k, Claims: []string{claim}})
			return true, nil
		}
		if slices.Contains(d.Intents[i].Claims, claim) {
			return false, nil
		}
		d.Intents[i].Claims = append(d.Intents[i].Claims, claim)
		if d.Intents[i].UUID == "" {
			d.Intents[i].Key = k
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("record MIG intent %s for claim %s: %w", k, claim, j.corrupt(err))
	}
	return refused
}

// Release removes claim from every intent it holds and returns the
// intents left without a holder: those the claim held, and any left by an
// earlier Release whose destroy did not complete. Destroy their devices,
// then Forget them. Intents recorded without claims (Record) are not
// returned: they have no holders to lose.
func (j *Journal) Release(claim string) ([]Key, error) {
	var free []Key
	err := j.update(func(d *journalDoc) bool {
		free = free[:0]
		changed := false
		for i := range d.Intents {
			in := &d.Intents[i]
			if in.drop(claim) {
				changed = true
			}
			if in.released() {
				free = append(free, in.Key)
			}
		}
		return changed
	})
	if err != nil {
		return nil, fmt.Errorf("release MIG intents of claim %s: %w", claim, err)
	}
	return free, nil
}

// Drop is Release, the destroys and Forget in one write, made after the
// destroys: claim is removed from every intent, and every intent then
// left without a holder (those only claim held, and any an earlier
// Release or Drop left undone) is passed to undo (its device's destroy)
// and forgotten when undo returned nil. An intent whose undo failed stays,
// released, for the next Drop or Release; the errors of undo are returned
// joined, with the keys that were undone. A claim that holds nothing costs
// one read of the journal and no write.
//
// Until that one write the journal still names claim as a holder of
// every device being destroyed, so a process killed at any point leaves
// each device that may still exist recorded: the runtime, which still
// holds the claim, unprepares it again, and undo finds the device gone or
// destroys it. undo runs outside the journal's lock and may read the
// journal; Drop calls must not overlap for one claim (the reference
// driver serializes its MIG changes).
func (j *Journal) Drop(claim string, undo func(Key) error) ([]Key, error) {
	intents, err := j.Intents()
	if err != nil {
		return nil, fmt.Errorf("release MIG intents of claim %s: %w", claim, err)
	}
	var free []Key
	holds := false
	for _, in := range intents {
		if in.drop(claim) {
			holds = true
		}
		if in.released() {
			free = append(free, in.Key)
		}
	}
	if !holds && len(free) == 0 {
		return nil, nil
	}
	var done []Key
	var undoErr error
	for _, k := range free {
		if err := undo(k); err != nil {
			undoErr = errors.Join(undoErr, err)
			continue
		}
		done = append(done, k)
	}
	err = j.update(func(d *journalDoc) bool {
		changed := false
		kept := d.Intents[:0]
		for _, in := range d.Intents {
			if in.drop(claim) {
				changed = true
			}
			if in.released() && slices.ContainsFunc(done, in.Same) {
				changed = true
				continue
			}
			kept = append(kept, in)
		}
		d.Intents = kept
		return changed
	})
	if err != nil {
		return done, errors.Join(undoErr, fmt.Errorf("release MIG intents of claim %s: %w", claim, err))
	}
	return done, undoErr
}

// Forget removes the intent for k; forgetting an unknown key succeeds.
func (j *Journal) Forget(k Key) error {
	err := j.update(func(d *journalDoc) bool {
		i := d.find(k)
		if i < 0 {
			return false
		}
		d.Intents = slices.Delete(d.Intents, i, i+1)
		return true
	})
	if err != nil {
		return fmt.Errorf("forget MIG intent %s: %w", k, err)
	}
	return nil
}

// Replace makes intents the journal's whole content (a driver that
// rebuilt it from its GPUs and the claims it holds).
func (j *Journal) Replace(intents []Intent) error {
	err := j.update(func(d *journalDoc) bool {
		d.Intents = slices.Clone(intents)
		return true
	})
	if err != nil {
		return fmt.Errorf("rewrite MIG intent journal: %w", err)
	}
	return nil
}

// Owns reports whether an intent for k is recorded.
func (j *Journal) Owns(k Key) (bool, error) {
	keys, err := j.Keys()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(keys, k.Same), nil
}

// Keys returns the recorded intents' keys by GPU, start and profile.
func (j *Journal) Keys() ([]Key, error) {
	in, err := j.Intents()
	if err != nil {
		return nil, err
	}
	keys := make([]Key, len(in))
	for i, x := range in {
		keys[i] = x.Key
	}
	return keys, nil
}

// Intents returns the recorded intents by GPU, start and profile.
func (j *Journal) Intents() ([]Intent, error) {
	var d journalDoc
	if _, err := j.file.Read(&d); err != nil {
		return nil, fmt.Errorf("read MIG intent journal: %w", j.corrupt(err))
	}
	slices.SortStableFunc(d.Intents, func(x, y Intent) int {
		return cmp.Or(strings.Compare(x.UUID, y.UUID), cmp.Compare(x.GPU, y.GPU), cmp.Compare(x.Start, y.Start), cmp.Compare(x.ProfileID, y.ProfileID))
	})
	return d.Intents, nil
}
