// Package storetest opens real orgstore databases for tests: a fresh SQLite
// file, or a fresh PostgreSQL schema in the database named by
// SVCPF_TEST_POSTGRES_URL. Every store is isolated, so tests of many packages
// can run in parallel against one PostgreSQL database. It sits beside
// orgstore and is imported only by tests.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// PostgresURLEnv names the environment variable with the PostgreSQL test
// database URL, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const PostgresURLEnv = "SVCPF_TEST_POSTGRES_URL"

// Dialect names accepted by Open and URL.
const (
	SQLite   = orgstore.DialectSQLite
	Postgres = orgstore.DialectPostgres
)

// Dialects runs fn as the subtests "sqlite" and "postgres". open returns a
// new, empty, migrated store on each call, closed (and for PostgreSQL,
// dropped) when the calling test ends. The postgres subtest is skipped when
// SVCPF_TEST_POSTGRES_URL is unset.
func Dialects(t *testing.T, fn func(t *testing.T, open func(t *testing.T) *orgstore.Store)) {
	t.Helper()
	ForEach(t, func(t *testing.T, dialect string) {
		fn(t, func(t *testing.T) *orgstore.Store { return Open(t, dialect) })
	})
}

// ForEach runs fn as the subtests "sqlite" and "postgres" with the dialect
// name, for tests that build their own Config (see URL and OpenConfig). The
// postgres subtest is skipped when SVCPF_TEST_POSTGRES_URL is unset.
func ForEach(t *testing.T, fn func(t *testing.T, dialect string)) {
	t.Helper()
	for _, d := range []string{SQLite, Postgres} {
		t.Run(d, func(t *testing.T) {
			if d == Postgres {
				PostgresURL(t)
			}
			fn(t, d)
		})
	}
}

// Open returns a new, empty, migrated store of the dialect ("sqlite" or
// "postgres"), closed when tb ends.
func Open(tb testing.TB, dialect string) *orgstore.Store {
	tb.Helper()
	return OpenConfig(tb, orgstore.Config{URL: URL(tb, dialect)})
}

// OpenConfig opens a store with cfg (cfg.URL normally from URL) and closes it
// when tb ends.
func OpenConfig(tb testing.TB, cfg orgstore.Config) *orgstore.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := orgstore.Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("storetest: open %s store: %v", strings.SplitN(cfg.URL, ":", 2)[0], err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("storetest: close store: %v", err)
		}
	})
	return s
}

// URL returns a database URL for a new, empty database of the dialect: a
// file in tb's temporary directory, or a fresh PostgreSQL schema that is
// dropped when tb ends. Open it as often as needed, e.g. to test restarts.
func URL(tb testing.TB, dialect string) string {
	tb.Helper()
	switch dialect {
	case SQLite:
		return "sqlite:" + filepath.Join(tb.TempDir(), "orgstore.db")
	case Postgres:
		return postgresSchemaURL(tb, PostgresURL(tb))
	default:
		tb.Fatalf("storetest: unknown dialect %q", dialect)
		return ""
	}
}

// PostgresURL returns the PostgreSQL test database URL, or skips tb with
// the reason when SVCPF_TEST_POSTGRES_URL is unset (CI sets it).
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(PostgresURLEnv)
	if u == "" {
		tb.Skip(PostgresURLEnv + " not set: PostgreSQL tests skipped")
	}
	return u
}

// postgresSchemaURL creates a schema with a random name and returns base
// with search_path pointing at it; pgx sends unknown URL parameters to the
// server as run-time parameters, so every connection of the store's pool
// works in that schema only.
func postgresSchemaURL(tb testing.TB, base string) string {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		tb.Fatalf("storetest: %s must be a postgres:// URL", PostgresURLEnv)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	schema := "svcpf_test_" + hex.EncodeToString(rnd[:])

	db, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatalf("storetest: connect to PostgreSQL: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("storetest: create schema: %v", err)
	}
	tb.Cleanup(func() { dropSchema(tb, base, schema) })

	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// dropSchema runs after the store is closed: cleanups run last-in first-out,
// and the schema's cleanup is registered before the store's.
func dropSchema(tb testing.TB, base, schema string) {
	db, err := sql.Open("pgx", base)
	if err != nil {
		tb.Errorf("storetest: drop schema %s: %v", schema, err)
		return
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, fmt.Sprintf("DROP SCHEMA %s CASCADE", schema)); err != nil {
		tb.Errorf("storetest: drop schema %s: %v", schema, err)
	}
}
