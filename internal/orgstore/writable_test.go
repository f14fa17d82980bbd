package orgstore_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// readOnlyFile makes the file at path unwritable for this process until the
// returned function (also run at cleanup) undoes it. As a normal user chmod
// does it; root ignores permission bits, so there the immutable attribute
// (chattr +i, which binds root too) is used, and the test is skipped, saying
// why, only when neither is possible (a file system without it, no
// CAP_LINUX_IMMUTABLE).
func readOnlyFile(t *testing.T, path string) (undo func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		undo = func() { _ = os.Chmod(path, 0o644) }
	} else {
		if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
			t.Skipf("running as root, where chmod does not stop writes, and chattr +i failed (%v: %s): cannot make %s read-only", err, out, path)
		}
		undo = func() { _ = exec.Command("chattr", "-i", path).Run() }
	}
	t.Cleanup(undo)
	// Check that it worked, so that a pass means what it says.
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		f.Close()
		undo()
		t.Skipf("%s is still writable after making it read-only", path)
	}
	return undo
}

func TestOpenRefusesUnwritableDatabase(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		// A database that exists, is migrated and has data: only its
		// writability is wrong.
		s, err := orgstore.Open(ctx, orgstore.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		var want []string
		switch dialect {
		case storetest.SQLite:
			readOnlyFile(t, strings.TrimPrefix(url, "sqlite:"))
			want = []string{"is not writable", "permissions"}
		case storetest.Postgres:
			// pgx sends unknown URL parameters as run-time parameters.
			url += "&default_transaction_read_only=on"
			want = []string{"does not take writes", "primary"}
		}
		s, err = orgstore.Open(ctx, orgstore.Config{URL: url})
		if err == nil {
			s.Close()
			t.Fatal("Open of an unwritable database succeeded")
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open error %q does not say %q", err, w)
			}
		}
	})
}

// TestWriteRecoversFromUnwritableConnection: a write connection that stopped
// taking writes (as one SQLite opened while the file was read-only does for
// good) is dropped after its failure, so writes work again as soon as the
// database does, without a restart; WriteStatus reports each outcome.
// (Making the file read-only while the store runs does not break writes:
// SQLite keeps writing through the descriptor it opened, and a reopened
// connection reuses it while the readers hold the file open.)
func TestWriteRecoversFromUnwritableConnection(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s := storetest.OpenConfig(t, orgstore.Config{URL: url})
		if _, err := s.PutOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteStatus(); err != nil {
			t.Fatalf("WriteStatus after a write = %v", err)
		}
		if err := orgstore.BreakWriterForTest(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutOrg(ctx, "acme"); err == nil {
			t.Fatal("a write on the broken connection succeeded")
		}
		if at, err := s.WriteStatus(); err == nil || at.IsZero() {
			t.Fatalf("WriteStatus after a failed write = %v, %v; want the error", at, err)
		}
		// The next probe and write work: the connection was replaced.
		if err := s.ProbeWrite(ctx); err != nil {
			t.Fatalf("ProbeWrite after recovery: %v", err)
		}
		v, err := s.PutOrg(ctx, "acme")
		if err != nil {
			t.Fatalf("write after recovery: %v", err)
		}
		if v != 2 {
			t.Fatalf("version after recovery = %d, want 2 (the failed writes changed nothing)", v)
		}
		if _, err := s.WriteStatus(); err != nil {
			t.Fatalf("WriteStatus after recovery = %v", err)
		}
	})
}

// TestRefusedInputLeavesWriteStatus: a refusal of the caller's input says
// nothing about the database and must not turn /health red.
func TestRefusedInputLeavesWriteStatus(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		s := open(t)
		ctx := context.Background()
		if err := s.DeleteOrg(ctx, "missing"); err == nil {
			t.Fatal("DeleteOrg of a missing organisation succeeded")
		}
		if _, err := s.NextRevision(ctx, "missing"); err == nil {
			t.Fatal("NextRevision of a missing organisation succeeded")
		}
		if _, err := s.WriteStatus(); err != nil {
			t.Fatalf("WriteStatus after refusals = %v", err)
		}
	})
}
