package filelock

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDirRefusesASecondHolder: flock is per open file description, so
// a second Dir in this same process conflicts exactly as a second
// process would; the error names the holder's pid.
func TestDirRefusesASecondHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := Dir(dir, "data directory")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Dir(dir, "data directory")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	for _, want := range []string{"data directory " + dir, "pid " + strconv.Itoa(os.Getpid()), FileName} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := Dir(dir, "data directory")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	_ = l2.Unlock()
}

// TestFileRefusesASecondHolder: File guards one file by a lock
// file beside it; the second holder's error names the guarded file, the
// holder's pid and the lock file.
func TestFileRefusesASecondHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "o.db.lock")
	l, err := File(path, "SQLite database o.db")
	if err != nil {
		t.Fatal(err)
	}
	_, err = File(path, "SQLite database o.db")
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
	l2, err := File(path, "SQLite database o.db")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	_ = l2.Unlock()
	// The directory is not made: a typo must not create one.
	if _, err := File(filepath.Join(t.TempDir(), "missing", "o.db.lock"), "SQLite database"); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("lock file in a missing directory: %v, want an open error", err)
	}
}
