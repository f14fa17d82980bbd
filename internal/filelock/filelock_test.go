package natsbus

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLockDirRefusesASecondHolder: flock is per open file description, so
// a second LockDir in this same process conflicts exactly as a second
// process would; the error names the holder's pid.
func TestLockDirRefusesASecondHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := LockDir(dir, "data directory")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockDir(dir, "data directory")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	for _, want := range []string{"data directory " + dir, "pid " + strconv.Itoa(os.Getpid()), LockFileName} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockDir(dir, "data directory")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	_ = l2.Unlock()
}

// TestEmbeddedLocksItsStore: a second embedded server over one JetStream
// store is refused while the first runs, and starts once it is down.
func TestEmbeddedLocksItsStore(t *testing.T) {
	dir := t.TempDir()
	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "JetStream store directory") {
		t.Fatalf("second server on one store: %v, want a lock error naming the store", err)
	}
	srv.Shutdown()
	srv.Shutdown() // idempotent
	srv2, err := StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatalf("restart after shutdown: %v", err)
	}
	srv2.Shutdown()
}

// TestLockFileRefusesASecondHolder: LockFile guards one file by a lock
// file beside it; the second holder's error names the guarded file, the
// holder's pid and the lock file.
func TestLockFileRefusesASecondHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "o.db.lock")
	l, err := LockFile(path, "SQLite database o.db")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockFile(path, "SQLite database o.db")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	for _, want := range []string{"SQLite database o.db is in use", "pid " + strconv.Itoa(os.Getpid()), path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockFile(path, "SQLite database o.db")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	_ = l2.Unlock()
	// The directory is not made: a typo must not create one.
	if _, err := LockFile(filepath.Join(t.TempDir(), "missing", "o.db.lock"), "SQLite database"); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("lock file in a missing directory: %v, want an open error", err)
	}
}
