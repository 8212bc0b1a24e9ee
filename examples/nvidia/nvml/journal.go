package nvml

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Journal is an Owner backed by a file of intent records: Record a key
// before Lifecycle.Create, Forget it after Lifecycle.Destroy returned nil.
// Each change is durable (fsynced; see WithoutFsync) before it returns and
// safe against other processes using the same file (flock). The reference driver uses
// drakit's checkpoint instead (see Owner); Journal serves programs without
// one and tests.
type Journal struct {
	file jsonFile
}

var _ Owner = (*Journal)(nil)

type journalDoc struct {
	Intents []Key `json:"intents"`
}

// JournalOption configures OpenJournal.
type JournalOption func(*Journal)

// WithoutFsync makes the journal's changes survive a killed process (each
// is written to a temporary file and renamed over the journal) but not a
// power loss: they are not fsynced. That is enough for intents about MIG
// devices, which a power loss destroys too (a GPU comes up from a reset
// without MIG devices), and saves the journal's two fsyncs per change on
// the prepare path.
func WithoutFsync() JournalOption {
	return func(j *Journal) { j.file.volatile = true }
}

// OpenJournal opens the journal at path, creating its folder; the file is
// created at the first Record.
func OpenJournal(path string, opts ...JournalOption) (*Journal, error) {
	if path == "" {
		return nil, fmt.Errorf("open MIG intent journal: path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open MIG intent journal: %w", err)
	}
	j := &Journal{file: jsonFile{path: path}}
	for _, o := range opts {
		o(j)
	}
	if _, err := j.Keys(); err != nil {
		return nil, fmt.Errorf("open MIG intent journal: %w", err)
	}
	return j, nil
}

// Record writes the intent to create the device at k.
func (j *Journal) Record(k Key) error {
	var d journalDoc
	err := j.file.update(&d, func(bool) (bool, error) {
		for _, x := range d.Intents {
			if x == k {
				return false, nil
			}
		}
		d.Intents = append(d.Intents, k)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("record MIG intent %s: %w", k, err)
	}
	return nil
}

// Forget removes the intent for k; forgetting an unknown key succeeds.
func (j *Journal) Forget(k Key) error {
	var d journalDoc
	err := j.file.update(&d, func(bool) (bool, error) {
		for i, x := range d.Intents {
			if x == k {
				d.Intents = append(d.Intents[:i:i], d.Intents[i+1:]...)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("forget MIG intent %s: %w", k, err)
	}
	return nil
}

// Owns reports whether an intent for k is recorded.
func (j *Journal) Owns(k Key) (bool, error) {
	keys, err := j.Keys()
	if err != nil {
		return false, err
	}
	for _, x := range keys {
		if x == k {
			return true, nil
		}
	}
	return false, nil
}

// Keys returns the recorded intents by GPU, start and profile.
func (j *Journal) Keys() ([]Key, error) {
	var d journalDoc
	if _, err := j.file.read(&d); err != nil {
		return nil, fmt.Errorf("read MIG intent journal: %w", err)
	}
	sort.Slice(d.Intents, func(a, b int) bool {
		x, y := d.Intents[a], d.Intents[b]
		if x.GPU != y.GPU {
			return x.GPU < y.GPU
		}
		if x.Start != y.Start {
			return x.Start < y.Start
		}
		return x.ProfileID < y.ProfileID
	})
	return d.Intents, nil
}
