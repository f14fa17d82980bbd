package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestPostgresFailedDictionaryInsertIsNotRemembered: the new dictionary
// rows of one write go to PostgreSQL in one pipeline, which is one
// implicit transaction. When a statement of it fails (in production: a
// deadlock with another collector inserting the same new keys), the rows
// inserted before it are rolled back too; the store must not keep their
// ids. Kept, a rolled-back subscriber id made every later write of that
// subscriber fail on the activity_whos foreign key, forever: the
// collector retried the same messages without end, extending their
// AckWait, and they were never stored (CI: about 50 batches missing with
// two collectors). Here a trigger fails the second subscriber insert of
// any transaction, once; then the trigger is gone and the retry must
// store everything.
func TestPostgresFailedDictionaryInsertIsNotRemembered(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	ctx := context.Background()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := openURL(t, url, day0.Add(time.Hour))
	if _, err := db.ExecContext(ctx, `CREATE FUNCTION svcpf_test_fail_second() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF current_setting('svcpf_test.inserted', true) = 'yes' THEN
				RAISE EXCEPTION 'svcpf test: second subscriber insert of this transaction';
			END IF;
			PERFORM set_config('svcpf_test.inserted', 'yes', true);
			RETURN NEW;
		END $$;
		CREATE TRIGGER svcpf_test_fail_second BEFORE INSERT ON activity_subs FOR EACH ROW EXECUTE FUNCTION svcpf_test_fail_second()`); err != nil {
		t.Fatal(err)
	}
	b := testBatch("dict1", 1, day0.Add(time.Minute), time.Millisecond, 40, 4)
	if _, err := s.WriteBatches(ctx, []*activity.Batch{b}); err == nil || !strings.Contains(err.Error(), "second subscriber insert") {
		t.Fatalf("write with the failing trigger: %v; want the trigger's error", err)
	}
	if _, err := db.ExecContext(ctx, `DROP TRIGGER svcpf_test_fail_second ON activity_subs`); err != nil {
		t.Fatal(err)
	}
	n, err := s.WriteBatches(ctx, []*activity.Batch{b})
	if err != nil || n != 40 {
		t.Fatalf("retry stored %d, %v; want 40 (a rolled-back dictionary id was remembered)", n, err)
	}
	// Every event resolves through the dictionaries (the view joins them).
	var joined int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM activity_events_v`).Scan(&joined); err != nil || joined != 40 {
		t.Fatalf("events with their dictionary rows: %d, %v; want 40", joined, err)
	}
	// A second handle (another collector) reads the same ids.
	s2 := openURL(t, url, day0.Add(time.Hour))
	if n, err := s2.WriteBatches(ctx, []*activity.Batch{testBatch("dict1", 2, day0.Add(2*time.Minute), time.Millisecond, 40, 4)}); err != nil || n != 40 {
		t.Fatalf("second handle stored %d, %v; want 40", n, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM activity_events_v`).Scan(&joined); err != nil || joined != 80 {
		t.Fatalf("events with their dictionary rows: %d, %v; want 80", joined, err)
	}
	var subs int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM activity_subs`).Scan(&subs); err != nil || subs != 4 {
		t.Fatalf("%d subscriber rows, %v; want 4", subs, err)
	}
}

// TestPostgresTwoHandlesSameNewKeysNoDeadlock: two store handles (two
// collectors) write at the same moment batches that bring the same many new
// subscribers and names. Their dictionary inserts take the rows in one
// order, so neither write fails with a deadlock (in map order they did:
// each took some keys first and waited on the other's).
func TestPostgresTwoHandlesSameNewKeysNoDeadlock(t *testing.T) {
	url := storetest.URL(t, storetest.Postgres)
	ctx := context.Background()
	a, b := openURL(t, url, day0.Add(time.Hour)), openURL(t, url, day0.Add(time.Hour))
	for round := range 5 {
		batch := func(node string) *activity.Batch {
			bt := &activity.Batch{Node: node, Boot: 1, Seq: uint64(round + 1)}
			for i := range 300 {
				u := fmt.Sprintf("r%d-u%d", round, i)
				bt.Events = append(bt.Events, activity.Event{Time: day0.Add(time.Minute), Node: "n", Org: "acme", SessionID: "s-" + u,
					Username: u, QName: fmt.Sprintf("r%d-n%d.example.", round, i), QType: 1, Transport: "udp", Verdict: "block",
					Action: "nxdomain", Reason: "category", Categories: []uint16{3}})
			}
			return bt
		}
		ba, bb := batch("a"), batch("b")
		start := make(chan struct{})
		errs := make(chan error, 2)
		for _, w := range []struct {
			s  *store.Store
			bt *activity.Batch
		}{{a, ba}, {b, bb}} {
			go func() {
				<-start
				_, err := w.s.WriteBatches(ctx, []*activity.Batch{w.bt})
				errs <- err
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	var joined int
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM activity_events_v`).Scan(&joined); err != nil || joined != 2*5*300 {
		t.Fatalf("events with their dictionary rows: %d, %v; want %d", joined, err, 2*5*300)
	}
}
