package orgstore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"

	"github.com/svc-pf/svc-pf/internal/sqlmigrate"
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
	ms, err := sqlmigrate.Load(fsys, path.Join("migrations", dialect))
	if err != nil {
		return fmt.Errorf("orgstore: %w", err)
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
		known = ms[len(ms)-1].Version
	}
	for v := range applied {
		if v > known {
			return fmt.Errorf("orgstore: the database schema is at version %d, newer than this binary knows (%d): refusing to run an older binary against it", v, known)
		}
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("orgstore: migration %s/%s: %w", dialect, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			m.Version, m.Name, nowMicros); err != nil {
			return fmt.Errorf("orgstore: migration %s/%s: %w", dialect, m.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("orgstore: migrate: commit: %w", err)
	}
	return nil
}
