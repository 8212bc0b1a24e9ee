package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"k8s.io/klog/v2"
)

// File modes the runtime sets itself, whatever the process umask: the
// kubelet (root) is the only client of the sockets, and the folders hold
// the checkpoint and the sockets.
const (
	socketMode     fs.FileMode = 0o600
	lockMode       fs.FileMode = 0o600
	folderMode     fs.FileMode = 0o750
	checkpointMode fs.FileMode = 0o700
)

// instanceLockFile is the name of the lock file that marks the plugin
// data and checkpoint folders as owned by one running driver.
const instanceLockFile = "drakit.lock"

// ErrFoldersInUse is wrapped by [Driver.Run]'s error when another process
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
	var held []*os.File
	release = func() {
		for _, f := range held {
			_ = f.Close() // closing releases the flock
		}
	}
	seen := map[string]bool{}
	for _, dir := range folders {
		dir = filepath.Clean(dir)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		f, err := lockInstance(filepath.Join(dir, instanceLockFile), shared)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, f)
	}
	return release, nil
}

// lockInstance opens path (mode lockMode) and flocks it without waiting.
func lockInstance(path string, shared bool) (*os.File, error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	if err := flock(f, how|syscall.LOCK_NB); err != nil {
		holder := readHolder(f)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by %s; run one driver per node (two pods of a rolling update both need WithRollingUpdate)", ErrFoldersInUse, path, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Only the exclusive holder names itself: shared holders are several,
	// and clear the name a crashed exclusive holder may have left.
	content := ""
	if !shared {
		content = "pid=" + strconv.Itoa(os.Getpid()) + "\n"
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(content), 0)
	}
	return f, nil
}

// readHolder describes the holder of a lock file from its content.
func readHolder(f *os.File) string {
	buf := make([]byte, 64)
	n, _ := f.ReadAt(buf, 0)
	pid, ok := bytes.CutPrefix(bytes.TrimSpace(buf[:n]), []byte("pid="))
	if !ok || len(pid) == 0 {
		return "driver processes running with WithRollingUpdate"
	}
	return "driver process with PID " + string(pid)
}

func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, lockMode)
	if err != nil {
		return nil, err
	}
	// O_CREATE's mode is subject to the umask and does not change an
	// existing file (the helper creates its lock files 0666).
	if err := f.Chmod(lockMode); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// listenUnix listens on a unix socket at path whose mode is socketMode
// from the moment it exists: the mode is set on the socket before bind
// (Linux gives the socket file the socket inode's mode, less the umask)
// and again on the file after. A stale socket at path is removed first;
// closing the listener removes the socket file.
func listenUnix(_ context.Context, path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: socket: %w", path, err)
	}
	file := os.NewFile(uintptr(fd), path)
	defer file.Close() // FileListener works on a duplicate
	if err := syscall.Fchmod(fd, uint32(socketMode)); err != nil {
		return nil, fmt.Errorf("listen on %s: set socket mode: %w", path, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		return nil, fmt.Errorf("listen on %s: bind: %w", path, err)
	}
	ln, err := func() (net.Listener, error) {
		if err := os.Chmod(path, socketMode); err != nil {
			return nil, fmt.Errorf("set socket mode: %w", err)
		}
		if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return net.FileListener(file)
	}()
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return &socketListener{Listener: ln, path: path}, nil
}

// socketListener removes its socket file on Close.
type socketListener struct {
	net.Listener
	path string
}

func (l *socketListener) Close() error {
	err := l.Listener.Close()
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("remove socket: %w", rerr))
	}
	return err
}
