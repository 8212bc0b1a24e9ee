package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
	"github.com/drakit/drakit/statefile"
)

// lockName is the state folder's instance lock (statefile.LockInstance):
// lifecycle.lock, held by a driver alone or by the two instances of its
// rolling update, beside lifecycle.gate and their slots.
const lockName = "lifecycle"

// ErrStateInUse is wrapped by [Open]'s error when this process may not
// have the state folder: another process holds it (beyond what
// [WithRollingUpdate] admits), or this process has it open with other
// sharing options. The message names the folder and the processes that
// hold it; a refusal by another process wraps [statefile.ErrInUse] too.
var ErrStateInUse = errors.New("partition state folder is in use by another process")

// peer is who a rolling-update process is: the other instance of the
// same driver and owner shares the folder with it.
type peer struct{ Driver, Owner string }

// folder is one state folder as this process holds it: the instance lock
// and the per-card locks, shared by every Manager of the process on the
// folder (a test's restarts, a driver that reopens it), so that two of
// them take turns per card instead of refusing each other.
type folder struct {
	path string
	peer *peer // nil: the folder is this process's alone
	lock *statefile.InstanceLock
	refs int

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
	var opts []statefile.InstanceOption
	if p != nil {
		opts = append(opts, statefile.As(p.Driver, p.Owner), statefile.RollingUpdate())
	}
	l, err := statefile.LockInstance(abs, lockName, opts...)
	if errors.Is(err, statefile.ErrInUse) {
		return nil, fmt.Errorf("%w: %w", ErrStateInUse, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock state folder: %w", err)
	}
	f := &folder{path: abs, peer: p, lock: l, refs: 1, cards: map[string]chan struct{}{}}
	folders.m[abs] = f
	return f, nil
}

// release drops one reference; the last releases the instance lock.
func (f *folder) release() error {
	folders.Lock()
	defer folders.Unlock()
	if f.refs--; f.refs > 0 {
		return nil
	}
	delete(folders.m, f.path)
	return f.lock.Release()
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
