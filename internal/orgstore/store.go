// Package orgstore is the SQL persistence of the organisation manager: the
// source of truth for organisations, their IP prefixes and per-CIDR overrides
// (the organisation API, docs/orgmanager.md), the subscriber settings
// documents (docs/policy.md, the settings), and the audit of the writes
// made through the management APIs. The REST handlers write through
// it; the deploy step reads consistent views
// from it and turns them into sessions for the IP Mapper and settings for
// the nodes. SQLite (pure Go, the embedded default) and PostgreSQL (the
// scale path) run the same statements wherever their SQL agrees; docs/store.md
// describes the schema, the dialect differences and the concurrency argument.
package orgstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/svc-pf/svc-pf/internal/filelock"
	"github.com/svc-pf/svc-pf/internal/identity"
)

// Config configures Open.
type Config struct {
	// URL is "sqlite:PATH" (the parent directory must exist) or
	// "postgres://…" / "postgresql://…". Open refuses a database it cannot
	// write.
	URL string
	// MaxReadConns is the reader pool size; 0 picks a default from GOMAXPROCS.
	MaxReadConns int
	// Now is the clock for created/updated/ctime/mtime; nil means time.Now.
	Now func() time.Time
	// Exclusive (SQLite only) makes Open refuse a database file another
	// Store holds, in this process or another, naming the holder's pid.
	// Every SQLite Store tries to hold the lock file <file>.lock beside the
	// database (filelock.File) for its whole life, as its read cache
	// needs; without Exclusive a Store that finds it taken opens anyway and
	// reads without the cache. The orgmanager sets it: two orgmanagers on
	// one file (issue 11) would each start and serve each other's writes
	// late, and two `svc-pf all` on one data directory are refused already
	// by the directory's own lock, a different file.
	Exclusive bool
	// Guest (SQLite only) opens without trying the lock file at all, and so
	// without the read cache: for a process beside the orgmanager that
	// only reads and writes tokens (`svc-pf token`, an IP Mapper verifying
	// tokens), which must never hold the lock the orgmanager's Exclusive
	// start needs. Tokens are outside the cache, so its reasoning stands.
	Guest bool
}

var (
	// ErrOrgNotFound: the organisation does not exist.
	ErrOrgNotFound = errors.New("organisation not found")
	// ErrOverrideNotFound: the organisation has no override for the CIDR.
	ErrOverrideNotFound = errors.New("override not found")
	// ErrSettingsNotFound: there is no settings document for the scope (or
	// no global one).
	ErrSettingsNotFound = errors.New("settings not found")
	// ErrInvalidInput wraps every refusal of a value the store cannot hold
	// (a non-canonical CIDR, meta that is not a JSON object, a NUL in a
	// string, an org id identity.ValidateOrg refuses). Handlers validate
	// first; this is the store's own guard, and maps to HTTP 400. It is
	// identity.ErrInvalid, so one errors.Is covers the refusals of both.
	ErrInvalidInput = identity.ErrInvalid
)

// OverlapError says that a prefix being added overlaps (contains, is
// contained in, or equals) a prefix owned by another organisation. Nothing of
// the update was applied. HTTP 422.
type OverlapError struct {
	CIDR     netip.Prefix // the prefix in the request
	Existing netip.Prefix // the other organisation's prefix
	Org      string       // the other organisation; for logs, never for clients
}

// Error deliberately leaves out the other organisation's id: the message goes
// to API clients, and organisations must not learn about each other.
func (e *OverlapError) Error() string {
	return fmt.Sprintf("prefix %s overlaps %s owned by another organisation", e.CIDR, e.Existing)
}

