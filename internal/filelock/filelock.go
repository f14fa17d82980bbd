// Package filelock is svc-pf's single-instance lock: an exclusive flock on a
// directory's lock file (Dir: `svc-pf all`'s data directory, the embedded
// NATS server's JetStream store) or beside one file (File: the
// orgmanager's SQLite database), naming the holder's pid when a second
// process is refused. The kernel drops an flock with the process, so a
// kill -9 leaves no stale lock behind.
package filelock

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// FileName is the name of the lock file Dir keeps in a directory.
const FileName = ".svc-pf.lock"

// Lock is an exclusive lock on a directory (Dir) or on one file (File),
// held by this process until Unlock (or its exit: the kernel
// drops an flock with the last descriptor, so a kill -9 leaves no stale
// lock behind, only a stale pid in the file).
type Lock struct {
	f    *os.File
	path string
}

// ErrLocked is wrapped by Dir's and File's error when another holder has the lock.
var ErrLocked = errors.New("locked by another process")

// Dir takes an exclusive flock on <dir>/.svc-pf.lock, creating dir and
// the file as needed, and writes this process's pid into it so that the
// next one can name the holder. what names the directory's role in the
// error ("data directory", "JetStream store directory").
//
// Two processes writing one data directory (two `svc-pf all`, or two
// embedded NATS servers over one JetStream store) corrupt each other's
// state without either noticing; neither nats-server nor SQLite refuses
// the second one, so the lock is ours. flock is per open file
// description, so a second Dir in the same process conflicts too
// (what the tests rely on).
func Dir(dir, what string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, dir, err)
	}
	return lock(filepath.Join(dir, FileName), what+" "+dir, "use another directory")
}

// File is Dir for one file that is not a directory of its own: it
// takes an exclusive flock on the lock file at path (created as needed;
// its directory must exist), beside the file it guards. what names that
// file in the error ("SQLite database /var/lib/svc-pf/orgmanager.db").
// The orgmanager's SQLite database is guarded so: two orgmanagers on one
// file would each start, and the store's read cache, which trusts that
// its process makes every write, would serve the other's stale rows.
func File(path, what string) (*Lock, error) {
	return lock(path, what, "use another file")
}

func lock(path, what, instead string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("%s: lock file: %w", what, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := readHolder(f)
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by another svc-pf process (%s; lock file %s): %w — stop it or %s",
				what, holder, path, ErrLocked, instead)
		}
		return nil, fmt.Errorf("%s: lock %s: %w", what, path, err)
	}
	// The pid is informational (the lock is the flock): rewrite it whole.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f, path: path}, nil
}

// readHolder names the pid the holder wrote, or says it is unknown (the
// holder may be between its flock and its write).
func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	if pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:n]))); err == nil && pid > 0 {
		return "pid " + strconv.Itoa(pid)
	}
	return "pid unknown"
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Unlock releases the lock. The file stays: removing it would let a
// process that opened it just before take a lock on an unlinked file
// while a third one locks a new file of the same name.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}
