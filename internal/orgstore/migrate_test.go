package orgstore_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

func TestReopenKeepsDataAndMigrationsAreIdempotent(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s1 := storetest.OpenConfig(t, orgstore.Config{URL: url})
		must[int64](t)(s1.PutOrg(ctx, "acme"))
		must[int64](t)(s1.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8"), nil))
		if err := s1.Close(); err != nil {
			t.Fatal(err)
		}
		// Reopen (migrations run again) and open concurrently.
		var wg sync.WaitGroup
		stores := make([]*orgstore.Store, 4)
		for i := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := orgstore.Open(ctx, orgstore.Config{URL: url})
				if err != nil {
					t.Errorf("reopen %d: %v", i, err)
					return
				}
				stores[i] = s
			}()
		}
		wg.Wait()
		for _, s := range stores {
			if s == nil {
				t.FailNow()
			}
			v, ps := must2(t)(s.Prefixes(ctx, "acme"))
			if v != 2 || !slices.Equal(ps, pfxs("10.0.0.0/8")) {
				t.Fatalf("after reopen: %d %v", v, ps)
			}
			s.Close()
		}
	})
}

func TestMigrationsRecordedAndNewerSchemaRefused(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s, err := orgstore.Open(ctx, orgstore.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		db := rawDB(t, dialect, url)
		var n, maxV int
		if err := db.QueryRow(`SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &maxV); err != nil {
			t.Fatal(err)
		}
		if n < 1 || maxV < 1 {
			t.Fatalf("schema_migrations has %d rows up to version %d", n, maxV)
		}
		// A second Open applies nothing new.
		s, err = orgstore.Open(ctx, orgstore.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		var n2 int
		if err := db.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n2); err != nil || n2 != n {
			t.Fatalf("after reopen schema_migrations has %d rows (err %v), want %d", n2, err, n)
		}
		// A schema from a newer binary is refused rather than misused.
		if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`); err != nil {
			t.Fatal(err)
		}
		if s, err := orgstore.Open(ctx, orgstore.Config{URL: url}); err == nil || !strings.Contains(err.Error(), "newer") {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open on a newer schema: err = %v, want a refusal", err)
		}
	})
}

// rawDB opens the store's database directly, to inspect or tamper with it.
func rawDB(t *testing.T, dialect, url string) *sql.DB {
	t.Helper()
	var (
		db  *sql.DB
		err error
	)
	if dialect == storetest.SQLite {
		db, err = sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:"))
	} else {
		db, err = sql.Open("pgx", url)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
