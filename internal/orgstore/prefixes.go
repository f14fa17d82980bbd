package orgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// UpdatePrefixes removes, then adds prefixes of the organisation in one
// transaction (PATCH /org/{org}/prefixes). Adding a prefix the organisation
// already owns and removing one it does not own are no-ops; the version is
// bumped only when a row was inserted or deleted. A prefix that overlaps one
// of another organisation fails the whole call with *OverlapError.
func (s *Store) UpdatePrefixes(ctx context.Context, org string, add, remove []netip.Prefix) (int64, error) {
	defer s.cache.invalidate(org) // after the commit: see overrideCache
	addKeys, err := uniqueKeys(add)
	if err != nil {
		return 0, err
	}
	removeKeys, err := uniqueKeys(remove)
	if err != nil {
		return 0, err
	}
	now := s.nowMicros()
	var version int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		if len(addKeys) > 0 && s.q.lockPrefixes != "" {
			// Before any read: the overlap check below must see every
			// prefix committed by the previous holder of this lock.
			if _, err := tx.ExecContext(ctx, s.q.lockPrefixes); err != nil {
				return fmt.Errorf("orgstore: lock prefixes: %w", err)
			}
		}
		pk, v, err := s.lockOrg(ctx, tx, org)
		if err != nil {
			return err
		}
		version = v
		removed, err := s.q.execKeyChunks(ctx, tx, `DELETE FROM prefixes WHERE org_pk = `, pk, removeKeys)
		if err != nil {
			return fmt.Errorf("orgstore: remove prefixes: %w", err)
		}
		for _, p := range add {
			if err := s.q.findOverlap(ctx, tx, pk, p); err != nil {
				return err
			}
		}
		added, err := s.q.insertPrefixes(ctx, tx, pk, addKeys)
		if err != nil {
			return fmt.Errorf("orgstore: add prefixes: %w", err)
		}
		if removed+added > 0 {
			version, err = bumpVersion(ctx, tx, pk, now)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// uniqueKeys validates prefixes and returns their keys without duplicates.
func uniqueKeys(ps []netip.Prefix) ([][]byte, error) {
	seen := make(map[netip.Prefix]struct{}, len(ps))
	keys := make([][]byte, 0, len(ps))
	for _, p := range ps {
		if err := validPrefix(p); err != nil {
			return nil, err
		}
		if _, dup := seen[p]; dup {
			continue
		}
		seen[p] = struct{}{}
		keys = append(keys, prefixKey(p))
	}
	return keys, nil
}

// findOverlap returns *OverlapError when a prefix of another organisation
// overlaps p. Two index lookups on the global cidr key: the prefixes starting
// inside p (p itself and what p contains, plus shorter ones sharing p's first
// address) and p's ancestors (what contains p).
func (q queries) findOverlap(ctx context.Context, tx *sql.Tx, orgPK int64, p netip.Prefix) error {
	lo, hi := coveredKeyRange(p)
	args := []any{orgPK, lo, hi}
	var b strings.Builder
	b.WriteString(`SELECT o.id, x.cidr FROM prefixes x JOIN orgs o ON o.pk = x.org_pk
		WHERE x.org_pk <> ` + q.param(1) + ` AND x.cidr >= ` + q.param(2) + ` AND x.cidr <= ` + q.param(3))
	if anc := ancestorKeys(p); len(anc) > 0 {
		args = append(args, orgPK)
		b.WriteString(`
		UNION ALL
		SELECT o.id, x.cidr FROM prefixes x JOIN orgs o ON o.pk = x.org_pk
		WHERE x.org_pk <> ` + q.param(len(args)) + ` AND x.cidr IN `)
		args = q.appendInList(&b, args, anc)
	}
	// The smallest key: the outermost conflicting prefix, deterministically.
	b.WriteString(" ORDER BY 2 LIMIT 1")
	var (
		owner string
		key   []byte
	)
	err := tx.QueryRowContext(ctx, b.String(), args...).Scan(&owner, &key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("orgstore: prefix overlap check: %w", err)
	}
	existing, err := decodeKey(key)
	if err != nil {
		return err
	}
	return &OverlapError{CIDR: p, Existing: existing, Org: owner}
}

// insertPrefixes inserts the keys the organisation does not own yet and
// returns how many it inserted. The insert has no ON CONFLICT clause on
// purpose: after findOverlap, a key can only be taken by another
// organisation if the serialisation of prefix writers failed, and that must
// fail the transaction rather than pass silently.
func (q queries) insertPrefixes(ctx context.Context, tx *sql.Tx, orgPK int64, keys [][]byte) (int64, error) {
	owned := make(map[string]bool)
	for rest := keys; len(rest) > 0; {
		chunk := rest[:min(len(rest), keysPerStatement)]
		rest = rest[len(chunk):]
		stmt, args := q.keyList(`SELECT cidr FROM prefixes WHERE org_pk = `, orgPK, chunk)
		rows, err := tx.QueryContext(ctx, stmt, args...)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var k sql.RawBytes
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return 0, err
			}
			owned[string(k)] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
	}
	fresh := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if !owned[string(k)] {
			fresh = append(fresh, k)
		}
	}
	var total int64
	for len(fresh) > 0 {
		chunk := fresh[:min(len(fresh), keysPerStatement)]
		fresh = fresh[len(chunk):]
		var b strings.Builder
		b.WriteString(`INSERT INTO prefixes (cidr, org_pk) VALUES `)
		args := make([]any, 0, 2*len(chunk))
		for i, k := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			args = append(args, k, orgPK)
			b.WriteString("(" + q.param(len(args)-1) + ", " + q.param(len(args)) + ")")
		}
		n, err := execAffected(ctx, tx, b.String(), args)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Prefixes returns the organisation's version and prefixes (IPv4 first, then
// by address, then by length), read in one statement and so consistent.
func (s *Store) Prefixes(ctx context.Context, org string) (int64, []netip.Prefix, error) {
	if identity.ValidateOrg(org) != nil {
		return 0, nil, ErrOrgNotFound
	}
	rows, err := s.stmts.prefixes.QueryContext(ctx, org)
	if err != nil {
		return 0, nil, fmt.Errorf("orgstore: read prefixes: %w", err)
	}
	defer rows.Close()
	var (
		version int64
		found   bool
		out     []netip.Prefix
	)
	for rows.Next() {
		var key sql.RawBytes
		if err := rows.Scan(&version, &key); err != nil {
			return 0, nil, fmt.Errorf("orgstore: read prefixes: %w", err)
		}
		found = true
		if key == nil {
			continue // the organisation has no prefix
		}
		p, err := decodeKey(key)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("orgstore: read prefixes: %w", err)
	}
	if !found {
		return 0, nil, ErrOrgNotFound
	}
	return version, out, nil
}

// readPrefixes returns the organisation's prefixes in key order.
func readPrefixes(ctx context.Context, tx *sql.Tx, orgPK int64) ([]netip.Prefix, error) {
	rows, err := tx.QueryContext(ctx, `SELECT cidr FROM prefixes WHERE org_pk = $1 ORDER BY cidr`, orgPK)
	if err != nil {
		return nil, fmt.Errorf("orgstore: read prefixes: %w", err)
	}
	defer rows.Close()
	var out []netip.Prefix
	for rows.Next() {
		var key sql.RawBytes
		if err := rows.Scan(&key); err != nil {
			return nil, fmt.Errorf("orgstore: read prefixes: %w", err)
		}
		p, err := decodeKey(key)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orgstore: read prefixes: %w", err)
	}
	return out, nil
}

const prefixesSQL = `SELECT o.version, p.cidr FROM orgs o
		LEFT JOIN prefixes p ON p.org_pk = o.pk
		WHERE o.id = $1 ORDER BY p.cidr`
