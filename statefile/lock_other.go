//go:build !unix

package statefile

import "errors"

var errNoFlock = errors.New("file locking needs a unix system")

// Acquire needs flock: drakit drivers run on Linux nodes.
func Acquire(path string, opts ...LockOption) (*Lock, error) {
	return nil, errors.Join(errors.New("lock "+path), errNoFlock)
}

// TryAcquire needs flock: drakit drivers run on Linux nodes.
func TryAcquire(path string, opts ...LockOption) (*Lock, error) {
	return Acquire(path, opts...)
}
