//go:build unix

package statefile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// A Held lock is held through a read-only descriptor (a file open for
// writing keeps a file system from being remounted read-only), and still
// records its holder for the next one to name.
func TestHeldLockHasNoWritableDescriptor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "instance.lock")
	l, err := TryAcquire(path, Held())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var locked *LockedError
	if _, err := TryAcquire(path); !errors.As(err, &locked) || locked.HolderPID != os.Getpid() {
		t.Fatalf("second TryAcquire: %v, want a LockedError naming this process", err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	open := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err != nil || target != path {
			continue
		}
		open++
		info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
				if err != nil {
					t.Fatal(err)
				}
				if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
					t.Errorf("the held lock's descriptor %s has flags %o, want read-only", fd.Name(), flags)
				}
			}
		}
	}
	if open != 1 {
		t.Errorf("%d descriptors of the lock file open, want 1", open)
	}
}

// TestLockInstanceReadOnly: on a folder remounted read-only a process
// alone still takes the instance lock, whether an earlier holder left a
// gate there or not, and a second one is refused; a rolling update's
// process, which must record itself, gets an error naming the folder.
func TestLockInstanceReadOnly(t *testing.T) {
	for _, files := range [][]string{{"drakit.lock", "drakit.gate"}, {"drakit.lock"}} {
		dir := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
			dir).CombinedOutput(); err != nil {
			t.Skipf("needs to mount a tmpfs (root with CAP_SYS_ADMIN): %v: %s", err, out)
		}
		defer func() { _ = exec.Command("umount", dir).Run() }()
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, lockMode); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
			t.Fatalf("remount read-only: %v: %s", err, out)
		}
		l, err := LockInstance(dir, "drakit", As("d", "ns/a"))
		if err != nil {
			t.Fatalf("%v on a read-only folder: %v", files, err)
		}
		if _, err := LockInstance(dir, "drakit"); !errors.Is(err, ErrInUse) {
			t.Errorf("%v: a second process on a read-only folder: %v, want ErrInUse", files, err)
		}
		_ = l.Release()
		_, err = LockInstance(dir, "drakit", As("d", "ns/a"), RollingUpdate())
		if err == nil || errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%v: a rolling update's process on a read-only folder: %v, want an "+
				"error naming the folder", files, err)
		}
	}
}
