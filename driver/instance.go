package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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

// instanceLock is the name of the instance lock (statefile.LockInstance)
// that keeps the plugin data and checkpoint folders to one running driver,
// or to the two instances of its rolling update: drakit.lock, beside
// drakit.gate and the rolling update's slots.
const instanceLock = "drakit"

// ErrFoldersInUse is wrapped by [Runtime.Run]'s error when the plugin
// data or checkpoint folder is held by a driver process this one may not
// run beside: another driver, a third process beside the two instances of
// a rolling update, or a process of another owner (a second release of
// the driver on the node, see [WithRollingUpdateOwner]). The message names
// the folder and the processes that hold it; the error wraps
// [statefile.ErrInUse] too.
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
// update a driver holds the folders alone; with one (rolling), the two
// instances of the rolling update of the same driver and owner hold them,
// their calls serialized by the call lock (serialize.go). Any other
// process fails at once with an error naming the folder and the holders.
func ownFolders(folders []string, driverName, owner string, rolling bool) (func(), error) {
	var held []*statefile.InstanceLock
	release := func() {
		for i := len(held) - 1; i >= 0; i-- {
			_ = held[i].Release()
		}
	}
	opts := []statefile.InstanceOption{statefile.As(driverName, owner)}
	if rolling {
		opts = append(opts, statefile.RollingUpdate())
	}
	seen := map[string]bool{}
	for _, dir := range folders {
		dir = filepath.Clean(dir)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		l, err := statefile.LockInstance(dir, instanceLock, opts...)
		if errors.Is(err, statefile.ErrInUse) {
			err = fmt.Errorf("%w: %w", ErrFoldersInUse, err)
		}
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, l)
	}
	return release, nil
}
