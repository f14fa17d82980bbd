//go:build unix

package feedbuild

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// fileID is the file's inode: a file replaced by rename has a new one.
func fileID(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

// lockDir takes the directory's build lock (flock, released by the kernel
// when the process dies, so a crashed build never leaves it held).
func lockDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another feed build is running on %s (it holds %s); wait for it to finish", dir, path)
		}
		return nil, fmt.Errorf("build lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
