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

// ReadOverrides returns the organisation's version, prefixes and all its
// overrides (IPv4 first, then by address, then by length) from one read
// transaction. d selects the override columns read; less is faster. With
// WithSettings or-ed in, the View also holds the organisation's settings
// documents from the same transaction (what one deploy publishes together).
func (s *Store) ReadOverrides(ctx context.Context, org string, d Detail) (View, error) {
	if identity.ValidateOrg(org) != nil {
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
		if v.Overrides, err = s.q.readOverrides(ctx, tx, pk, d.overrides()); err != nil {
			return err
		}
		if d&WithSettings != 0 {
			v.Settings, err = readOrgSettings(ctx, tx, pk)
		}
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
// allocate and copy about five times the final 18 MB of a 100 000-override
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
	if identity.ValidateOrg(org) != nil {
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
