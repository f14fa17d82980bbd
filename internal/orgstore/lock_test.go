package orgstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/filelock"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// TestExclusiveSQLiteRefusesASecondStore: with Exclusive (the orgmanager)
// a second Store on a SQLite file another Store holds is refused with an
// error naming the file, the holder's pid and the lock file, and opens
// once the first is closed. Both opens are in this one process: flock is
// per open file description, so the second conflicts as another process's
// would. Without Exclusive a second Store still opens (tests and tools
// that read beside a running one), reading without the cache.
func TestExclusiveSQLiteRefusesASecondStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "orgmanager.db")
	cfg := orgstore.Config{URL: "sqlite:" + path, Exclusive: true}
	first, err := orgstore.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.PutOrg(ctx, "acme"); err != nil {
		t.Fatal(err)
	}

	second, err := orgstore.Open(ctx, cfg)
	if err == nil {
		second.Close()
		t.Fatal("a second exclusive Store opened the same SQLite file")
	}
	if !errors.Is(err, filelock.ErrLocked) {
		t.Fatalf("second Open: %v, want filelock.ErrLocked", err)
	}
	for _, want := range []string{"SQLite database " + path + " is in use", "pid " + strconv.Itoa(os.Getpid()), path + ".lock"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// The same file by another name (a relative path) is the same lock.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if rel, err := filepath.Rel(wd, path); err == nil {
		if s, err := orgstore.Open(ctx, orgstore.Config{URL: "sqlite:" + rel, Exclusive: true}); !errors.Is(err, filelock.ErrLocked) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("second Open by the relative path %s: %v, want filelock.ErrLocked", rel, err)
		}
	}

	shared, err := orgstore.Open(ctx, orgstore.Config{URL: cfg.URL})
	if err != nil {
		t.Fatalf("a non-exclusive Store beside an exclusive one: %v", err)
	}
	if _, err := shared.GetOrg(ctx, "acme"); err != nil {
		t.Fatalf("the non-exclusive Store does not read the file: %v", err)
	}
	if err := shared.Close(); err != nil {
		t.Fatal(err)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := orgstore.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	if _, err := again.GetOrg(ctx, "acme"); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestGuestLeavesTheLock: a Guest store (the token CLI, an IP Mapper
// verifying tokens) open on the SQLite file never keeps the orgmanager's
// exclusive start off it, and writes beside it.
func TestGuestLeavesTheLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "orgmanager.db")
	guest, err := orgstore.Open(ctx, orgstore.Config{URL: "sqlite:" + path, Guest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	owner, err := orgstore.Open(ctx, orgstore.Config{URL: "sqlite:" + path, Exclusive: true})
	if err != nil {
		t.Fatalf("the exclusive open beside a guest: %v", err)
	}
	defer owner.Close()
	if has, err := guest.HasTokens(ctx); err != nil || has {
		t.Fatalf("the guest reads: %v %v", has, err)
	}
}
