package storetest_test

import (
	"context"
	"database/sql"
	"errors"
	"net/netip"
	"net/url"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestStoresAreIsolated: two stores of one dialect never share data, which is
// what lets tests of many packages run in parallel on one PostgreSQL.
func TestStoresAreIsolated(t *testing.T) {
	var dialects []string
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		a, b := open(t), open(t)
		dialects = append(dialects, a.Dialect())
		if a.Dialect() != b.Dialect() {
			t.Fatalf("dialects %q and %q in one subtest", a.Dialect(), b.Dialect())
		}
		if _, err := a.PutOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.GetOrg(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("store b sees store a's organisation: %v", err)
		}
		// The global prefix rule is per store too.
		if _, err := b.PutOrg(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		ten := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		if _, err := a.UpdatePrefixes(ctx, "acme", ten, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := b.UpdatePrefixes(ctx, "other", ten, nil); err != nil {
			t.Fatalf("store b sees store a's prefixes: %v", err)
		}
	})
	if len(dialects) == 0 || dialects[0] != storetest.SQLite {
		t.Fatalf("the sqlite subtest did not run first: %v", dialects)
	}
}

func TestPostgresSchemaDroppedAfterTest(t *testing.T) {
	base := storetest.PostgresURL(t)
	var schema string
	t.Run("inner", func(t *testing.T) {
		u, err := url.Parse(storetest.URL(t, storetest.Postgres))
		if err != nil {
			t.Fatal(err)
		}
		schema = u.Query().Get("search_path")
		s := storetest.OpenConfig(t, orgstore.Config{URL: u.String()})
		if _, err := s.PutOrg(context.Background(), "acme"); err != nil {
			t.Fatal(err)
		}
	})
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if schema == "" || n != 0 {
		t.Fatalf("schema %q still exists after its test (%d)", schema, n)
	}
}

func TestOpenSQLiteWithoutPostgres(t *testing.T) {
	s := storetest.Open(t, storetest.SQLite)
	if s.Dialect() != storetest.SQLite {
		t.Fatalf("Dialect() = %q", s.Dialect())
	}
}
