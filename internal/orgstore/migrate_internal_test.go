package orgstore

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"
)

// TestMigrationArrivingBelowTheNewestIsApplied is the merge of two branches
// that each added a migration: a database migrated by the one with 0001
// and 0003 (0002 is the other branch's) later meets the merged binary with
// all three. The gap is no error, and 0002 is applied after 0003.
func TestMigrationArrivingBelowTheNewestIsApplied(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	file := func(sql string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(sql)} }
	branch := fstest.MapFS{
		"migrations/sqlite/0001_a.sql": file(`CREATE TABLE a (x INTEGER)`),
		"migrations/sqlite/0003_c.sql": file(`CREATE TABLE c (x INTEGER)`),
	}
	if err := migrateFS(ctx, db, branch, DialectSQLite, 1); err != nil {
		t.Fatalf("with a gap: %v", err)
	}
	merged := fstest.MapFS{"migrations/sqlite/0002_b.sql": file(`CREATE TABLE b (x INTEGER)`)}
	for k, v := range branch {
		merged[k] = v
	}
	if err := migrateFS(ctx, db, merged, DialectSQLite, 2); err != nil {
		t.Fatalf("merged: %v", err)
	}
	rows, err := db.Query(`SELECT version, applied_at FROM schema_migrations ORDER BY applied_at, version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got [][2]int64
	for rows.Next() {
		var v [2]int64
		if err := rows.Scan(&v[0], &v[1]); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if want := [][2]int64{{1, 1}, {3, 1}, {2, 2}}; !slices.Equal(got, want) {
		t.Fatalf("applied (version, when) %v, want %v", got, want)
	}
	if _, err := db.Exec(`INSERT INTO b (x) VALUES (1)`); err != nil {
		t.Fatalf("table of the late migration: %v", err)
	}
}
