package orgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// PutOrg creates the organisation at version 1, or bumps the version of an
// existing one (PUT and PATCH /org/{org}). It returns the version after the
// call.
func (s *Store) PutOrg(ctx context.Context, id string) (int64, error) {
	defer s.cache.invalidate(id) // after the commit: see overrideCache
	if !validOrgID(id) {
		if err := checkText("org id", id); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: org id must be 1 to 255 bytes", ErrInvalidInput)
	}
	now := s.nowMicros()
	var v int64
	err := s.writer.QueryRowContext(ctx, `INSERT INTO orgs (id, version, revision, created_at, updated_at)
		VALUES ($1, 1, 0, $2, $2)
		ON CONFLICT (id) DO UPDATE SET version = orgs.version + 1, updated_at = excluded.updated_at
		RETURNING version`, id, now).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("orgstore: put organisation: %w", err)
	}
	return v, nil
}

// GetOrg returns the organisation, or ErrOrgNotFound.
func (s *Store) GetOrg(ctx context.Context, id string) (Org, error) {
	if !validOrgID(id) {
		return Org{}, ErrOrgNotFound
	}
	o := Org{ID: id}
	var created, updated int64
	err := s.stmts.getOrg.QueryRowContext(ctx, id).
		Scan(&o.Version, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Org{}, ErrOrgNotFound
	}
	if err != nil {
		return Org{}, fmt.Errorf("orgstore: get organisation: %w", err)
	}
	o.CreatedAt, o.UpdatedAt = fromMicros(created), fromMicros(updated)
	return o, nil
}

// DeleteOrg deletes the organisation with all its prefixes and overrides, or
// returns ErrOrgNotFound.
func (s *Store) DeleteOrg(ctx context.Context, id string) error {
	defer s.cache.invalidate(id) // after the commit: see overrideCache
	return s.write(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lockOrg(ctx, tx, id)
		if err != nil {
			return err
		}
		// Explicit deletes rather than relying on ON DELETE CASCADE alone:
		// they do not depend on SQLite's foreign_keys pragma being on.
		for _, q := range []string{
			`DELETE FROM overrides WHERE org_pk = $1`,
			`DELETE FROM prefixes WHERE org_pk = $1`,
			`DELETE FROM orgs WHERE pk = $1`,
		} {
			if _, err := tx.ExecContext(ctx, q, pk); err != nil {
				return fmt.Errorf("orgstore: delete organisation: %w", err)
			}
		}
		return nil
	})
}

// ListOrgs returns every organisation with its version, ordered by id (byte
// order). The deploy step's version scanner walks it.
func (s *Store) ListOrgs(ctx context.Context) ([]OrgVersion, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT id, version FROM orgs ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("orgstore: list organisations: %w", err)
	}
	defer rows.Close()
	var out []OrgVersion
	for rows.Next() {
		var o OrgVersion
		if err := rows.Scan(&o.ID, &o.Version); err != nil {
			return nil, fmt.Errorf("orgstore: list organisations: %w", err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orgstore: list organisations: %w", err)
	}
	return out, nil
}

// NextRevision increments the organisation's deploy revision counter (0 for
// a new organisation) and returns the new value. It does not bump the
// version: a redeploy changes nothing a client wrote.
func (s *Store) NextRevision(ctx context.Context, id string) (int64, error) {
	if !validOrgID(id) {
		return 0, ErrOrgNotFound
	}
	var rev int64
	err := s.writer.QueryRowContext(ctx, `UPDATE orgs SET revision = revision + 1 WHERE id = $1 RETURNING revision`, id).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrOrgNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("orgstore: next revision: %w", err)
	}
	return rev, nil
}

const getOrgSQL = `SELECT version, created_at, updated_at FROM orgs WHERE id = $1`
