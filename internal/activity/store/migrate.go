package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"path"

	"github.com/svc-pf/svc-pf/internal/sqlmigrate"
)

//go:embed migrations
var migrationFiles embed.FS

// execer is a transaction of either kind.
type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// migrate applies, inside tx, every migration of set not yet recorded in
// the table schema (activity_migrations), refusing a database newer than
// this binary. The caller serialises (SQLite: its write lock; PostgreSQL:
// an advisory lock) and commits.
func migrate(ctx context.Context, tx execer, set, table string) error {
	ms, err := sqlmigrate.Load(migrationFiles, path.Join("migrations", set))
	if err != nil {
		return fmt.Errorf("activity store: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("activity store: migrate: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM `+table)
	if err != nil {
		return fmt.Errorf("activity store: migrate: %w", err)
	}
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].Version
	}
	for v := range applied {
		if v > known {
			return fmt.Errorf("activity store: the schema is at version %d, newer than this binary knows (%d): run the newer binary", v, known)
		}
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("activity store: migration %s/%s: %w", set, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return fmt.Errorf("activity store: migration %s/%s: %w", set, m.Name, err)
		}
	}
	return nil
}