// Org is an organisation's row.
type Org struct {
	ID        string
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// OrgVersion is one entry of OrgVersions.
type OrgVersion struct {
	ID      string
	Version int64
	// UpdatedAt is when the version was written: the deploy's dirty_since
	// for a version it learns of from the database.
	UpdatedAt time.Time
}

// Override is one per-CIDR override. Strings are "" when absent.
//
// The write methods check every Override they are given. PrepareOverride
// runs those checks ahead, for a caller that wants each refusal per item
// (the API's batch), and marks its result so that the write does not run
// them again: the mark records what was checked, and an Override changed
// after PrepareOverride is checked again in full. An Override built any
// other way, or read from the store, is never trusted.
type Override struct {
	CIDR netip.Prefix
	identity.Attributes
	// Meta is the JSON object the client sent (compact), nil when absent.
	Meta json.RawMessage
	// TraceID is derived on write from Meta (see TraceID); what a caller puts
	// here is ignored.
	TraceID string
	CTime   time.Time
	MTime   time.Time

	// checked is set by PrepareOverride only.
	checked *checkedOverride
}

// Detail selects the override columns a read returns, and whether it reads
// the organisation's settings documents too (WithSettings).
type Detail int

const (
	// CIDROnly fills Override.CIDR only.
	CIDROnly Detail = iota
	// Identity fills CIDR, Username, DeviceID, Location and TraceID: what
	// the deploy step needs.
	Identity
	// Full fills every field.
	Full
)

// WithSettings is or-ed into a Detail (Identity|WithSettings) to make
// ReadOverrides also fill View.Settings with every settings document of the
// organisation, from the same snapshot as the rest of the View. Without it
// the settings table is not read.
const WithSettings Detail = 1 << 8

// overrides is the override columns d selects, without the flags.
func (d Detail) overrides() Detail { return d &^ WithSettings }

// View is one consistent read of an organisation: the version, its prefixes,
// the requested overrides and, when asked for, its settings documents all
// come from the same snapshot.
type View struct {
	Version   int64
	Prefixes  []netip.Prefix
	Overrides []Override
	// Settings is filled by ReadOverrides with WithSettings only: the
	// organisation's scoped documents in layer order (see ListSettings).
	Settings []ScopedSettings
}

// BatchOp is one item of ApplyBatch: an upsert of Override, or a delete of
// Override.CIDR when Delete is set.
type BatchOp struct {
	Delete   bool
	Override Override
}

// Store is the organisation store. It is safe for concurrent use.
type Store struct {
	dialect string
	// writer runs every write transaction. SQLite: one connection, so writes
	// are serialised in process and BEGIN IMMEDIATE serialises them across
	// processes. PostgreSQL: the same pool as reader.
	writer *sql.DB
	// reader serves reads. SQLite: a pool of query-only connections reading
	// WAL snapshots concurrently with the writer.
	reader *sql.DB
	now    func() time.Time
	q      queries
	// stmts are the hot reads, prepared once: the pure-Go SQLite driver
	// has no statement cache and would otherwise parse them on every call.
	stmts struct {
		getOrg, prefixes, readOverride *sql.Stmt
	}
	// cache serves repeated single-override reads; nil unless this Store
	// holds lock, the SQLite database's lock file (see overrideCache).
	cache *overrideCache
	lock  *filelock.Lock
	// exclusive is Config.Exclusive: a lock held elsewhere fails Open.
	exclusive bool
	// guest is Config.Guest: the lock file is not tried.
	guest bool
	// health is the outcome of the last write or write probe (writable.go).
	health writeHealth
}

// overrideCacheSize bounds the cached single-override reads.
const overrideCacheSize = 100_000

// Open connects to the database named by cfg.URL and applies the embedded
// migrations of its dialect.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	t, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	readConns := cfg.MaxReadConns
	if readConns <= 0 {
		readConns = max(4, 2*runtime.GOMAXPROCS(0))
	}
	s := &Store{dialect: t.dialect, now: cfg.Now, q: queriesFor(t.dialect), exclusive: cfg.Exclusive, guest: cfg.Guest}
	if s.now == nil {
		s.now = time.Now
	}
	switch t.dialect {
	case DialectSQLite:
		err = s.openSQLite(ctx, t.path, readConns)
	case DialectPostgres:
		err = s.openPostgres(ctx, t.pg, readConns)
	}
	if err == nil {
		err = s.prepare(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) prepare(ctx context.Context) error {
	for _, st := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.stmts.getOrg, getOrgSQL},
		{&s.stmts.prefixes, prefixesSQL},
		{&s.stmts.readOverride, readOverrideSQL},
	} {
		stmt, err := s.reader.PrepareContext(ctx, st.sql)
		if err != nil {
			return fmt.Errorf("orgstore: prepare: %w", err)
		}
		*st.dst = stmt
	}
	return nil
}

