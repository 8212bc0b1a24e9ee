package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/statefile"
)

// File modes the runtime sets itself, whatever the process umask: the
// kubelet (root) is the only client of the sockets, and the folders hold
// the checkpoint and the sockets.
const (
	socketMode     fs.FileMode = 0o600
	folderMode     fs.FileMode = 0o750
	checkpointMode fs.FileMode = 0o700
)

// instanceLockFile is the name of the lock file that marks the plugin
// data and checkpoint folders as owned by one running driver.
const instanceLockFile = "drakit.lock"

// ErrFoldersInUse is wrapped by [Runtime.Run]'s error when another process
// runs a driver on the same plugin data or checkpoint folder. The message
// names the lock file and its holder.
var ErrFoldersInUse = errors.New("folder in use by another driver process")

// ensureFolder creates dir with mode create (and missing parents), and
// takes from an existing dir the permission bits that maxMode lacks: a
// folder made group- or world-writable by hand must not let others
// replace the sockets or the checkpoint.
func ensureFolder(ctx context.Context, dir string, create, maxMode fs.FileMode) error {
	if err := os.MkdirAll(dir, create); err != nil {
		return fmt.Errorf("create folder: %w", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("check folder: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("check folder %s: not a folder", dir)
	}
	if got := info.Mode().Perm(); got&^maxMode != 0 {
		if err := os.Chmod(dir, got&maxMode); err != nil {
			return fmt.Errorf("tighten mode of folder %s: %w", dir, err)
		}
		klog.FromContext(ctx).Info("Tightened folder permissions", "folder", dir, "was", got, "now", got&maxMode)
	}
	return nil
}

// ownFolders takes the instance lock in each folder (once per distinct
// folder) and returns the function that releases them. Without a rolling
// update the lock is exclusive and records this process's PID: a second
// driver on the same folders fails at once with an error naming the
// first. With a rolling update it is shared, so that the two pods of an
// update run side by side while a driver without rolling update is still
// kept out; their calls are then serialized by the call lock (serialize.go).
func ownFolders(folders []string, shared bool) (release func(), err error) {
	var held []*statefile.Lock
	release = func() {
		for _, l := range held {
			_ = l.Release()
		}
	}
	var opts []statefile.LockOption
	if shared {
		opts = append(opts, statefile.Shared())
	}
	seen := map[string]bool{}
	for _, dir := range folders {
		dir = filepath.Clean(dir)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		path := filepath.Join(dir, instanceLockFile)
		l, err := statefile.TryAcquire(path, opts...)
		var locked *statefile.LockedError
		if errors.As(err, &locked) {
			holder := "driver processes running with WithRollingUpdate"
			if locked.HolderPID > 0 {
				holder = "driver process with PID " + strconv.Itoa(locked.HolderPID)
			}
			err = fmt.Errorf("%w: %s is locked by %s; run one driver per node (two pods of a rolling update both need WithRollingUpdate)", ErrFoldersInUse, path, holder)
		}
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, l)
	}
	return release, nil
}
