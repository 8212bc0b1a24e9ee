package statefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// WriteOption configures [WriteFile].
type WriteOption func(*writeOptions)

type writeOptions struct {
	tempPattern string
	mode        fs.FileMode
	syncFile    bool
	syncDir     bool
}

// WithMode sets the file's permission bits (default 0600). It is set on
// the file before the rename, whatever the process umask.
func WithMode(mode fs.FileMode) WriteOption {
	return func(o *writeOptions) { o.mode = mode.Perm() }
}

// WithTempPattern names the temporary file as [os.CreateTemp] does (a "*"
// is replaced by a random string), for a caller that collects leftovers
// of interrupted writes by a pattern of its own. The default is
// [TempPattern] of the file's base name, which [RemoveTemp] collects.
func WithTempPattern(pattern string) WriteOption {
	return func(o *writeOptions) { o.tempPattern = pattern }
}

// SyncFile fsyncs the data before the rename, so that the new name never
// points at lost content after a power loss. A caller that batches folder
// syncs itself uses it without [SyncDir].
func SyncFile() WriteOption { return func(o *writeOptions) { o.syncFile = true } }

// SyncDir fsyncs the folder after the rename, so that the rename itself
// survives a power loss.
func SyncDir() WriteOption { return func(o *writeOptions) { o.syncDir = true } }

// Durable is [SyncFile] and [SyncDir]: when WriteFile returns, the new
// content survives a power loss.
func Durable() WriteOption {
	return func(o *writeOptions) { o.syncFile, o.syncDir = true, true }
}

// TempPattern is the default temporary file pattern of [WriteFile] for a
// file with the given base name: ".<base>.tmp-*", hidden and in the same
// folder (a rename is atomic only within one file system).
func TempPattern(base string) string { return "." + base + ".tmp-*" }

// WriteFile replaces path with data atomically: the data goes to a
// temporary file in the same folder, which is renamed over path. Without
// [SyncFile], [SyncDir] or [Durable] it survives a killed process but not
// a power loss. On error the temporary file is removed and path is left
// as it was; a process killed during the write leaves a temporary file
// that [RemoveTemp] collects.
func WriteFile(path string, data []byte, opts ...WriteOption) (err error) {
	o := writeOptions{mode: 0o600}
	for _, opt := range opts {
		opt(&o)
	}
	dir := filepath.Dir(path)
	if o.tempPattern == "" {
		o.tempPattern = TempPattern(filepath.Base(path))
	}
	tmp, err := os.CreateTemp(dir, o.tempPattern)
	if err != nil {
		return fmt.Errorf("write %s: create temporary file: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	// os.CreateTemp creates the file 0600 (less the umask, which only
	// takes bits away): only another mode needs a chmod.
	if o.mode != 0o600 {
		if err := tmp.Chmod(o.mode); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("write %s: set mode: %w", path, err)
		}
	}
	if o.syncFile {
		if err := tmp.Sync(); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("write %s: sync temporary file: %w", path, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: close temporary file: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: rename into place: %w", path, err)
	}
	if o.syncDir {
		if err := SyncFolder(dir); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// SyncFolder fsyncs a folder, making renames, creations and removals in
// it durable.
func SyncFolder(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open folder %s to sync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}

// RemoveTemp removes from dir the temporary files that interrupted
// [WriteFile] calls with the default pattern left there (any base name),
// and returns how many it removed. Call it when no other process writes
// in dir (under the lock that guards its files), e.g. at start: a write
// in flight has a temporary file too.
func RemoveTemp(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("collect temporary files in %s: %w", dir, err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !isTemp(e.Name()) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("collect temporary files in %s: %w", dir, errors.Join(errs...))
	}
	return n, nil
}

// isTemp reports whether name is a temporary file of [TempPattern].
func isTemp(name string) bool {
	i := strings.LastIndex(name, ".tmp-")
	return strings.HasPrefix(name, ".") && i > 1 && i+len(".tmp-") < len(name)
}
