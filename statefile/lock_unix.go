//go:build unix

package statefile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// lockMode is the lock file's mode, whatever the umask: a lock file
// others may open is a lock others may take and hold.
const lockMode = 0o600

// chmod sets an open file's mode; a test counts its calls.
var chmod = (*os.File).Chmod

// Acquire takes the lock on path, creating the file if it is missing and
// setting its mode to 0600 if it has another, and waits until it is
// granted. On a read-only file system an existing lock file still locks
// (flock needs no write access), so readers keep working and a change
// fails where it writes, with the error that says why.
func Acquire(path string, opts ...LockOption) (*Lock, error) {
	return acquire(path, false, opts)
}

// TryAcquire takes the lock on path like [Acquire] but does not wait: a
// held lock gives a [*LockedError] (errors.Is [ErrLocked]) naming the
// exclusive holder's PID when it recorded one. An exclusive TryAcquire
// records this process's PID in the file for the next one to name; a
// shared one clears it.
func TryAcquire(path string, opts ...LockOption) (*Lock, error) {
	return acquire(path, true, opts)
}

func acquire(path string, try bool, opts []LockOption) (*Lock, error) {
	var o lockOptions
	for _, opt := range opts {
		opt(&o)
	}
	f, writable, err := openLock(path)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	var rw *os.File // Held: the writable descriptor, for the PID only
	if o.held && writable {
		rw = f
		if f, err = os.Open(path); err != nil {
			_ = rw.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		defer rw.Close()
	}
	how := syscall.LOCK_EX
	if o.shared {
		how = syscall.LOCK_SH
	}
	if try {
		how |= syscall.LOCK_NB
	}
	if err := flock(f, how); err != nil {
		if try && errors.Is(err, syscall.EWOULDBLOCK) {
			pid := holderPID(f)
			_ = f.Close()
			return nil, &LockedError{Path: path, HolderPID: pid}
		}
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if try && writable {
		content := ""
		if !o.shared {
			content = "pid=" + strconv.Itoa(os.Getpid()) + "\n"
		}
		w := f
		if rw != nil {
			w = rw
		}
		if err := w.Truncate(0); err == nil {
			_, _ = w.WriteAt([]byte(content), 0)
		}
	}
	return &Lock{release: f.Close}, nil // closing releases the flock
}

// openLock opens path read-write (created with lockMode, and set to it
// when the umask or an earlier creator chose another mode), or read-only
// on a read-only file system. A file that has lockMode already is not
// changed: a lock taken on every access (the NVIDIA simulator's store
// takes one several times per prepare) costs no inode write.
func openLock(path string) (f *os.File, writable bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, lockMode)
	if errors.Is(err, syscall.EROFS) {
		f, err = os.Open(path)
		return f, false, err
	}
	if err != nil {
		return nil, false, err
	}
	st, err := f.Stat()
	if err == nil && st.Mode().Perm() != lockMode {
		err = chmod(f, lockMode)
	}
	if err != nil {
		_ = f.Close()
		return nil, false, err
	}
	return f, true, nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// holderPID reads the PID an exclusive holder recorded; 0 if none.
func holderPID(f *os.File) int {
	buf := make([]byte, 64)
	n, _ := f.ReadAt(buf, 0)
	s, ok := bytes.CutPrefix(bytes.TrimSpace(buf[:n]), []byte("pid="))
	if !ok {
		return 0
	}
	pid, err := strconv.Atoi(string(s))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
