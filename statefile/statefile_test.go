package statefile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drakit/drakit/statefile"
)

func TestWriteFile(t *testing.T) {
	for name, opts := range map[string][]statefile.WriteOption{
		"default": nil,
		"durable": {statefile.Durable(), statefile.WithMode(0o644), statefile.WithTempPattern(".x-*.tmp")},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			for _, content := range []string{"old", "new"} {
				if err := statefile.WriteFile(path, []byte(content), opts...); err != nil {
					t.Fatalf("WriteFile: %v", err)
				}
				if got, err := os.ReadFile(path); err != nil || string(got) != content {
					t.Fatalf("read back %q, %v; want %q", got, err, content)
				}
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			want := fs.FileMode(0o600)
			if name == "durable" {
				want = 0o644
			}
			if st.Mode().Perm() != want {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("folder holds %d entries, want only the file (no temporary file left)", len(ents))
			}
		})
	}
}

func TestWriteFileErrorLeavesOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := statefile.WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	// A folder in place of the file: the rename fails after the
	// temporary file was written.
	blocked := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := statefile.WriteFile(blocked, []byte("x")); err == nil {
		t.Fatal("WriteFile over a non-empty folder succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("file changed to %q", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("folder holds %d entries, want the file and the folder (the failed write's temporary file removed)", len(ents))
	}
}

func TestRemoveTemp(t *testing.T) {
	dir := t.TempDir()
	// What processes killed mid-write leave: temporary files of two
	// files, next to files that only look alike and the files themselves.
	for _, n := range []string{".state.json.tmp-1", ".other.json.tmp-2", "state.json", "x.tmp-1", ".tmp-", ".a.tmp-"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := statefile.RemoveTemp(dir)
	if err != nil || n != 2 {
		t.Fatalf("RemoveTemp = %d, %v; want 2 removed", n, err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := ".a.tmp- .tmp- state.json x.tmp-1"; strings.Join(left, " ") != want {
		t.Errorf("left %v, want %s", left, want)
	}
	if n, err := statefile.RemoveTemp(filepath.Join(dir, "missing")); n != 0 || err != nil {
		t.Errorf("RemoveTemp of a missing folder = %d, %v; want 0, nil", n, err)
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	first, err := statefile.TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	// A second open in the same process is excluded like another process.
	_, err = statefile.TryAcquire(path)
	var locked *statefile.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, statefile.ErrLocked) {
		t.Fatalf("second TryAcquire: %v, want a LockedError", err)
	}
	if locked.HolderPID != os.Getpid() || locked.Path != path {
		t.Errorf("LockedError %+v, want holder %d at %s", locked, os.Getpid(), path)
	}
	if _, err := statefile.TryAcquire(path, statefile.Shared()); !errors.Is(err, statefile.ErrLocked) {
		t.Errorf("shared TryAcquire under an exclusive lock: %v, want ErrLocked", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}

	// Shared holders share, exclude an exclusive one, and name nobody.
	a, err := statefile.TryAcquire(path, statefile.Shared())
	if err != nil {
		t.Fatal(err)
	}
	b, err := statefile.Acquire(path, statefile.Shared())
	if err != nil {
		t.Fatalf("second shared lock: %v", err)
	}
	_, err = statefile.TryAcquire(path)
	if !errors.As(err, &locked) || locked.HolderPID != 0 {
		t.Errorf("exclusive TryAcquire under shared locks: %v, want a LockedError naming no PID", err)
	}
	a.Release()
	b.Release()
	c, err := statefile.Acquire(path)
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	c.Release()

	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
}

func TestLockFileModeTightened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	l, err := statefile.Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v, want 0600", st.Mode().Perm())
	}
}
