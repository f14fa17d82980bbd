package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

//go:embed migrations
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads migrations/<set>/NNNN_name.sql in version order.
func loadMigrations(fsys fs.FS, set string) ([]migration, error) {
	dir := path.Join("migrations", set)
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("activity store: migrations %s: %w", set, err)
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("activity store: migration %s/%s: name must be NNNN_description.sql", dir, name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

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
	ms, err := loadMigrations(migrationFiles, set)
	if err != nil {
		return err
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
		known = ms[len(ms)-1].version
	}
	for v := range applied {
		if v > known {
			return fmt.Errorf("activity store: the schema is at version %d, newer than this binary knows (%d): run the newer binary", v, known)
		}
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("activity store: migration %s/%s: %w", set, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("activity store: migration %s/%s: %w", set, m.name, err)
		}
	}
	return nil
}
