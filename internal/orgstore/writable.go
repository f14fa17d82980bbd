package orgstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"
)

// writeHealth is the outcome of the last write transaction or write probe
// that reached the database: what /health reports as "the store is
// writable". A refusal of the caller's input (not found, overlap, invalid)
// says nothing about the database and leaves it unchanged.
type writeHealth struct {
	mu  sync.Mutex
	err error     // nil: the last write or probe committed (or rolled back a probe)
	at  time.Time // when it ended; zero before the first
}

func (h *writeHealth) set(err error) {
	h.mu.Lock()
	h.err, h.at = err, time.Now()
	h.mu.Unlock()
}

// WriteStatus reports when the last write or write probe ended and its
// error, nil when it succeeded. Open's own probe is the first.
func (s *Store) WriteStatus() (at time.Time, err error) {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.at, s.health.err
}

// ProbeWrite checks that the database takes a write: it creates a table in
// a transaction and rolls it back, so nothing is left and no version moves.
// Its outcome is what WriteStatus reports until the next write. A
// connection that fails it is discarded, as after any failed write.
func (s *Store) ProbeWrite(ctx context.Context) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.probeSQL())
		return err
	}, false, true)
}

// probeSQL writes without leaving anything: SQLite needs a table in the
// database file itself (a TEMP table lives elsewhere and proves nothing);
// PostgreSQL refuses CREATE, TEMP included, in a read-only transaction or
// on a standby, and a temporary table does not collide with another
// instance's probe.
func (s *Store) probeSQL() string {
	if s.dialect == DialectPostgres {
		return `CREATE TEMP TABLE orgstore_write_probe (x integer)`
	}
	return `CREATE TABLE orgstore_write_probe (x INTEGER)`
}

// probeAtOpen refuses a database that cannot be written, saying what to do:
// without it the orgmanager started on a read-only SQLite file, answered
// /health 200 and every write 500 (issue 11). path is the SQLite file.
func (s *Store) probeAtOpen(ctx context.Context, path string) error {
	err := s.ProbeWrite(ctx)
	if err == nil {
		return nil
	}
	if s.dialect == DialectPostgres {
		return fmt.Errorf("orgstore: the PostgreSQL database does not take writes (%w): the orgmanager must write it — connect to the primary (not a standby), with a role that may create tables in the schema, and without default_transaction_read_only", err)
	}
	return fmt.Errorf("orgstore: the SQLite database %s is not writable (%w): the orgmanager must write it — check the owner and permissions of the file, of its -wal and -shm files and of its directory, that the file system is not mounted read-only and that the disk is not full", path, err)
}

// write runs fn in one write transaction and commits it.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.writeTx(ctx, fn, true, true)
}

// writeAside is write for a record kept beside the data (the audit): its
// outcome is not what WriteStatus reports. Every API write is followed by
// its audit record, in a table of its own; were that append noted, a
// database refusing the organisation's write (a broken table, a trigger)
// would read as writable again a moment later, /health would stay green
// and the refusal would be invisible. An append that fails is the
// auditor's to log and count.
func (s *Store) writeAside(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.writeTx(ctx, fn, true, false)
}

// writeTx runs fn in one write transaction on a connection of its own,
// commits it (or rolls it back when !commit: a probe), records the outcome
// for WriteStatus (when note) and discards the connection when the
// database failed.
//
// Why discard: database/sql keeps a connection until the driver calls it
// bad, and the SQLite driver never does. A connection that SQLite opened
// while the file was not writable is read-only for good (SQLite falls back
// to O_RDONLY), so without this every later write would fail, even after the
// file became writable again, until a restart. A fresh connection costs an
// open; PostgreSQL's pool simply dials again (and may reach a new primary).
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error, commit, note bool) (err error) {
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		if note {
			s.noteWrite(ctx, err)
		}
		return fmt.Errorf("orgstore: begin: %w", err)
	}
	defer func() {
		failed := err != nil && databaseFailure(ctx, err)
		if note {
			s.noteWrite(ctx, err)
		}
		if failed {
			// Raw returning driver.ErrBadConn makes database/sql close the
			// connection instead of returning it to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("orgstore: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if !commit {
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("orgstore: rollback: %w", err)
		}
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("orgstore: commit: %w", err)
	}
	return nil
}

// noteWrite records the outcome of a write for WriteStatus: a success, or
// a failure of the database (a refusal of the input, or the caller giving
// up, says nothing about the database and leaves it unchanged).
func (s *Store) noteWrite(ctx context.Context, err error) {
	switch {
	case err == nil:
		s.health.set(nil)
	case databaseFailure(ctx, err):
		s.health.set(err)
	}
}

// databaseFailure reports whether err, returned by a write, says the
// database could not take it, rather than that the input was refused or the
// caller's context ended.
func databaseFailure(ctx context.Context, err error) bool {
	var overlap *OverlapError
	switch {
	case errors.Is(err, ErrOrgNotFound), errors.Is(err, ErrOverrideNotFound),
		errors.Is(err, ErrSettingsNotFound), errors.Is(err, ErrInvalidInput),
		errors.Is(err, sql.ErrNoRows), errors.As(err, &overlap):
		return false
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return false // the client went away; nothing is known of the database
	}
	return true
}
