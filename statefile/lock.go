package statefile

import (
	"errors"
	"fmt"
)

// ErrLocked is wrapped by [TryAcquire]'s error (a [*LockedError]) when
// another process, or another open of the same file, holds the lock.
var ErrLocked = errors.New("lock held by another holder")

// LockedError is [TryAcquire]'s error for a lock that is held.
type LockedError struct {
	// Path is the lock file.
	Path string
	// HolderPID is the process that holds the lock exclusively, as it
	// recorded itself through [TryAcquire]; zero when unknown (shared
	// holders, or a holder that took the lock with [Acquire]).
	HolderPID int
}

func (e *LockedError) Error() string {
	if e.HolderPID > 0 {
		return fmt.Sprintf("%s is locked by process %d", e.Path, e.HolderPID)
	}
	return e.Path + " is locked"
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// LockOption configures [Acquire] and [TryAcquire].
type LockOption func(*lockOptions)

type lockOptions struct{ shared, held bool }

// Shared takes the lock shared: shared holders exclude exclusive ones but
// not each other (readers of a file, the instances of a rolling update).
func Shared() LockOption { return func(o *lockOptions) { o.shared = true } }

// Held is for a lock held for a process's life (an instance lock): the
// lock is taken through a read-only descriptor (the holder's PID is
// written through another, closed at once), so that holding it never
// keeps the file system from being remounted read-only.
func Held() LockOption { return func(o *lockOptions) { o.held = true } }

// Lock is a held advisory lock on a file. Locks taken through separate
// opens of one file exclude each other also within one process; the
// kernel releases a lock when its process dies.
type Lock struct {
	release func() error
}

// Release releases the lock. It is safe to call more than once.
func (l *Lock) Release() error {
	if l == nil || l.release == nil {
		return nil
	}
	r := l.release
	l.release = nil
	return r()
}
