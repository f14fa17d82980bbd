package orgstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// PutOverride creates or replaces the organisation's override for o.CIDR
// (POST /org/{org}/overrides). An overwrite replaces every attribute and meta,
// keeps the original CTime and sets MTime to now. It always bumps the version.
func (s *Store) PutOverride(ctx context.Context, org string, o Override) (int64, error) {
	return s.ApplyBatch(ctx, org, []BatchOp{{Override: o}})
}

// DeleteOverride deletes the organisation's override for cidr. Deleting an
// absent override is not an error; the version is bumped only when a row was
// deleted.
func (s *Store) DeleteOverride(ctx context.Context, org string, cidr netip.Prefix) (int64, error) {
	defer s.cache.invalidate(org) // after the commit: see overrideCache
	if err := validPrefix(cidr); err != nil {
		return 0, err
	}
	now := s.nowMicros()
	var version int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		pk, v, err := s.lockOrg(ctx, tx, org)
		if err != nil {
			return err
		}
		version = v
		res, err := tx.ExecContext(ctx, `DELETE FROM overrides WHERE org_pk = $1 AND cidr = $2`, pk, prefixKey(cidr))
		if err != nil {
			return fmt.Errorf("orgstore: delete override: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("orgstore: delete override: %w", err)
		}
		if n > 0 {
			version, err = bumpVersion(ctx, tx, pk, now)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// upsertRow is a validated override ready for the database.
type upsertRow struct {
	key                                   []byte
	username, deviceID, location, traceID string
	meta                                  any // string, or nil for SQL NULL
}

// ApplyBatch applies ops atomically in one transaction with sequential
// semantics: for one CIDR the last op wins, and an upsert after a delete of
// the same CIDR creates a fresh override (new CTime). Nothing is applied when
// an op is invalid. It bumps the version once when len(ops) > 0.
//
// The batch is reduced to its net effect first (planBatch): the CIDRs that
// end deleted or are re-created are deleted, then the CIDRs that end upserted
// are written with INSERT … ON CONFLICT DO UPDATE, each CIDR once, which
// PostgreSQL requires of an upsert. SQLite runs both as multi-row statements
// in chunks of 1000, PostgreSQL as one statement each over column arrays.
func (s *Store) ApplyBatch(ctx context.Context, org string, ops []BatchOp) (int64, error) {
	defer s.cache.invalidate(org) // after the commit: see overrideCache
	if len(ops) == 0 {
		return s.currentVersion(ctx, org)
	}
	deletes, upserts, err := planBatch(ops)
	if err != nil {
		return 0, err
	}
	now := s.nowMicros()
	var version int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		if !validOrgID(org) {
			return ErrOrgNotFound
		}
		var pk int64
		// The bump comes first: it locks the organisation's row for the
		// rest of the transaction and tells a missing organisation apart.
		err := tx.QueryRowContext(ctx, `UPDATE orgs SET version = version + 1, updated_at = $2 WHERE id = $1 RETURNING pk, version`,
			org, now).Scan(&pk, &version)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrOrgNotFound
		}
		if err != nil {
			return fmt.Errorf("orgstore: bump version: %w", err)
		}
		if s.dialect == DialectPostgres {
			err = pgApplyOverrides(ctx, tx, pk, now, deletes, upserts)
		} else {
			err = s.q.applyOverrides(ctx, tx, pk, now, deletes, upserts)
		}
		if err != nil {
			return fmt.Errorf("orgstore: write overrides: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// planBatch validates ops and reduces them to their net effect. deletes holds
// the CIDRs whose last op is a delete and those re-created after a delete (so
// the upsert inserts a new row with a new CTime); upserts holds the last
// upsert of every CIDR whose last op is an upsert.
func planBatch(ops []BatchOp) (deletes [][]byte, upserts []upsertRow, err error) {
	type state struct {
		deleted bool // a delete of this CIDR occurred in the batch
		last    int  // index into upserts of the final upsert, or -1
	}
	seen := make(map[netip.Prefix]*state, len(ops))
	upserts = make([]upsertRow, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		o := &op.Override
		if err := validPrefix(o.CIDR); err != nil {
			return nil, nil, fmt.Errorf("batch item %d: %w", i, err)
		}
		st := seen[o.CIDR]
		if st == nil {
			st = &state{last: -1}
			seen[o.CIDR] = st
		}
		if op.Delete {
			st.deleted = true
			if st.last >= 0 {
				upserts[st.last].key = nil // superseded
				st.last = -1
			}
			continue
		}
		row, err := newUpsertRow(o)
		if err != nil {
			return nil, nil, fmt.Errorf("batch item %d (%s): %w", i, o.CIDR, err)
		}
		if st.last >= 0 {
			upserts[st.last] = row
		} else {
			st.last = len(upserts)
			upserts = append(upserts, row)
		}
	}
	live := upserts[:0]
	for _, r := range upserts {
		if r.key != nil {
			live = append(live, r)
		}
	}
	for p, st := range seen {
		if st.deleted {
			deletes = append(deletes, prefixKey(p))
		}
	}
	return deletes, live, nil
}

func newUpsertRow(o *Override) (upsertRow, error) {
	for _, f := range [...]struct{ name, v string }{
		{"username", o.Username}, {"deviceid", o.DeviceID}, {"location", o.Location},
	} {
		if err := CheckText(f.name, f.v); err != nil {
			return upsertRow{}, err
		}
	}
	meta, err := normalizeMeta(o.Meta)
	if err != nil {
		return upsertRow{}, err
	}
	traceID := TraceID(meta)
	if err := CheckText("meta.trace_id", traceID); err != nil {
		return upsertRow{}, err
	}
	r := upsertRow{
		key:      prefixKey(o.CIDR),
		username: o.Username,
		deviceID: o.DeviceID,
		location: o.Location,
		traceID:  traceID,
	}
	if meta != nil {
		r.meta = string(meta)
	}
	return r, nil
}

// upsertColumns is the number of parameters per upsert row.
const upsertColumns = 9

// upsertRowsPerStatement keeps a statement well inside SQLite's limit of
// 32 766 parameters.
const upsertRowsPerStatement = 1000

const upsertConflict = ` ON CONFLICT (org_pk, cidr) DO UPDATE SET
	username = excluded.username, deviceid = excluded.deviceid, location = excluded.location,
	trace_id = excluded.trace_id, meta = excluded.meta, mtime = excluded.mtime`

// applyOverrides is the SQLite batch path: multi-row DELETE … IN (…) and
// multi-row INSERT … ON CONFLICT DO UPDATE in chunks. CTime is set on insert
// only; an overwrite keeps it.
func (q queries) applyOverrides(ctx context.Context, tx *sql.Tx, orgPK, nowMicros int64, deletes [][]byte, rows []upsertRow) error {
	if _, err := q.execKeyChunks(ctx, tx, `DELETE FROM overrides WHERE org_pk = `, orgPK, deletes); err != nil {
		return err
	}
	for len(rows) > 0 {
		chunk := rows[:min(len(rows), upsertRowsPerStatement)]
		rows = rows[len(chunk):]
		args := make([]any, 0, upsertColumns*len(chunk))
		var b strings.Builder
		b.Grow(300 + 32*len(chunk))
		b.WriteString(`INSERT INTO overrides (org_pk, cidr, username, deviceid, location, trace_id, meta, ctime, mtime) VALUES `)
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(")
			for c := 1; c <= upsertColumns; c++ {
				if c > 1 {
					b.WriteString(", ")
				}
				b.WriteString(q.param(len(args) + c))
			}
			b.WriteString(")")
			args = append(args, orgPK, r.key, r.username, r.deviceID, r.location, r.traceID, r.meta, nowMicros, nowMicros)
		}
		b.WriteString(upsertConflict)
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// pgApplyOverrides is the PostgreSQL batch path: the whole batch travels as
// one array per column and is applied by two statements of constant text
// (prepared once per connection), whatever the batch size. Many-row VALUES
// lists cost PostgreSQL more to parse and plan than the rows cost to write.
func pgApplyOverrides(ctx context.Context, tx *sql.Tx, orgPK, nowMicros int64, deletes [][]byte, rows []upsertRow) error {
	if len(deletes) > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM overrides WHERE org_pk = $1 AND cidr = ANY($2::bytea[])`, orgPK, deletes); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return nil
	}
	keys := make([][]byte, len(rows))
	users := make([]string, len(rows))
	devices := make([]string, len(rows))
	locations := make([]string, len(rows))
	traces := make([]string, len(rows))
	metas := make([]*string, len(rows))
	for i := range rows {
		r := &rows[i]
		keys[i], users[i], devices[i], locations[i], traces[i] = r.key, r.username, r.deviceID, r.location, r.traceID
		if m, ok := r.meta.(string); ok {
			metas[i] = &m
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO overrides (org_pk, cidr, username, deviceid, location, trace_id, meta, ctime, mtime)
		SELECT $1, k, u, d, l, t, m, $2, $2
		FROM unnest($3::bytea[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS x (k, u, d, l, t, m)`+upsertConflict,
		orgPK, nowMicros, keys, users, devices, locations, traces, metas)
	return err
}

// currentVersion returns the organisation's version, or ErrOrgNotFound.
func (s *Store) currentVersion(ctx context.Context, org string) (int64, error) {
	o, err := s.GetOrg(ctx, org)
	return o.Version, err
}

// ReadOverrides returns the organisation's version, prefixes and all its
// overrides (IPv4 first, then by address, then by length) from one read
// transaction. d selects the override columns read; less is faster.
func (s *Store) ReadOverrides(ctx context.Context, org string, d Detail) (View, error) {
	if !validOrgID(org) {
		return View{}, ErrOrgNotFound
	}
	if s.dialect == DialectPostgres {
		return s.pgReadOverrides(ctx, org, d)
	}
	var v View
	err := s.read(ctx, func(tx *sql.Tx) error {
		var pk int64
		err := tx.QueryRowContext(ctx, `SELECT pk, version FROM orgs WHERE id = $1`, org).Scan(&pk, &v.Version)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrOrgNotFound
		}
		if err != nil {
			return fmt.Errorf("orgstore: read organisation: %w", err)
		}
		if v.Prefixes, err = readPrefixes(ctx, tx, pk); err != nil {
			return err
		}
		v.Overrides, err = s.q.readOverrides(ctx, tx, pk, d)
		return err
	})
	if err != nil {
		return View{}, err
	}
	return v, nil
}

// readOverrides is the SQLite bulk read (see queries.packedIdentity).
func (q queries) readOverrides(ctx context.Context, tx *sql.Tx, orgPK int64, d Detail) ([]Override, error) {
	var cols string
	switch d {
	case CIDROnly:
		cols = `cidr`
	case Identity:
		cols = q.packedIdentity
	default:
		cols = q.packedIdentity + `, ctime, mtime, meta`
	}
	// Counting first (an index-only scan in the same snapshot) lets the
	// result be allocated once at its final size.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM overrides WHERE org_pk = $1`, orgPK).Scan(&n); err != nil {
		return nil, fmt.Errorf("orgstore: count overrides: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+cols+` FROM overrides WHERE org_pk = $1 ORDER BY cidr`, orgPK)
	if err != nil {
		return nil, fmt.Errorf("orgstore: read overrides: %w", err)
	}
	defer rows.Close()
	var (
		out          = chunked{cur: make([]Override, 0, n)}
		packed, meta sql.RawBytes
		ctime, mtime int64
	)
	for rows.Next() {
		o := out.next()
		switch d {
		case CIDROnly, Identity:
			err = rows.Scan(&packed)
		default:
			err = rows.Scan(&packed, &ctime, &mtime, &meta)
			o.CTime, o.MTime = fromMicros(ctime), fromMicros(mtime)
			if meta != nil {
				o.Meta = append(json.RawMessage(nil), meta...)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("orgstore: read overrides: %w", err)
		}
		if d == CIDROnly {
			o.CIDR, err = decodeKey(packed)
		} else {
			err = unpackIdentity(packed, o)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orgstore: read overrides: %w", err)
	}
	return out.all(), nil
}

// unpackIdentity decodes a queries.packedIdentity value into o.
func unpackIdentity(b []byte, o *Override) error {
	n := keyLen4
	if len(b) > 0 && b[0] == famV6 {
		n = keyLen6
	}
	if len(b) < n {
		return fmt.Errorf("orgstore: malformed override row %x in the database", b)
	}
	p, err := decodeKey(b[:n])
	if err != nil {
		return err
	}
	o.CIDR = p
	rest := string(b[n:]) // the one allocation; the fields share it
	var f [4]string
	for i := range 3 {
		sep := strings.IndexByte(rest, 0)
		if sep < 0 {
			return fmt.Errorf("orgstore: malformed override row for %s in the database", p)
		}
		f[i], rest = rest[:sep], rest[sep+1:]
	}
	if strings.IndexByte(rest, 0) >= 0 {
		return fmt.Errorf("orgstore: malformed override row for %s in the database", p)
	}
	f[3] = rest
	o.Username, o.DeviceID, o.Location, o.TraceID = f[0], f[1], f[2], f[3]
	return nil
}

// chunked collects overrides in fixed-size blocks and copies them into one
// exact slice at the end. append's growth (1.25× for large slices) would
// allocate and copy about five times the final 17 MB of a 100 000-override
// read.
type chunked struct {
	full [][]Override
	cur  []Override
	n    int
}

const chunkLen = 4096

func (c *chunked) next() *Override {
	if len(c.cur) == cap(c.cur) {
		if c.cur != nil {
			c.full = append(c.full, c.cur)
		}
		c.cur = make([]Override, 0, chunkLen)
	}
	c.cur = c.cur[:len(c.cur)+1]
	c.n++
	return &c.cur[len(c.cur)-1]
}

func (c *chunked) all() []Override {
	if len(c.full) == 0 {
		return c.cur
	}
	out := make([]Override, 0, c.n)
	for _, b := range c.full {
		out = append(out, b...)
	}
	return append(out, c.cur...)
}

// ReadOverride returns the organisation's version, prefixes and its override
// for cidr (all fields) as View.Overrides[0]. It is the hot read (the single
// GET): served from memory when the cache is on, else one statement, hence
// one snapshot and one round trip. The returned View is shared: read only.
func (s *Store) ReadOverride(ctx context.Context, org string, cidr netip.Prefix) (View, error) {
	if err := validPrefix(cidr); err != nil {
		return View{}, err
	}
	if !validOrgID(org) {
		return View{}, ErrOrgNotFound
	}
	v, ok, gen := s.cache.get(org, cidr)
	if ok {
		return v, nil
	}
	v, err := s.readOverride(ctx, org, cidr)
	if err == nil {
		s.cache.put(org, cidr, v, gen)
	}
	return v, err
}

// readOverride is ReadOverride's database read: one statement returns the
// version, the override and the prefixes.
func (s *Store) readOverride(ctx context.Context, org string, cidr netip.Prefix) (View, error) {
	rows, err := s.stmts.readOverride.QueryContext(ctx, org, prefixKey(cidr))
	if err != nil {
		return View{}, fmt.Errorf("orgstore: read override: %w", err)
	}
	defer rows.Close()
	var (
		v                            View
		orgFound, found              bool
		kind                         int
		key, meta                    sql.RawBytes
		username, deviceID, location sql.NullString
		traceID                      sql.NullString
		ctime, mtime                 sql.NullInt64
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &v.Version, &key, &username, &deviceID, &location, &traceID, &ctime, &mtime, &meta); err != nil {
			return View{}, fmt.Errorf("orgstore: read override: %w", err)
		}
		if kind == 2 {
			p, err := decodeKey(key)
			if err != nil {
				return View{}, err
			}
			v.Prefixes = append(v.Prefixes, p)
			continue
		}
		orgFound = true
		if key == nil {
			continue
		}
		found = true
		o := Override{
			CIDR:       cidr,
			Attributes: identity.Attributes{Username: username.String, DeviceID: deviceID.String, Location: location.String},
			TraceID:    traceID.String,
			CTime:      fromMicros(ctime.Int64),
			MTime:      fromMicros(mtime.Int64),
		}
		if meta != nil {
			o.Meta = append([]byte(nil), meta...)
		}
		v.Overrides = []Override{o}
	}
	if err := rows.Err(); err != nil {
		return View{}, fmt.Errorf("orgstore: read override: %w", err)
	}
	switch {
	case !orgFound:
		return View{}, ErrOrgNotFound
	case !found:
		return View{}, ErrOverrideNotFound
	}
	return v, nil
}

// readOverrideSQL is ReadOverride's statement. Row kind 1: the organisation,
// LEFT JOINed with the override (NULL columns when there is none). Kind 2:
// one row per prefix.
const readOverrideSQL = `
		SELECT 1 AS kind, o.version, v.cidr, v.username, v.deviceid, v.location, v.trace_id, v.ctime, v.mtime, v.meta
		FROM orgs o LEFT JOIN overrides v ON v.org_pk = o.pk AND v.cidr = $2
		WHERE o.id = $1
		UNION ALL
		SELECT 2, o.version, p.cidr, NULL, NULL, NULL, NULL, NULL, NULL, NULL
		FROM orgs o JOIN prefixes p ON p.org_pk = o.pk
		WHERE o.id = $1
		ORDER BY 1, 3`
