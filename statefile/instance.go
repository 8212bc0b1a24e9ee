package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ErrInUse is wrapped by [LockInstance]'s error (an [*InUseError]) when
// the folder is held by processes that this one may not join.
var ErrInUse = errors.New("folder is in use by another process")

// Holder is a process that holds a folder's instance lock, as it
// recorded itself there.
type Holder struct {
	// Driver is the driver's name and Owner the deployment whose pods
	// run it (a DaemonSet's namespace/name), as given to [As]; empty
	// when not given.
	Driver string `json:"driver,omitempty"`
	Owner  string `json:"owner,omitempty"`
	// PID is the holder's process ID in its own PID namespace (the
	// processes of two pods may both be 1); zero when unknown.
	PID int `json:"pid,omitempty"`
}

// String names the holder for a message: "process 12 (driver
// gpu.example.com of gpus/nvidia-dra-driver)".
func (h Holder) String() string {
	s := "a process"
	if h.PID > 0 {
		s = "process " + strconv.Itoa(h.PID)
	}
	var who []string
	if h.Driver != "" {
		who = append(who, "driver "+h.Driver)
	}
	switch {
	case h.Owner != "" && h.Driver != "":
		who = append(who, "of "+h.Owner)
	case h.Owner != "":
		who = append(who, "owner "+h.Owner)
	}
	if len(who) == 0 {
		return s
	}
	return s + " (" + strings.Join(who, " ") + ")"
}

// InUseError is [LockInstance]'s error for a folder this process may not
// join; errors.Is(err, [ErrInUse]) is true.
type InUseError struct {
	// Dir is the folder (an absolute path).
	Dir string
	// Holders are the processes that hold it, as far as they recorded
	// themselves; none when they are not known.
	Holders []Holder
	// Reason says why this process is refused.
	Reason string
}

func (e *InUseError) Error() string {
	held := "another process"
	if len(e.Holders) > 0 {
		names := make([]string, len(e.Holders))
		for i, h := range e.Holders {
			names[i] = h.String()
		}
		held = strings.Join(names, " and ")
	}
	return fmt.Sprintf("%s is held by %s: %s", e.Dir, held, e.Reason)
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// InstanceOption configures [LockInstance].
type InstanceOption func(*instanceOptions)

type instanceOptions struct {
	me      Holder
	rolling bool
}

// As records who this process is, beside its PID: the driver's name and
// the deployment whose pods run it (a DaemonSet's namespace/name). Other
// processes' refusals name it; with [RollingUpdate] it decides which
// process is this one's peer.
func As(driverName, owner string) InstanceOption {
	return func(o *instanceOptions) { o.me.Driver, o.me.Owner = driverName, owner }
}

// RollingUpdate makes this process one of the two instances of a rolling
// update: [LockInstance] admits it beside at most one other process, and
// only one that also locked with RollingUpdate and the same [As] (the
// other pod of the same DaemonSet).
func RollingUpdate() InstanceOption {
	return func(o *instanceOptions) { o.rolling = true }
}

// slots is how many processes a rolling update's lock admits.
const slots = 2

// InstanceLock is a folder's instance lock held by this process (see
// [LockInstance]). The kernel releases it when the process dies; Release
// may be called from any goroutine.
type InstanceLock struct {
	mu      sync.Mutex
	locks   []*Lock // the instance lock, then this process's slot
	records []string
}

// LockInstance takes the instance lock called name (a file name without
// a folder, e.g. "drakit") of folder dir, which must exist, and returns
// at once. It admits
//
//   - without [RollingUpdate], a process alone: no other process holds
//     the folder;
//   - with RollingUpdate, the two instances of a rolling update: at most
//     one other process holds the folder, and it locked with
//     RollingUpdate and the same driver and owner ([As]).
//
// Any other process gets an [*InUseError] naming the folder and its
// holders (wrapping [ErrInUse]); calls in one process count as separate
// processes. The kernel releases the lock when its process dies, so a
// crashed holder's place is free at once. A rolling update's process
// must be able to record itself in dir (a read-only folder fails the
// call); a process alone records itself if it can.
//
// The files, all in dir: name.lock (exclusive for a process alone,
// shared by a rolling update's two), name.gate (held during an
// admission, so that admissions take turns), name.slot0.lock and
// name.slot1.lock (one per instance of a rolling update), and the
// records name.holder, name.slot0.holder and name.slot1.holder.
func LockInstance(dir, name string, opts ...InstanceOption) (*InstanceLock, error) {
	var o instanceOptions
	for _, opt := range opts {
		opt(&o)
	}
	if name == "" || strings.ContainsRune(name, filepath.Separator) {
		return nil, fmt.Errorf("lock folder %s: bad instance lock name %q", dir, name)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("lock folder %s: %w", dir, err)
	}
	f := instanceFiles{dir: abs, name: name}
	o.me.PID = os.Getpid()
	// Admissions take turns: a holder's lock and its record are written
	// before the next process reads them.
	gate, err := Acquire(f.path(".gate"))
	if st, serr := os.Stat(f.dir); errors.Is(err, fs.ErrNotExist) && serr == nil && st.IsDir() {
		// A read-only folder without a gate, which nobody can create:
		// nor can anybody write a record there.
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock folder %s: %w", f.dir, err)
	}
	defer func() { _ = gate.Release() }()
	if o.rolling {
		return f.lockPeer(o.me)
	}
	return f.lockAlone(o.me)
}

// Release releases the lock, the slot of a rolling update first, and
// removes this process's record. It is safe to call more than once.
func (l *InstanceLock) Release() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The records go while their slot is still held: nobody else writes
	// them then.
	for _, r := range l.records {
		_ = os.Remove(r)
	}
	l.records = nil
	var errs []error
	for i := len(l.locks) - 1; i >= 0; i-- {
		errs = append(errs, l.locks[i].Release())
	}
	l.locks = nil
	return errors.Join(errs...)
}