func (s *Store) openSQLite(ctx context.Context, path string, readConns int) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("orgstore: sqlite path: %w", err)
	}
	// The directory is never created here: a typo in database.url must not
	// start the service on a new, empty database somewhere unexpected.
	if fi, err := os.Stat(filepath.Dir(abs)); err != nil || !fi.IsDir() {
		return fmt.Errorf("orgstore: the directory of the SQLite database %s does not exist: check database.url, or create the directory", abs)
	}
	// The lock comes before the database is opened, so that a refused
	// second orgmanager touches nothing (not even the migrations) of the
	// file another one serves. A read-only directory (no lock file can be
	// made) only costs the cache, unless Exclusive.
	var lock *filelock.Lock
	if !s.guest {
		lock, err = filelock.File(abs+".lock", "SQLite database "+abs)
	}
	switch {
	case s.guest:
	case err == nil:
		s.lock = lock
		s.cache = newOverrideCache(overrideCacheSize)
	case s.exclusive && errors.Is(err, filelock.ErrLocked):
		return fmt.Errorf("orgstore: %w", err)
	case s.exclusive:
		return fmt.Errorf("orgstore: %w (the lock file beside the database keeps a second orgmanager off it: its directory must be writable)", err)
	}
	base := "file:" + sqliteURIPath(abs) + "?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	// WAL lets readers run beside the single writer; synchronous=NORMAL is
	// safe in WAL (a power cut may lose the last commits, never corrupts).
	// _txlock=immediate takes the write lock at BEGIN, so a write
	// transaction's reads (the prefix overlap check) cannot go stale.
	s.writer, err = sql.Open("sqlite", base+"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("orgstore: open sqlite: %w", err)
	}
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	s.writer.SetConnMaxLifetime(0)
	s.writer.SetConnMaxIdleTime(0)
	if err := s.writer.PingContext(ctx); err != nil {
		return fmt.Errorf("orgstore: open sqlite %s: %w", abs, err)
	}
	// Probed before the migrations, so that a read-only file is refused
	// with what to do rather than with a failed migration.
	if err := s.probeAtOpen(ctx, abs); err != nil {
		return err
	}
	if err := migrate(ctx, s.writer, DialectSQLite, s.nowMicros()); err != nil {
		return err
	}
	// Readers open after the writer switched the file to WAL (persistent).
	s.reader, err = sql.Open("sqlite", base+"&_query_only=1")
	if err != nil {
		return fmt.Errorf("orgstore: open sqlite: %w", err)
	}
	s.reader.SetMaxOpenConns(readConns)
	s.reader.SetMaxIdleConns(readConns)
	s.reader.SetConnMaxLifetime(0)
	s.reader.SetConnMaxIdleTime(0)
	if err := s.reader.PingContext(ctx); err != nil {
		return fmt.Errorf("orgstore: open sqlite %s: %w", abs, err)
	}
	return nil
}

// pgWriteConns is added to the reader pool size so writes are not starved by
// a burst of reads; writes to one organisation serialise on its row anyway.
const pgWriteConns = 4

func (s *Store) openPostgres(ctx context.Context, url string, readConns int) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("orgstore: invalid postgres database URL: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	s.writer, s.reader = db, db
	db.SetMaxOpenConns(readConns + pgWriteConns)
	db.SetMaxIdleConns(readConns + pgWriteConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("orgstore: connect to postgres: %w", err)
	}
	if err := s.probeAtOpen(ctx, ""); err != nil {
		return err
	}
	return migrate(ctx, db, DialectPostgres, s.nowMicros())
}

// Close closes the connection pools.
func (s *Store) Close() error {
	var errs []error
	for _, st := range []*sql.Stmt{s.stmts.getOrg, s.stmts.prefixes, s.stmts.readOverride} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.reader != nil && s.reader != s.writer {
		errs = append(errs, s.reader.Close())
	}
	if s.writer != nil {
		errs = append(errs, s.writer.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Unlock())
		s.lock = nil
	}
	return errors.Join(errs...)
}

// Dialect returns "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.dialect }

// Ping checks that the database answers, for /health.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.reader.PingContext(ctx); err != nil {
		return err
	}
	if s.writer != s.reader {
		return s.writer.PingContext(ctx)
	}
	return nil
}

// read runs fn in one read-only transaction on a consistent snapshot.
// ReadOverrides' PostgreSQL path, on pgx's native interface, is in
// overrides_pg.go.
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	// SQLite: a deferred transaction takes its WAL snapshot at the first read
	// and keeps it to the end. PostgreSQL: READ COMMITTED would take a new
	// snapshot per statement; REPEATABLE READ keeps the first one.
	opts := &sql.TxOptions{ReadOnly: true}
	if s.dialect == DialectPostgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.reader.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("orgstore: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // read-only: nothing to undo
	return fn(tx)
}

// nowMicros is the write timestamp, truncated to what the database keeps.
func (s *Store) nowMicros() int64 {
	return s.now().UnixMicro()
}

func fromMicros(us int64) time.Time {
	return time.UnixMicro(us).UTC()
}
