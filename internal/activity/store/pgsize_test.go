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
	var n float64
	if err := db.QueryRowContext(context.Background(), `SELECT pg_total_relation_size('activity_events_20261128') +
		pg_total_relation_size('activity_roll_20261128') + pg_total_relation_size('activity_applied_20261128')`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
