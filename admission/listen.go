package admission

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listen opens a TCP listener on address, with SO_REUSEPORT when
// reusePort is set.
func listen(ctx context.Context, address string, reusePort bool) (net.Listener, error) {
	lc := net.ListenConfig{}
	if reusePort {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("set SO_REUSEPORT: %w", serr)
			}
			return nil
		}
	}
	return lc.Listen(ctx, "tcp", address)
}
