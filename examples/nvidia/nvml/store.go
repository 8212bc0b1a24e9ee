package nvml

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/drakit/drakit/statefile"
)

// jsonFile is a JSON document on disk shared by processes: every access
// holds an flock on path+".lock" (shared to read, exclusive to change),
// and every change is a read-modify-write written atomically (temporary
// file, fsync, rename, fsync of the folder), so a reader never sees half a
// file and a process killed mid-write leaves the old one. The lock file is
// separate because the rename replaces the data file's inode. With
// volatile, the fsyncs are left out: the document survives a killed
// process (the rename is atomic) but not a power loss.
type jsonFile struct {
	path     string
	volatile bool
}

// read decodes the document into v under a shared lock; a missing file
// leaves v as it is and reports false.
func (f jsonFile) read(v any) (bool, error) {
	unlock, err := lockFile(f.path+".lock", false)
	if err != nil {
		return false, err
	}
	defer unlock()
	return f.load(v)
}

func (f jsonFile) load(v any) (bool, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", f.path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, &decodeError{path: f.path, err: err}
	}
	return true, nil
}

// decodeError is a document that exists but cannot be decoded: a torn or
// hand-edited file. Its owner wraps it with what the file is and what to
// do.
type decodeError struct {
	path string
	err  error
}

func (e *decodeError) Error() string { return fmt.Sprintf("decode %s: %v", e.path, e.err) }
func (e *decodeError) Unwrap() error { return e.err }

// update runs fn on the document under an exclusive lock and writes it
// back when fn reports a change, also when fn fails (a call can fail and
// still change state, e.g. consume an injected fault); fn's error is
// returned. v must be a pointer whose zero value is the empty document.
func (f jsonFile) update(v any, fn func(exists bool) (changed bool, err error)) error {
	unlock, err := lockFile(f.path+".lock", true)
	if err != nil {
		return err
	}
	defer unlock()
	exists, err := f.load(v)
	if err != nil {
		return err
	}
	changed, ferr := fn(exists)
	if !changed {
		return ferr
	}
	if err := f.write(v); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

func (f jsonFile) write(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", f.path, err)
	}
	var opts []statefile.WriteOption
	if !f.volatile {
		opts = append(opts, statefile.Durable())
	}
	return statefile.WriteFile(f.path, append(b, '\n'), opts...)
}

// lockFile takes the lock on path (created if missing), exclusive or
// shared, waiting until it is granted; the returned func releases it.
func lockFile(path string, exclusive bool) (func(), error) {
	var opts []statefile.LockOption
	if !exclusive {
		opts = append(opts, statefile.Shared())
	}
	l, err := statefile.Acquire(path, opts...)
	if err != nil {
		return nil, err
	}
	return func() { _ = l.Release() }, nil
}
