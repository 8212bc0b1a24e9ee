package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
	"github.com/drakit/drakit/statefile"
)

// The instance lock's files in the state folder: lifecycle.lock is held
// exclusively by a driver alone, shared by the processes of a rolling
// update; each of those also holds one of two slot locks, beside a record
// of who it is; lifecycle.gate serializes the rolling-update processes'
// admission.
const (
	lockFile = "lifecycle.lock"
	gateFile = "lifecycle.gate"
	slots    = 2
)

func slotLock(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("lifecycle.slot%d.lock", i))
}
func slotRecord(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("lifecycle.slot%d.json", i))
}

// ErrStateInUse is wrapped by [Open]'s error when the state folder is
// taken: by another process, or by the two processes of a rolling update
// (or one that is not this process's peer, see [WithRollingUpdate]). The
// message names the folder and the processes that hold it. Two drivers
// that each take every partition on a dynamic card for theirs destroy
// each other's.
var ErrStateInUse = errors.New("partition state folder is in use by another process")

// peer is who a rolling-update process is: the other instance of the
// same driver and owner shares the folder with it.
type peer struct {
	Driver string `json:"driver"`
	Owner  string `json:"owner"`
	PID    int    `json:"pid"`
}

func (p peer) String() string {
	if p.Driver == "" && p.Owner == "" {
		return "process " + strconv.Itoa(p.PID) + " (WithSharedState)"
	}
	return fmt.Sprintf("process %d (driver %s of %s)", p.PID, p.Driver, p.Owner)
}

// folder is one state folder as this process holds it: the instance lock
// and the per-card locks, shared by every Manager of the process on the
// folder (a test's restarts, a driver that reopens it), so that two of
// them take turns per card instead of refusing each other.
type folder struct {
	path  string
	peer  *peer             // nil: the folder is this process's alone
	locks []*statefile.Lock // the instance lock, and the slot of a peer
	refs  int

	mu    sync.Mutex
	cards map[string]chan struct{}
}

func (f *folder) shared() bool { return f.peer != nil }

var folders = struct {
	sync.Mutex
	m map[string]*folder
}{m: map[string]*folder{}}

// acquireFolder takes the instance lock of dir for this process: alone
// (p nil), or as one of the two processes of a rolling update, which
// admits the other instance of the same driver and owner and refuses any
// other process.
func acquireFolder(dir string, p *peer) (*folder, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	folders.Lock()
	defer folders.Unlock()
	if f := folders.m[abs]; f != nil {
		if (f.peer == nil) != (p == nil) || p != nil && (*f.peer != *p) {
			return nil, fmt.Errorf("%w: %s is open in this process with other sharing options",
				ErrStateInUse, abs)
		}
		f.refs++
		return f, nil
	}
	f := &folder{path: abs, peer: p, refs: 1, cards: map[string]chan struct{}{}}
	if p == nil {
		err = f.lockAlone()
	} else {
		err = f.lockPeer()
	}
	if err != nil {
		return nil, err
	}
	folders.m[abs] = f
	return f, nil
}

// lockAlone takes the instance lock exclusively.
func (f *folder) lockAlone() error {
	l, err := statefile.TryAcquire(filepath.Join(f.path, lockFile), statefile.Held())
	var locked *statefile.LockedError
	if errors.As(err, &locked) {
		holders := "a rolling update's processes"
		if locked.HolderPID > 0 {
			holders = "process " + strconv.Itoa(locked.HolderPID)
		} else if names := f.peers(); names != "" {
			holders = names
		}
		return fmt.Errorf("%w: %s is held by %s: run one driver per state folder (the two "+
			"instances of a rolling update both need WithRollingUpdate)",
			ErrStateInUse, f.path, holders)
	}
	if err != nil {
		return fmt.Errorf("lock state folder: %w", err)
	}
	f.locks = []*statefile.Lock{l}
	return nil
}

