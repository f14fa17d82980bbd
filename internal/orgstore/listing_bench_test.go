package orgstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// bulkLoad runs fill in one transaction on a connection of its own beside
// the store (rows one by one through the store's API would take minutes),
// then refreshes PostgreSQL's planner statistics.
func bulkLoad(b *testing.B, dialect, url string, fill func(tx *sql.Tx) error) {
	b.Helper()
	driver, dsn := "pgx", url
	if dialect == storetest.SQLite {
		driver, dsn = "sqlite", strings.TrimPrefix(url, "sqlite:")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	if err := fill(tx); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	if dialect == storetest.Postgres {
		if _, err := db.Exec(`ANALYZE`); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListOrgsPage reads one page of 100 organisations out of
// 100 000, from a cursor in the middle (keyset: one index range scan).
func BenchmarkListOrgsPage(b *testing.B) {
	const orgs = 100_000
	for _, d := range []string{storetest.SQLite, storetest.Postgres} {
		b.Run(d, func(b *testing.B) {
			url := storetest.URL(b, d)
			s := storetest.OpenConfig(b, orgstore.Config{URL: url})
			bulkLoad(b, d, url, func(tx *sql.Tx) error {
				for i := range orgs {
					if _, err := tx.Exec(`INSERT INTO orgs (id, version, created_at, updated_at) VALUES ($1, 1, $2, $2)`,
						fmt.Sprintf("org-%06d", i), int64(i)); err != nil {
						return err
					}
				}
				return nil
			})
			ctx := context.Background()
			i := 0
			for b.Loop() {
				after := fmt.Sprintf("org-%06d", (i*7919)%orgs)
				i++
				page, _, err := s.ListOrgs(ctx, after, 100)
				if err != nil || (len(page) == 0 && after < fmt.Sprintf("org-%06d", orgs-1)) {
					b.Fatalf("page after %s: %d items, %v", after, len(page), err)
				}
			}
		})
	}
}

// BenchmarkAuditRecords reads the newest 100 records out of 100 000 spread
// over 100 organisations: all of them, one organisation's, and one
// organisation's since a time.
func BenchmarkAuditRecords(b *testing.B) {
	const records, orgs = 100_000, 100
	for _, d := range []string{storetest.SQLite, storetest.Postgres} {
		b.Run(d, func(b *testing.B) {
			url := storetest.URL(b, d)
			s := storetest.OpenConfig(b, orgstore.Config{URL: url})
			t0 := time.Now().Add(-24 * time.Hour)
			bulkLoad(b, d, url, func(tx *sql.Tx) error {
				for i := range records {
					if _, err := tx.Exec(`INSERT INTO audit (time, token_id, token_name, role, method, path, org, org_version, request_id, status)
						VALUES ($1, 'tok', 'ops', 'admin', 'PATCH', $2, $3, $4, $5, 200)`,
						t0.Add(time.Duration(i)*time.Second/2).UnixMicro(), fmt.Sprintf("/org/org-%03d/prefixes", i%orgs),
						fmt.Sprintf("org-%03d", i%orgs), int64(i/orgs), fmt.Sprintf("req-%d", i)); err != nil {
						return err
					}
				}
				return nil
			})
			ctx := context.Background()
			for _, q := range []struct {
				name string
				q    access.AuditQuery
			}{
				{"all", access.AuditQuery{Limit: 100}},
				{"org", access.AuditQuery{Org: "org-042", Limit: 100}},
				{"org-since", access.AuditQuery{Org: "org-042", Since: t0.Add(10 * time.Hour), Limit: 100}},
			} {
				b.Run(q.name, func(b *testing.B) {
					for b.Loop() {
						recs, err := s.AuditRecords(ctx, q.q)
						if err != nil || len(recs) != 100 {
							b.Fatalf("%d records, %v", len(recs), err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkAppendAudit is the cost the audit adds to every API write: one
// insert in a transaction of its own.
func BenchmarkAppendAudit(b *testing.B) {
	for _, d := range []string{storetest.SQLite, storetest.Postgres} {
		b.Run(d, func(b *testing.B) {
			s := storetest.Open(b, d)
			ctx := context.Background()
			rec := access.AuditRecord{TokenID: "tok", TokenName: "ops", Role: access.RoleAdmin, Method: "PATCH",
				Path: "/org/acme/prefixes", Org: "acme", OrgVersion: 7, RequestID: "0123456789abcdef0123456789abcdef", Status: 200}
			for b.Loop() {
				if err := s.AppendAudit(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
