package nvml

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if f.volatile {
		if err := tmp.Close(); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
		if err := os.Rename(tmp.Name(), f.path); err != nil {
			return fmt.Errorf("replace %s: %w", f.path, err)
		}
		return nil
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("replace %s: %w", f.path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}
