//go:build unix

package orgstore

import (
	"os"
	"syscall"
)

// lockExclusive takes a non-blocking exclusive lock on path (created if
// needed). It returns nil when another process (or another Store in this
// process) holds it.
func lockExclusive(path string) *os.File {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	return f
}
