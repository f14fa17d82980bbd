package orgstore

import (
	"context"
	"database/sql"
	"encoding/json"
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
// absent override is not an error. It is a batch of one delete, so that the
// version follows ApplyBatch's rule: bumped only when a row was deleted.
func (s *Store) DeleteOverride(ctx context.Context, org string, cidr netip.Prefix) (int64, error) {
	return s.ApplyBatch(ctx, org, []BatchOp{{Delete: true, Override: Override{CIDR: cidr}}})
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
// an op is invalid. It bumps the version once when the batch changed a row:
// an upsert always does (it sets MTime at least), a delete only when the
// override existed. A batch that only deletes absent CIDRs changes nothing
// and keeps the version, as the single DELETE does (docs/orgmanager.md,
// versioning: a write bumps the version when it changes the database).
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
		pk, v, err := s.lockOrg(ctx, tx, org)
		if err != nil {
			return err
		}
		version = v
		var deleted int64
		if s.dialect == DialectPostgres {
			deleted, err = pgApplyOverrides(ctx, tx, pk, now, deletes, upserts)
		} else {
			deleted, err = s.q.applyOverrides(ctx, tx, pk, now, deletes, upserts)
		}
		if err != nil {
			return fmt.Errorf("orgstore: write overrides: %w", err)
		}
		if deleted > 0 || len(upserts) > 0 {
			version, err = bumpVersion(ctx, tx, pk, now)
		}
		return err
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

// PrepareOverride checks o as the write methods do (the CIDR, the
// attributes, meta, and the trace id derived from it) and returns it ready to
// be written: Meta compact, TraceID set, and marked so that PutOverride and
// ApplyBatch take it without checking it again (see Override). A refusal
// wraps ErrInvalidInput and its text is fit for an API client.
func PrepareOverride(o Override) (Override, error) {
	if err := validPrefix(o.CIDR); err != nil {
		return o, err
	}
	c, meta, err := checkOverride(&o)
	if err != nil {
		return o, err
	}
	o.Meta, o.TraceID, o.checked = meta, c.traceID, &c
	return o, nil
}

// checkedOverride is what PrepareOverride checked and derived. It keeps its
// own copy of meta: an Override's Meta shares its bytes with the caller, who
// could change them after the check.
type checkedOverride struct {
	attrs   identity.Attributes
	meta    string // compact; "" when absent (a JSON object is never empty)
	traceID string
}

// holds reports whether o still carries exactly what was checked.
func (c *checkedOverride) holds(o *Override) bool {
	return c.attrs == o.Attributes && c.meta == string(o.Meta) && (c.meta == "") == (o.Meta == nil)
}

// checkOverride is the one set of checks of what an upsert writes besides
// the CIDR (planBatch checks that of every op); meta is o.Meta compact.
func checkOverride(o *Override) (c checkedOverride, meta json.RawMessage, err error) {
	if err := o.Attributes.Validate(); err != nil {
		return c, nil, err
	}
	if meta, err = NormalizeMeta(o.Meta); err != nil {
		return c, nil, err
	}
	traceID := TraceID(meta)
	// It is kept in a TEXT column of its own, so it is held to the rule of
	// the attributes.
	if err := identity.CheckText("meta.trace_id", traceID); err != nil {
		return c, nil, err
	}
	return checkedOverride{attrs: o.Attributes, meta: string(meta), traceID: traceID}, meta, nil
}

// newUpsertRow takes the checks of PrepareOverride when o still holds what
// they checked, and runs them otherwise: each item is checked once.
func newUpsertRow(o *Override) (upsertRow, error) {
	c := o.checked
	if c == nil || !c.holds(o) {
		fresh, _, err := checkOverride(o)
		if err != nil {
			return upsertRow{}, err
		}
		c = &fresh
	}
	r := upsertRow{
		key:      prefixKey(o.CIDR),
		username: o.Username,
		deviceID: o.DeviceID,
		location: o.Location,
		traceID:  c.traceID,
	}
	if c.meta != "" {
		r.meta = c.meta
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
// only; an overwrite keeps it. It returns how many rows the deletes removed.
func (q queries) applyOverrides(ctx context.Context, tx *sql.Tx, orgPK, nowMicros int64, deletes [][]byte, rows []upsertRow) (int64, error) {
	deleted, err := q.execKeyChunks(ctx, tx, `DELETE FROM overrides WHERE org_pk = `, orgPK, deletes)
	if err != nil {
		return 0, err
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
			return 0, err
		}
	}
	return deleted, nil
}

// currentVersion returns the organisation's version, or ErrOrgNotFound.
func (s *Store) currentVersion(ctx context.Context, org string) (int64, error) {
	o, err := s.GetOrg(ctx, org)
	return o.Version, err
}
