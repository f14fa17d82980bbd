package orgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/netip"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// OverridePage is one page of an organisation's overrides.
type OverridePage struct {
	// Version and Prefixes are the organisation's, from the page's
	// snapshot.
	Version  int64
	Prefixes []netip.Prefix
	// Overrides are at most the limit asked for, every field filled, in
	// ReadOverrides' order.
	Overrides []Override
	// Total counts all the organisation's overrides.
	Total int
	// More tells that overrides follow the page's last.
	More bool
}

// MaxPageLen bounds one page.
const MaxPageLen = 1000

// OverridesPage returns at most limit overrides (1..MaxPageLen) of the
// organisation following the CIDR after (the zero Prefix: from the first),
// in one read transaction. The primary key (org, cidr) orders the rows, so
// a page costs a range scan of its own length wherever it starts; only the
// count reads the organisation's whole index (an index-only scan), which
// stays within milliseconds at 100 000 overrides.
func (s *Store) OverridesPage(ctx context.Context, org string, after netip.Prefix, limit int) (OverridePage, error) {
	if identity.ValidateOrg(org) != nil {
		return OverridePage{}, ErrOrgNotFound
	}
	if limit < 1 || limit > MaxPageLen {
		return OverridePage{}, fmt.Errorf("%w: a page holds 1..%d overrides, not %d", ErrInvalidInput, MaxPageLen, limit)
	}
	var from []byte // every key is longer than the empty one
	if after.IsValid() {
		if err := validPrefix(after); err != nil {
			return OverridePage{}, err
		}
		from = prefixKey(after)
	} else {
		from = []byte{}
	}
	var pg OverridePage
	err := s.read(ctx, func(tx *sql.Tx) error {
		var pk int64
		err := tx.QueryRowContext(ctx, `SELECT pk, version FROM orgs WHERE id = $1`, org).Scan(&pk, &pg.Version)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrOrgNotFound
		}
		if err != nil {
			return fmt.Errorf("orgstore: read organisation: %w", err)
		}
		if pg.Prefixes, err = readPrefixes(ctx, tx, pk); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM overrides WHERE org_pk = $1`, pk).Scan(&pg.Total); err != nil {
			return fmt.Errorf("orgstore: count overrides: %w", err)
		}
		rows, err := tx.QueryContext(ctx, `SELECT cidr, username, deviceid, location, trace_id, ctime, mtime, meta
			FROM overrides WHERE org_pk = $1 AND cidr > $2 ORDER BY cidr LIMIT $3`, pk, from, limit+1)
		if err != nil {
			return fmt.Errorf("orgstore: read overrides: %w", err)
		}
		defer rows.Close()
		pg.Overrides = make([]Override, 0, limit)
		for rows.Next() {
			if len(pg.Overrides) == limit {
				pg.More = true
				break
			}
			var (
				key          []byte
				o            Override
				ctime, mtime int64
				meta         sql.NullString
			)
			if err := rows.Scan(&key, &o.Username, &o.DeviceID, &o.Location, &o.TraceID, &ctime, &mtime, &meta); err != nil {
				return fmt.Errorf("orgstore: read overrides: %w", err)
			}
			if o.CIDR, err = decodeKey(key); err != nil {
				return err
			}
			o.CTime, o.MTime = fromMicros(ctime), fromMicros(mtime)
			if meta.Valid {
				o.Meta = []byte(meta.String)
			}
			pg.Overrides = append(pg.Overrides, o)
		}
		return rows.Err()
	})
	if err != nil {
		return OverridePage{}, err
	}
	return pg, nil
}