// instanceFiles are the files of one instance lock.
type instanceFiles struct{ dir, name string }

func (f instanceFiles) path(suffix string) string {
	return filepath.Join(f.dir, f.name+suffix)
}
func (f instanceFiles) slot(i int) string   { return f.path(".slot" + strconv.Itoa(i) + ".lock") }
func (f instanceFiles) record(i int) string { return f.path(".slot" + strconv.Itoa(i) + ".holder") }

// lockAlone takes name.lock exclusively. The gate must be held.
func (f instanceFiles) lockAlone(me Holder) (*InstanceLock, error) {
	l, err := TryAcquire(f.path(".lock"), Held())
	var locked *LockedError
	if errors.As(err, &locked) {
		if locked.HolderPID > 0 { // an exclusive holder recorded itself
			h, _ := readHolder(f.path(".holder"), locked.HolderPID)
			return nil, f.refuse("a second process is refused", h)
		}
		return nil, f.refuse("they are the instances of a rolling update, and this process "+
			"is not one of them", f.peers()...)
	}
	if err != nil {
		return nil, fmt.Errorf("lock folder %s: %w", f.dir, err)
	}
	il := &InstanceLock{locks: []*Lock{l}}
	if writeHolder(f.path(".holder"), me) == nil {
		il.records = append(il.records, f.path(".holder"))
	}
	return il, nil
}

// lockPeer takes name.lock shared and a free slot, after checking that
// the process in the other slot, if any, is this one's peer, and records
// this process in its slot. The gate must be held.
func (f instanceFiles) lockPeer(me Holder) (_ *InstanceLock, err error) {
	il := &InstanceLock{}
	defer func() {
		if err != nil {
			_ = il.Release()
		}
	}()
	l, err := TryAcquire(f.path(".lock"), Shared(), Held())
	var locked *LockedError
	if errors.As(err, &locked) {
		h, _ := readHolder(f.path(".holder"), locked.HolderPID)
		return nil, f.refuse("it holds the folder alone, not as an instance of a rolling update", h)
	}
	if err != nil {
		return nil, fmt.Errorf("lock folder %s: %w", f.dir, err)
	}
	il.locks = append(il.locks, l)
	mine, others, known := -1, []Holder{}, true
	for i := range slots {
		l, err := TryAcquire(f.slot(i), Held())
		switch {
		case errors.As(err, &locked):
			h, ok := readHolder(f.record(i), locked.HolderPID)
			others, known = append(others, h), known && ok
		case err != nil:
			return nil, fmt.Errorf("lock folder %s: %w", f.dir, err)
		case mine < 0:
			mine = i
			il.locks = append(il.locks, l)
		default:
			_ = l.Release() // free: nobody's
		}
	}
	switch {
	case mine < 0:
		return nil, f.refuse("they are the two instances of a rolling update, and a third "+
			"process is refused", others...)
	case !known:
		return nil, f.refuse("its record of who it is is missing, so "+me.String()+
			" cannot tell that it is the other instance of its rolling update", others...)
	}
	for _, o := range others {
		if o.Driver != me.Driver || o.Owner != me.Owner {
			return nil, f.refuse(me.String()+" is not the other instance of its rolling update "+
				"(another release of the driver on this node?)", others...)
		}
	}
	if err := writeHolder(f.record(mine), me); err != nil {
		return nil, fmt.Errorf("lock folder %s: record this process: %w", f.dir, err)
	}
	il.records = append(il.records, f.record(mine))
	return il, nil
}

// peers are the processes of a rolling update that hold the folder, for
// a message. The gate must be held.
func (f instanceFiles) peers() []Holder {
	var hs []Holder
	for i := range slots {
		l, err := TryAcquire(f.slot(i), Held())
		var locked *LockedError
		if errors.As(err, &locked) {
			h, _ := readHolder(f.record(i), locked.HolderPID)
			hs = append(hs, h)
		} else if err == nil {
			_ = l.Release()
		}
	}
	return hs
}

func (f instanceFiles) refuse(reason string, holders ...Holder) error {
	return &InUseError{Dir: f.dir, Holders: holders, Reason: reason}
}

// writeHolder replaces the record at path with h. Its writers and
// readers hold the gate, so a plain write does: a torn record (the
// writer was killed) reads as missing.
func writeHolder(path string, h Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// readHolder reads the record at path of the process pid, from its lock
// (0: unknown). ok is false when there is no record of that process (a
// record of another PID is an earlier holder's): h then has the PID only.
func readHolder(path string, pid int) (h Holder, ok bool) {
	b, err := os.ReadFile(path)
	if pid > 0 && err == nil && json.Unmarshal(b, &h) == nil && h.PID == pid {
		return h, true
	}
	return Holder{PID: pid}, false
}