// lockPeer takes the instance lock shared and a free slot, under the
// gate, after checking that the process in the other slot, if any, is
// this one's peer; it records who this process is in its slot.
func (f *folder) lockPeer() (err error) {
	gate, err := statefile.Acquire(filepath.Join(f.path, gateFile))
	if err != nil {
		return fmt.Errorf("lock state folder: %w", err)
	}
	defer func() { _ = gate.Release() }()
	defer func() {
		if err != nil {
			f.unlock()
		}
	}()
	l, err := statefile.TryAcquire(filepath.Join(f.path, lockFile),
		statefile.Shared(), statefile.Held())
	var locked *statefile.LockedError
	if errors.As(err, &locked) {
		return fmt.Errorf("%w: %s is held by process %d, which runs without WithRollingUpdate",
			ErrStateInUse, f.path, locked.HolderPID)
	}
	if err != nil {
		return fmt.Errorf("lock state folder: %w", err)
	}
	f.locks = append(f.locks, l)
	mine, others := -1, []peer{}
	for i := range slots {
		l, err := statefile.TryAcquire(slotLock(f.path, i), statefile.Held())
		switch {
		case errors.As(err, &locked):
			others = append(others, readPeer(f.path, i, locked.HolderPID))
		case err != nil:
			return fmt.Errorf("lock state folder: %w", err)
		case mine < 0:
			mine = i
			f.locks = append(f.locks, l)
		default:
			_ = l.Release() // free: nobody's
		}
	}
	if mine < 0 {
		return fmt.Errorf("%w: %s is held by %s and %s, the two instances of a rolling update: "+
			"a third process is refused", ErrStateInUse, f.path, others[0], others[1])
	}
	for _, o := range others {
		if o.Driver != f.peer.Driver || o.Owner != f.peer.Owner {
			me := *f.peer
			me.PID = os.Getpid()
			return fmt.Errorf("%w: %s is held by %s, and %s is not the other instance of its "+
				"rolling update (another release of the driver on this node?)",
				ErrStateInUse, f.path, o, me)
		}
	}
	me := *f.peer
	me.PID = os.Getpid()
	b, _ := json.Marshal(me)
	if err := statefile.WriteFile(slotRecord(f.path, mine), b); err != nil {
		return fmt.Errorf("lock state folder: record this process: %w", err)
	}
	return nil
}

// readPeer is the record of the process that holds slot i (pid, from its
// lock), as far as it says.
func readPeer(dir string, i, pid int) peer {
	var p peer
	if b, err := os.ReadFile(slotRecord(dir, i)); err == nil {
		_ = json.Unmarshal(b, &p)
	}
	if pid > 0 {
		p.PID = pid
	}
	return p
}

// peers names the processes of a rolling update that hold the folder,
// for a message.
func (f *folder) peers() string {
	gate, err := statefile.Acquire(filepath.Join(f.path, gateFile))
	if err != nil {
		return ""
	}
	defer func() { _ = gate.Release() }()
	var names []string
	for i := range slots {
		l, err := statefile.TryAcquire(slotLock(f.path, i), statefile.Held())
		var locked *statefile.LockedError
		if errors.As(err, &locked) {
			names = append(names, readPeer(f.path, i, locked.HolderPID).String())
		} else if err == nil {
			_ = l.Release()
		}
	}
	return strings.Join(names, " and ")
}

// unlock releases the locks taken, the last first.
func (f *folder) unlock() {
	for i := len(f.locks) - 1; i >= 0; i-- {
		_ = f.locks[i].Release()
	}
	f.locks = nil
}

// release drops one reference; the last releases the instance lock.
func (f *folder) release() error {
	folders.Lock()
	defer folders.Unlock()
	if f.refs--; f.refs > 0 {
		return nil
	}
	delete(folders.m, f.path)
	f.unlock()
	return nil
}

func (f *folder) card(card string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cards[card]
	if c == nil {
		c = make(chan struct{}, 1)
		f.cards[card] = c
	}
	return c
}

// lockCard takes card's lock, waiting until ctx is done: the work on one
// card is one at a time, and the work on another card never waits for
// it. With WithSharedState the lock is also taken on a file, for the
// other process.
func (f *folder) lockCard(ctx context.Context, card string) (func(), error) {
	c := f.card(card)
	_ = faults.At(ctx, "card/wait", card)
	select {
	case c <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for card %s: %w", card, context.Cause(ctx))
	}
	return f.fileLock(card, c)
}

// fileLock adds the cross-process lock of the shared mode to the held
// in-process lock c, and returns the function that releases both.
func (f *folder) fileLock(card string, c chan struct{}) (func(), error) {
	if !f.shared() {
		return func() { <-c }, nil
	}
	sum := sha256.Sum256([]byte(card))
	dir := filepath.Join(f.path, "locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		<-c
		return nil, fmt.Errorf("lock card %s: %w", card, err)
	}
	l, err := statefile.Acquire(filepath.Join(dir, hex.EncodeToString(sum[:8])+".lock"))
	if err != nil {
		<-c
		return nil, fmt.Errorf("lock card %s: %w", card, err)
	}
	return func() { _ = l.Release(); <-c }, nil
}
