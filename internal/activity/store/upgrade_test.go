package store

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// A PostgreSQL store made by the first schema, with a day of events in
// it, is migrated in place (id narrowed, indexes replaced) and reads and
// writes on.
func TestPostgresUpgradeFromTheFirstSchema(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t, storetest.Postgres)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	first, err := migrationFiles.ReadFile("migrations/postgres/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	day := dayOf(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	t0 := int64(day)*msDay + 3_600_000
	for _, q := range []string{
		string(first),
		`CREATE TABLE activity_schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL)`,
		`INSERT INTO activity_schema_migrations VALUES (1, '0001_init.sql')`,
		partitionSQL("activity_events", day), partitionSQL("activity_roll", day), partitionSQL("activity_applied", day),
		`INSERT INTO activity_subs (org, session_id, username, deviceid, location) VALUES ('acme', 's1', 'u1', '', '')`,
		`INSERT INTO activity_whos (sub, client, policy) VALUES (1, '192.0.2.1', 'p')`,
		`INSERT INTO activity_names (name) VALUES ('old.example.')`,
		`INSERT INTO activity_decs (node, qtype, transport, verdict, action, reason, rcode, cached, sampled)
			VALUES ('n1', 1, 'udp', 'block', 'nxdomain', 'category', 3, '', false)`,
		`INSERT INTO activity_whats (categories, rule) VALUES ('3', '')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO activity_events (t, who, name, dec, what, lat) VALUES ($1, 1, 1, 1, 1, 42)`, t0); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.UnixMilli(t0 + 1000).UTC()
	b := &activity.Batch{Node: "n1", Boot: 1, Seq: 1}
	for i := range 20 {
		b.Events = append(b.Events, activity.Event{Time: at.Add(time.Duration(i) * time.Second), Node: "n1", Org: "acme",
			SessionID: "s" + string(rune('a'+i%10)), QName: "new.example.", Transport: "udp", Verdict: "block", Reason: "category"})
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	from := dayStart(day)
	for _, q := range []activity.EventQuery{
		{Org: "acme", From: from, To: from.Add(24 * time.Hour), Limit: 100},                 // the organisation's (windows)
		{Org: "acme", From: from, To: from.Add(24 * time.Hour), Username: "u1", Limit: 100}, // one subscriber's (merge)
	} {
		p, err := s.Events(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 || p.Events[len(p.Events)-1].QName != "old.example." || p.Events[len(p.Events)-1].LatencyUS != 42 {
			t.Fatalf("%+v: the event written before the upgrade is not read back last: %+v", q, p.Events)
		}
		if q.Username == "" && len(p.Events) != 21 {
			t.Fatalf("%d events, want 21", len(p.Events))
		}
	}
}

func partitionSQL(table string, day int32) string {
	lo, hi := int64(day), int64(day+1)
	if table == "activity_events" {
		lo, hi = lo*msDay, hi*msDay
	}
	return "CREATE TABLE " + partName(table, day) + " PARTITION OF " + table + " FOR VALUES FROM (" +
		strconv.FormatInt(lo, 10) + ") TO (" + strconv.FormatInt(hi, 10) + ")"
}
