//go:build unix

package nvml

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an flock on path (created if missing), exclusive or
// shared, blocking until it is granted; the returned func releases it. The
// kernel releases it too when the process dies, so a killed holder never
// blocks the next one.
func lockFile(path string, exclusive bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, syscall.EROFS) {
		// A read-only folder: an existing lock file still locks (flock
		// needs no write access), so reads work and a change fails where
		// it writes, with the error that says why.
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
