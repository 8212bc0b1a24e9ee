// Package atomicfile writes files so that a reader, or a process started
// after a crash, sees either the old content or the new one, never a torn
// file: the data goes to a temporary file in the same folder, which is
// renamed into place.
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Options say how Write names its temporary file and what it makes
// durable.
type Options struct {
	// TempPattern names the temporary file as os.CreateTemp does (a "*"
	// is replaced by a random string); callers that collect leftovers
	// recognise their own temporary files by it. Default ".tmp-*".
	TempPattern string
	// Mode is the file's permission bits (default 0o600).
	Mode fs.FileMode
	// SyncFile fsyncs the data before the rename, so that the new name
	// never points at lost content after a power loss.
	SyncFile bool
	// SyncDir fsyncs the folder after the rename, so that the rename
	// itself survives a power loss.
	SyncDir bool
}

// Write replaces path with data atomically. On error the temporary file
// is removed and path is left as it was.
func Write(path string, data []byte, o Options) (err error) {
	dir := filepath.Dir(path)
	pattern := o.TempPattern
	if pattern == "" {
		pattern = ".tmp-*"
	}
	mode := o.Mode
	if mode == 0 {
		mode = 0o600
	}
	tmp, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write temporary file: %w", err)
	}
	// os.CreateTemp creates the file 0600 (less the umask, which only
	// takes bits away): only another mode needs a chmod.
	if mode != 0o600 {
		if err := tmp.Chmod(mode); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("set mode: %w", err)
		}
	}
	if o.SyncFile {
		if err := tmp.Sync(); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("sync temporary file: %w", err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close temporary file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	if o.SyncDir {
		return SyncDir(dir)
	}
	return nil
}

// SyncDir fsyncs a folder, making renames and removals in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open folder to sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync folder: %w", err)
	}
	return nil
}
