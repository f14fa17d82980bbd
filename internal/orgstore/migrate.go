package orgstore

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

// PostgreSQL advisory lock classes (the first key of the two-key form; the
// second is a hash of the current schema, so stores in different schemas of
// one database do not wait for each other). The value spells "svcp".
const (
	lockClassMigrate  = 0x73766370
	lockClassPrefixes = 0x73766371
)

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads migrations/<dialect>/NNNN_name.sql in version order.
func loadMigrations(fsys fs.FS, dialect string) ([]migration, error) {
	dir := path.Join("migrations", dialect)
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("orgstore: migrations for %s: %w", dialect, err)
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
			return nil, fmt.Errorf("orgstore: migration %s/%s: name must be NNNN_description.sql", dir, name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("orgstore: migration %s/%s: %w", dir, name, err)
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("orgstore: migrations %s and %s share version %d", out[i-1].name, out[i].name, out[i].version)
		}
	}
	return out, nil
}

// migrate applies the pending migrations in one transaction: all or none.
// SQLite: the transaction is BEGIN IMMEDIATE, so concurrent starters queue on
// the write lock. PostgreSQL: DDL is transactional and an advisory lock taken
// first makes a concurrent starter wait, then find the work done.
//
// Every file not recorded is applied, whatever its place: versions need
// not be contiguous, and one below the highest applied (a migration that
// arrived with a merge after a later one was applied, say 0004 after 0005)
// is applied too. Migrations therefore must not depend on the order of
// files written on different branches.
func migrate(ctx context.Context, db *sql.DB, dialect string, nowMicros int64) error {
	return migrateFS(ctx, db, migrationFiles, dialect, nowMicros)
}

// migrateFS is migrate with the migrations read from fsys.
func migrateFS(ctx context.Context, db *sql.DB, fsys fs.FS, dialect string, nowMicros int64) error {
	ms, err := loadMigrations(fsys, dialect)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("orgstore: migrate: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	if dialect == DialectPostgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))`, int32(lockClassMigrate)); err != nil {
			return fmt.Errorf("orgstore: migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at BIGINT  NOT NULL
	)`); err != nil {
		return fmt.Errorf("orgstore: migrate: %w", err)
	}
	applied := map[int]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return fmt.Errorf("orgstore: migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("orgstore: migrate: %w", err)
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("orgstore: migrate: %w", err)
	}
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	for v := range applied {
		if v > known {
			return fmt.Errorf("orgstore: the database schema is at version %d, newer than this binary knows (%d): refusing to run an older binary against it", v, known)
		}
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("orgstore: migration %s/%s: %w", dialect, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			m.version, m.name, nowMicros); err != nil {
			return fmt.Errorf("orgstore: migration %s/%s: %w", dialect, m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("orgstore: migrate: commit: %w", err)
	}
	return nil
}
