package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
)

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
