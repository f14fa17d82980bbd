//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package resolver

import "syscall"

// reusePort does nothing where SO_REUSEPORT does not exist: one socket per
// address then serves every client.
func reusePort(_, _ string, _ syscall.RawConn) error { return nil }
