//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package resolver

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePort sets SO_REUSEPORT so that several sockets share an address and
// the kernel spreads clients over them.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
