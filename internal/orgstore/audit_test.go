package orgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// auditIDs lists the request ids of records, which the tests use as names.
func auditIDs(recs []access.AuditRecord) string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.RequestID
	}
	return strings.Join(ids, " ")
}

func TestAuditAppendAndRead(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, clk := openClocked(t, dialect)
		t0 := clk.Now().UTC().Truncate(time.Microsecond)
		at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
		// r1..r6 in time order; r4 and r5 share a time (the id breaks the
		// tie); r3 is platform-level.
		for _, r := range []access.AuditRecord{
			{Time: at(1), RequestID: "r1", Org: "acme", OrgVersion: 1, Method: "PUT", Path: "/org/acme", Status: 200,
				TokenID: "t1", TokenName: "ops", Role: access.RoleAdmin},
			{Time: at(2), RequestID: "r2", Org: "beta", OrgVersion: 1, Method: "PUT", Path: "/org/beta", Status: 200},
			{Time: at(3), RequestID: "r3", Method: "PUT", Path: "/settings", Status: 200},
			{Time: at(4), RequestID: "r4", Org: "acme", OrgVersion: 2, Method: "PATCH", Path: "/org/acme/prefixes", Status: 200},
			{Time: at(4), RequestID: "r5", Org: "acme", Method: "PATCH", Path: "/org/acme/prefixes", Status: 422},
			{Time: at(5), RequestID: "r6", Org: "beta", Method: "DELETE", Path: "/org/beta?confirm=true", Status: 204},
		} {
			if err := s.AppendAudit(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		read := func(q access.AuditQuery) []access.AuditRecord {
			t.Helper()
			recs, err := s.AuditRecords(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			return recs
		}
		for _, tc := range []struct {
			name string
			q    access.AuditQuery
			want string
		}{
			{"all", access.AuditQuery{Limit: 100}, "r6 r5 r4 r3 r2 r1"},
			{"org", access.AuditQuery{Org: "acme", Limit: 100}, "r5 r4 r1"},
			{"since", access.AuditQuery{Since: at(4), Limit: 100}, "r6 r5 r4"},
			{"org since", access.AuditQuery{Org: "beta", Since: at(3), Limit: 100}, "r6"},
			{"limit", access.AuditQuery{Limit: 2}, "r6 r5"},
			{"limit 0 is 1", access.AuditQuery{}, "r6"},
			{"unknown org", access.AuditQuery{Org: "nobody", Limit: 10}, ""},
		} {
			if got := auditIDs(read(tc.q)); got != tc.want {
				t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
			}
		}
		// Every field comes back as written, with an id and a UTC time.
		first := read(access.AuditQuery{Org: "acme", Limit: 100})[2]
		want := access.AuditRecord{ID: first.ID, Time: at(1), RequestID: "r1", Org: "acme", OrgVersion: 1, Method: "PUT",
			Path: "/org/acme", Status: 200, TokenID: "t1", TokenName: "ops", Role: access.RoleAdmin}
		if first != want || first.ID == 0 || first.Time.Location() != time.UTC {
			t.Fatalf("read back %+v, want %+v", first, want)
		}

		// Pages by the Before cursor: no record twice, none left out, the
		// tie at one time included.
		for _, q := range []access.AuditQuery{{Limit: 2}, {Org: "acme", Limit: 1}, {Since: at(2), Limit: 2}} {
			var got []string
			for page := 0; ; page++ {
				recs := read(q)
				if len(recs) == 0 || page > 10 {
					break
				}
				got = append(got, auditIDs(recs))
				q.Before = recs[len(recs)-1].ID
			}
			all := q
			all.Before, all.Limit = 0, 100
			if g, w := strings.Join(got, " "), auditIDs(read(all)); g != w {
				t.Errorf("pages of %+v: %q, want %q", all, g, w)
			}
		}

		// A zero time is the store's clock.
		clk.Advance(time.Hour)
		if err := s.AppendAudit(ctx, access.AuditRecord{RequestID: "now", Method: "POST", Path: "/tokens", Status: 200}); err != nil {
			t.Fatal(err)
		}
		if r := read(access.AuditQuery{Limit: 1})[0]; r.RequestID != "now" || !r.Time.Equal(t0.Add(time.Hour)) {
			t.Fatalf("record without a time: %+v, want the store's clock %v", r, t0.Add(time.Hour))
		}
	})
}

// TestAuditKeepsOddText: a record is evidence and is kept whatever the
// request held: a NUL and invalid UTF-8 (which PostgreSQL's TEXT refuses)
// are replaced, an overlong path is cut, on both databases alike.
func TestAuditKeepsOddText(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		long := "/org/acme/overrides?cidr=" + strings.Repeat("é", 5000)
		if err := s.AppendAudit(ctx, access.AuditRecord{Method: "POST", Path: long, RequestID: "a\x00b\xffc",
			TokenName: strings.Repeat("n", 1000), Org: "acme", Status: 400}); err != nil {
			t.Fatalf("append: %v", err)
		}
		recs, err := s.AuditRecords(ctx, access.AuditQuery{Org: "acme", Limit: 1})
		if err != nil || len(recs) != 1 {
			t.Fatalf("read: %v %v", recs, err)
		}
		r := recs[0]
		if r.RequestID != "a\uFFFDb\uFFFDc" {
			t.Errorf("request id %q", r.RequestID)
		}
		if len(r.Path) > 2048 || !strings.HasPrefix(r.Path, "/org/acme/overrides?cidr=éé") || !strings.HasSuffix(r.Path, "…") ||
			!utf8.ValidString(r.Path) {
			t.Errorf("path of %d bytes, valid UTF-8 %v, ends %q", len(r.Path), utf8.ValidString(r.Path), r.Path[len(r.Path)-8:])
		}
		if len(r.TokenName) > 256 {
			t.Errorf("token name of %d bytes", len(r.TokenName))
		}
	})
}

