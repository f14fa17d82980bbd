package store_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// pgBytes is the on-disk size of the day's partitions of events, counters
// and applied ids, indexes and TOAST included.
func pgBytes(tb testing.TB, url string) float64 {
	db, err := sql.Open("pgx", url)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var n, events, eventsIdx, roll, applied float64
	if err := db.QueryRowContext(context.Background(), `SELECT pg_total_relation_size('activity_events_20261128'),
		pg_indexes_size('activity_events_20261128'), pg_total_relation_size('activity_roll_20261128'),
		pg_total_relation_size('activity_applied_20261128')`).Scan(&events, &eventsIdx, &roll, &applied); err != nil {
		tb.Fatal(err)
	}
	n = events + roll + applied
	tb.Logf("bytes: events %.0f (of which indexes %.0f), roll %.0f, applied %.0f", events, eventsIdx, roll, applied)
	return n
}
