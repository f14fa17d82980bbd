package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/filelock"
)

// lockHolderDBEnv hands TestOrgManagerLocksItsSQLiteFile's database to the
// copy of the test binary it starts as the second process.
const lockHolderDBEnv = "SVCPF_TEST_LOCKED_SQLITE"

// TestOrgManagerLocksItsSQLiteFile: a second orgmanager on the SQLite file
// of a running one is refused with an error naming the file and the
// holder's pid — from another process (this test binary started again)
// and from this one — and starts once the first has stopped (issue 11).
func TestOrgManagerLocksItsSQLiteFile(t *testing.T) {
	if db := os.Getenv(lockHolderDBEnv); db != "" {
		// The second process: its start must be refused.
		cfg := DefaultOrgManagerConfig()
		withTestToken(t, &cfg)
		cfg.HTTP.Address = "127.0.0.1:0"
		cfg.Database.URL = "sqlite:" + db
		om, err := StartOrgManager(context.Background(), cfg, nil, "test", slog.New(slog.DiscardHandler))
		if err == nil {
			om.store.Close()
			t.Fatal("second process: the orgmanager started on a SQLite file another process holds")
		}
		fmt.Println("REFUSED:", err)
		return
	}

	db := filepath.Join(t.TempDir(), "orgmanager.db")
	cfg := DefaultOrgManagerConfig()
	withTestToken(t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Database.URL = "sqlite:" + db
	ctx, cancel := context.WithCancel(context.Background())
	om, err := StartOrgManager(ctx, cfg, nil, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- om.Run(ctx) }()

	cmd := exec.Command(os.Args[0], "-test.run=^TestOrgManagerLocksItsSQLiteFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockHolderDBEnv+"="+db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("second process: %v\n%s", err, out)
	}
	for _, want := range []string{"REFUSED:", "SQLite database " + db + " is in use", "pid " + strconv.Itoa(os.Getpid()), db + ".lock"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("second process's refusal does not say %q:\n%s", want, out)
		}
	}

	_, err = StartOrgManager(context.Background(), cfg, nil, "test", slog.New(slog.DiscardHandler))
	if !errors.Is(err, filelock.ErrLocked) || !strings.Contains(err.Error(), db) {
		t.Fatalf("second orgmanager in this process: %v, want a lock error naming %s", err, db)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first Run: %v", err)
	}
	// Released at stop.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	again, err := StartOrgManager(ctx2, cfg, nil, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("orgmanager after the first stopped: %v", err)
	}
	cancel2()
	if err := again.Run(ctx2); err != nil {
		t.Fatal(err)
	}
}
