package orgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// queries holds the few statements whose SQL differs between the dialects;
// every other statement is shared ($N placeholders work in both drivers).
type queries struct {
	// lockOrg reads an organisation's pk and version inside a write
	// transaction and keeps others from writing it until commit. SQLite
	// needs no row lock: BEGIN IMMEDIATE already holds the database's write
	// lock; it has no FOR UPDATE.
	lockOrg string
	// lockPrefixes serialises the transactions that add prefixes, so the
	// global overlap check cannot race (docs/store.md). Empty for SQLite,
	// where BEGIN IMMEDIATE already serialises every writer.
	lockPrefixes string
	// anonymous: generated statements with many parameters use "?" on
	// SQLite. The driver asks SQLite for every parameter's name while
	// binding, which costs a linear search per numbered or named parameter:
	// quadratic in a 9 000-parameter INSERT. PostgreSQL knows only "$N".
	// Generated statements therefore never reuse a parameter, and bind
	// arguments strictly in the order they appear.
	anonymous bool
	// packedIdentity selects an override's key and identity attributes as
	// one value, key || username NUL deviceid NUL location NUL trace_id,
	// for the SQLite bulk read. The pure-Go driver pays a mutex round trip
	// per column call and two allocations per column value, so one column
	// per row reads 100 000 overrides markedly faster than five, and the
	// four strings become slices of one allocation. NUL is a safe
	// separator: the store refuses it in all four (identity.CheckText).
	// PostgreSQL reads wire values natively instead (overrides_pg.go); there,
	// concatenating on the server would cost more than it saves.
	packedIdentity string
	// docBytes is the size in bytes of a settings document (s.doc) without
	// reading it into the result: SQLite's length() of TEXT counts
	// characters, so it is asked of the bytes; PostgreSQL's octet_length
	// reads a large (TOASTed) value's size from its header.
	docBytes string
}

// param returns the n-th (1-based, in order of appearance) placeholder of a
// generated statement.
func (q queries) param(n int) string {
	if q.anonymous {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

func queriesFor(dialect string) queries {
	if dialect == DialectPostgres {
		return queries{
			lockOrg:      `SELECT pk, version FROM orgs WHERE id = $1 FOR UPDATE`,
			lockPrefixes: `SELECT pg_advisory_xact_lock(` + strconv.Itoa(lockClassPrefixes) + `, hashtext(current_schema()))`,
			docBytes:     `octet_length(s.doc)`,
		}
	}
	return queries{
		lockOrg:        `SELECT pk, version FROM orgs WHERE id = $1`,
		anonymous:      true,
		packedIdentity: `cidr || username || char(0) || deviceid || char(0) || location || char(0) || trace_id`,
		docBytes:       `length(CAST(s.doc AS BLOB))`,
	}
}

// lockOrg returns the organisation's pk and version, holding it for this
// write transaction.
func (s *Store) lockOrg(ctx context.Context, tx *sql.Tx, org string) (pk, version int64, err error) {
	if identity.ValidateOrg(org) != nil {
		return 0, 0, ErrOrgNotFound
	}
	err = tx.QueryRowContext(ctx, s.q.lockOrg, org).Scan(&pk, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, ErrOrgNotFound
	}
	if err != nil {
		return 0, 0, fmt.Errorf("orgstore: read organisation: %w", err)
	}
	return pk, version, nil
}

// bumpVersion is the one place a write's version bump happens.
func bumpVersion(ctx context.Context, tx *sql.Tx, pk, nowMicros int64) (int64, error) {
	var v int64
	err := tx.QueryRowContext(ctx, `UPDATE orgs SET version = version + 1, updated_at = $2 WHERE pk = $1 RETURNING version`,
		pk, nowMicros).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("orgstore: bump version: %w", err)
	}
	return v, nil
}

// keysPerStatement bounds the keys in one IN (…) list or multi-row VALUES.
// SQLite allows 32 766 parameters per statement, PostgreSQL 65 535; larger
// statements cost more to plan than they save in round trips.
const keysPerStatement = 1000

// execKeyChunks runs `head <org> AND cidr IN (<keys>)` per chunk of keys and
// returns the rows affected in total.
func (q queries) execKeyChunks(ctx context.Context, tx *sql.Tx, head string, orgPK int64, keys [][]byte) (int64, error) {
	var total int64
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), keysPerStatement)]
		keys = keys[len(chunk):]
		stmt, args := q.keyList(head, orgPK, chunk)
		n, err := execAffected(ctx, tx, stmt, args)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// execAffected runs one statement and returns the rows it affected.
func execAffected(ctx context.Context, tx *sql.Tx, stmt string, args []any) (int64, error) {
	res, err := tx.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// keyList builds `head <org> AND cidr IN (<keys>)` and its arguments.
func (q queries) keyList(head string, orgPK int64, keys [][]byte) (string, []any) {
	var b strings.Builder
	b.Grow(len(head) + 32 + 6*len(keys))
	args := make([]any, 0, 1+len(keys))
	args = append(args, orgPK)
	b.WriteString(head)
	b.WriteString(q.param(1))
	b.WriteString(" AND cidr IN ")
	args = q.appendInList(&b, args, keys)
	return b.String(), args
}

// appendInList writes `(<p>, <p>, …)` with one placeholder per key, numbered
// after args, and returns args with the keys appended.
func (q queries) appendInList(b *strings.Builder, args []any, keys [][]byte) []any {
	b.WriteByte('(')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		args = append(args, k)
		b.WriteString(q.param(len(args)))
	}
	b.WriteByte(')')
	return args
}
