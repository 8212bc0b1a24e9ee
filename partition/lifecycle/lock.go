package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/drakit/drakit/statefile"
)

// lockFile is the state folder's instance lock.
const lockFile = "lifecycle.lock"

// ErrStateInUse is wrapped by [Open]'s error when another process runs a
// lifecycle on the same state folder. Two processes that each believe
// every partition on a dynamic card is theirs destroy each other's: the
// second is refused, and the message names the first.
var ErrStateInUse = errors.New("partition state folder is in use by another process")

// folder is one state folder as this process holds it: the instance lock
// and the per-card locks, shared by every Manager of the process on the
// folder (a test's restarts, a driver that reopens it), so that two of
// them take turns per card instead of refusing each other.
type folder struct {
	path   string
	shared bool
	lock   *statefile.Lock
	refs   int

	mu    sync.Mutex
	cards map[string]chan struct{}
}

var folders = struct {
	sync.Mutex
	m map[string]*folder
}{m: map[string]*folder{}}

// acquireFolder takes the instance lock of dir for this process:
// exclusive, or shared (WithSharedState) so that the processes of a
// rolling update run side by side while any other is kept out.
func acquireFolder(dir string, shared bool) (*folder, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	folders.Lock()
	defer folders.Unlock()
	if f := folders.m[abs]; f != nil {
		if f.shared != shared {
			return nil, fmt.Errorf("%w: %s is open in this process with WithSharedState %v", ErrStateInUse, abs, f.shared)
		}
		f.refs++
		return f, nil
	}
	var opts []statefile.LockOption
	if shared {
		opts = append(opts, statefile.Shared())
	}
	path := filepath.Join(abs, lockFile)
	l, err := statefile.TryAcquire(path, append(opts, statefile.Held())...)
	var locked *statefile.LockedError
	if errors.As(err, &locked) {
		holder := "processes running with WithSharedState"
		if locked.HolderPID > 0 {
			holder = "process " + strconv.Itoa(locked.HolderPID)
		}
		return nil, fmt.Errorf("%w: %s is locked by %s: run one driver per state folder (the processes of a rolling update both need WithSharedState)", ErrStateInUse, path, holder)
	}
	if err != nil {
		return nil, fmt.Errorf("lock state folder: %w", err)
	}
	f := &folder{path: abs, shared: shared, lock: l, refs: 1, cards: map[string]chan struct{}{}}
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
	if !f.shared {
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
