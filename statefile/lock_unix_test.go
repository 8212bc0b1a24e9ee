//go:build unix

package statefile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A lock file gets mode 0600 when it is created under a umask that
// narrows it, or found with another mode; one that has 0600 already is
// not changed again on the next acquisitions (no inode write per lock).
func TestLockChmodsOnlyAWrongMode(t *testing.T) {
	var calls int
	defer func(orig func(*os.File, os.FileMode) error) { chmod = orig }(chmod)
	chmod = func(f *os.File, m os.FileMode) error {
		calls++
		return f.Chmod(m)
	}
	defer syscall.Umask(syscall.Umask(0o277)) // creates files 0400
	dir := t.TempDir()
	for _, c := range []struct {
		name      string
		prepare   func(path string)
		wantCalls int
	}{
		{"created under umask 0277", func(string) {}, 1},
		{"existing 0600", func(path string) { existing(t, path, 0o600) }, 0},
		{"existing 0644", func(path string) { existing(t, path, 0o644) }, 1},
	} {
		path := filepath.Join(dir, c.name+".lock")
		c.prepare(path)
		calls = 0
		for i := range 3 {
			l, err := Acquire(path)
			if err != nil {
				t.Fatalf("%s: Acquire %d: %v", c.name, i, err)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != lockMode {
				t.Errorf("%s: after Acquire %d the mode is %v (%v), want %v", c.name, i, st.Mode().Perm(), err, os.FileMode(lockMode))
			}
		}
		if calls != c.wantCalls {
			t.Errorf("%s: three acquisitions changed the mode %d times, want %d", c.name, calls, c.wantCalls)
		}
	}
}

// existing makes the file path with mode, whatever the umask.
func existing(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, nil, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
