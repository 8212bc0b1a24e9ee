package driver

import (
	"fmt"
	"path/filepath"

	"github.com/drakit/drakit/statefile"
)

// serializeLockFile is the name of the lock file, in the lock folder
// ([WithLockDir]), that the two instances of a rolling update hold around
// each prepare and unprepare call, recovery and housekeeping. It is the
// name the kubelet plugin helper gave its own lock when it serialized
// drakit's calls, so that an instance of an earlier drakit and one of
// this serialize with each other during the update between them.
const serializeLockFile = "serialize.lock"

// lockPath is the cross-instance lock file.
func (d *Runtime) lockPath() string { return filepath.Join(d.o.lockDir, serializeLockFile) }

// enterCall waits until a prepare or unprepare call may run and returns
// the function that ends it. Calls run one at a time within the process
// with [WithSerializedCalls] or [WithRollingUpdate], and one at a time
// across the instances of a rolling update (a file lock). The runtime
// serializes itself (the helper's serialization is off) so that the lock
// it takes for recovery and housekeeping is its own, not a file private
// to the helper.
func (d *Runtime) enterCall() (exit func(), err error) {
	rolling := d.o.rollingUpdateUID != ""
	if !d.o.serialize && !rolling {
		return func() {}, nil
	}
	d.callMu.Lock()
	if !rolling {
		return d.callMu.Unlock, nil
	}
	unlock, err := lockFile(d.lockPath())
	if err != nil {
		d.callMu.Unlock()
		return nil, fmt.Errorf("serialize call: %w", err)
	}
	return func() { unlock(); d.callMu.Unlock() }, nil
}

// withCrossInstanceLock runs f while holding the cross-instance lock when
// rolling updates are on: the other instance makes no call meanwhile.
func (d *Runtime) withCrossInstanceLock(f func() error) error {
	if d.o.rollingUpdateUID == "" {
		return f()
	}
	unlock, err := lockFile(d.lockPath())
	if err != nil {
		return fmt.Errorf("lock %s: %w", d.o.lockDir, err)
	}
	defer unlock()
	return f()
}

// lockFile takes the exclusive cross-instance lock on path, waiting for
// it, and returns the function that releases it.
func lockFile(path string) (func(), error) {
	l, err := statefile.Acquire(path)
	if err != nil {
		return nil, err
	}
	return func() { _ = l.Release() }, nil
}