func TestAuditPrune(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s := storetest.OpenConfig(t, orgstore.Config{URL: url})
		t0 := time.Now().Add(-time.Hour)
		// More than one prune transaction's worth of old records, loaded in
		// one transaction beside the store (appending them one by one
		// would take most of the test's time).
		const old = 5000 + 123
		db := rawDB(t, dialect, url)
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := range old {
			if _, err := tx.Exec(`INSERT INTO audit (time, method, path, org, status) VALUES ($1, 'PUT', '/org/acme', 'acme', 200)`,
				t0.Add(time.Duration(i)*time.Millisecond).UnixMicro()); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		keep := t0.Add(time.Hour)
		if err := s.AppendAudit(ctx, access.AuditRecord{Time: keep, RequestID: "kept", Method: "PUT", Path: "/org/acme", Status: 200}); err != nil {
			t.Fatal(err)
		}
		n, err := s.PruneAudit(ctx, keep)
		if err != nil || n != old {
			t.Fatalf("PruneAudit = %d, %v; want %d", n, err, old)
		}
		recs, err := s.AuditRecords(ctx, access.AuditQuery{Limit: 10})
		if err != nil || auditIDs(recs) != "kept" {
			t.Fatalf("after the prune: %q %v", auditIDs(recs), err)
		}
		// A cursor whose record was pruned selects nothing older.
		recs, err = s.AuditRecords(ctx, access.AuditQuery{Limit: 10, Before: 1})
		if err != nil || len(recs) != 0 {
			t.Fatalf("cursor of a pruned record: %q %v", auditIDs(recs), err)
		}
		if n, err := s.PruneAudit(ctx, keep); err != nil || n != 0 {
			t.Fatalf("second prune = %d, %v", n, err)
		}
	})
}

// TestAuditAppendFailsWhenTheDatabaseRefusesWrites: the failure reaches
// the caller (the auditor logs and counts it) rather than vanishing.
func TestAuditAppendFailsWhenTheDatabaseRefusesWrites(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		if err := orgstore.BreakWriterForTest(ctx, s); err != nil {
			t.Fatal(err)
		}
		err := s.AppendAudit(ctx, access.AuditRecord{Method: "PUT", Path: "/org/acme", Status: 200})
		if err == nil || errors.Is(err, orgstore.ErrInvalidInput) {
			t.Fatalf("append on a read-only database: %v", err)
		}
	})
}

// TestAuditAppendLeavesWriteStatusAlone: the audit record that follows
// every API write must not report the database writable after the write
// itself failed. Before, the record's successful insert (in a table the
// fault did not touch) cleared the failure at once and /health stayed
// green.
func TestAuditAppendLeavesWriteStatusAlone(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s := storetest.OpenConfig(t, orgstore.Config{URL: url})
		if _, err := s.PutOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		fault := map[string]string{
			storetest.SQLite: `CREATE TRIGGER fault BEFORE UPDATE ON orgs BEGIN SELECT RAISE(ABORT, 'disk on fire'); END`,
			storetest.Postgres: `CREATE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$;
				CREATE TRIGGER fault BEFORE UPDATE ON orgs FOR EACH ROW EXECUTE FUNCTION fault()`,
		}[dialect]
		if _, err := rawDB(t, dialect, url).Exec(fault); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutOrg(ctx, "acme"); err == nil {
			t.Fatal("the write under the fault succeeded")
		}
		if err := s.AppendAudit(ctx, access.AuditRecord{Method: "PUT", Path: "/org/acme", Org: "acme", Status: 500}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PruneAudit(ctx, time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteStatus(); err == nil || !strings.Contains(err.Error(), "disk on fire") {
			t.Fatalf("WriteStatus after the failed write and the audit's append: %v, want the failure", err)
		}
	})
}
