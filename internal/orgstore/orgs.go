package orgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// PutOrg creates the organisation at version 1, or bumps the version of an
// existing one (PUT and PATCH /org/{org}). It returns the version after the
// call.
func (s *Store) PutOrg(ctx context.Context, id string) (int64, error) {
	defer s.cache.invalidate(id) // after the commit: see overrideCache
	if err := identity.ValidateOrg(id); err != nil {
		return 0, err
	}
	now := s.nowMicros()
	var v int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		// A re-created organisation continues the deploy revisions of the
		// deleted one, so a clean below its first revision also removes
		// sessions of the old one that the IP Mapper may still hold.
		err := tx.QueryRowContext(ctx, `INSERT INTO orgs (id, version, revision, created_at, updated_at)
			VALUES ($1, 1, COALESCE((SELECT revision FROM deleted_orgs WHERE id = $1), 0), $2, $2)
			ON CONFLICT (id) DO UPDATE SET version = orgs.version + 1, updated_at = excluded.updated_at
			RETURNING version`, id, now).Scan(&v)
		if err != nil || v != 1 {
			return err
		}
		// That revision takes over the pending clean: the first deploy of
		// the new organisation cleans every older revision.
		_, err = tx.ExecContext(ctx, `DELETE FROM deleted_orgs WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("orgstore: put organisation: %w", err)
	}
	return v, nil
}

// GetOrg returns the organisation, or ErrOrgNotFound.
func (s *Store) GetOrg(ctx context.Context, id string) (Org, error) {
	if identity.ValidateOrg(id) != nil {
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

// DeleteOrg deletes the organisation with all its prefixes, overrides and
// settings documents, or returns ErrOrgNotFound. It records the organisation
// as deleted (see DeletedOrg) in the same transaction.
func (s *Store) DeleteOrg(ctx context.Context, id string) error {
	defer s.cache.invalidate(id) // after the commit: see overrideCache
	return s.write(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lockOrg(ctx, tx, id)
		if err != nil {
			return err
		}
		// Explicit deletes rather than relying on ON DELETE CASCADE alone:
		// they do not depend on SQLite's foreign_keys pragma being on.
		// The pending clean outlives the organisation: see DeletedOrg.
		if _, err := tx.ExecContext(ctx, `INSERT INTO deleted_orgs (id, revision, deleted_at)
			SELECT id, revision, $2 FROM orgs WHERE pk = $1
			ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, deleted_at = excluded.deleted_at`,
			pk, s.nowMicros()); err != nil {
			return fmt.Errorf("orgstore: delete organisation: %w", err)
		}
		// The organisation's tokens die with it: an organisation created
		// again under the same id is another customer, whom the old
		// tokens must not reach. Verifiers see the change counter move
		// (access.Tokens, within its recheck interval).
		res, err := tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = $2 WHERE org = $1 AND revoked_at = 0`, id, max(s.nowMicros(), 1))
		if err != nil {
			return fmt.Errorf("orgstore: delete organisation: revoke its tokens: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			if _, err := tx.ExecContext(ctx, bumpTokenChanges); err != nil {
				return fmt.Errorf("orgstore: delete organisation: revoke its tokens: %w", err)
			}
		}
		for _, q := range []string{
			`DELETE FROM settings WHERE org_pk = $1`,
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

// OrgVersions returns every organisation with its version, ordered by id
// (byte order). The deploy step's version scanner walks it. (The API's
// paginated listing is ListOrgs.)
func (s *Store) OrgVersions(ctx context.Context) ([]OrgVersion, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT id, version, updated_at FROM orgs ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("orgstore: list organisations: %w", err)
	}
	defer rows.Close()
	var out []OrgVersion
	for rows.Next() {
		var o OrgVersion
		var updated int64
		if err := rows.Scan(&o.ID, &o.Version, &updated); err != nil {
			return nil, fmt.Errorf("orgstore: list organisations: %w", err)
		}
		o.UpdatedAt = fromMicros(updated)
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
	if identity.ValidateOrg(id) != nil {
		return 0, ErrOrgNotFound
	}
	var rev int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `UPDATE orgs SET revision = revision + 1 WHERE id = $1 RETURNING revision`, id).Scan(&rev)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrOrgNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("orgstore: next revision: %w", err)
	}
	return rev, nil
}

// DeletedOrg is a deleted organisation whose sessions the IP Mapper may still
// hold. DeleteOrg records it in the same transaction as the delete, so the
// clean survives a restart of the orgmanager before it reached the IP Mapper.
type DeletedOrg struct {
	ID string
	// Revision is the organisation's deploy revision at the delete.
	Revision int64
	// deletedAt tells two deletes of one id apart (see ForgetDeletedOrg).
	deletedAt int64
}

// DeletedOrgs lists the deleted organisations not yet cleaned, by id.
func (s *Store) DeletedOrgs(ctx context.Context) ([]DeletedOrg, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT id, revision, deleted_at FROM deleted_orgs ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("orgstore: list deleted organisations: %w", err)
	}
	defer rows.Close()
	var out []DeletedOrg
	for rows.Next() {
		var d DeletedOrg
		if err := rows.Scan(&d.ID, &d.Revision, &d.deletedAt); err != nil {
			return nil, fmt.Errorf("orgstore: list deleted organisations: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orgstore: list deleted organisations: %w", err)
	}
	return out, nil
}

// DeletedOrg returns the record of org's delete, if one is pending.
func (s *Store) DeletedOrg(ctx context.Context, org string) (DeletedOrg, bool, error) {
	d := DeletedOrg{ID: org}
	err := s.reader.QueryRowContext(ctx, `SELECT revision, deleted_at FROM deleted_orgs WHERE id = $1`, org).
		Scan(&d.Revision, &d.deletedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return DeletedOrg{}, false, nil
	}
	if err != nil {
		return DeletedOrg{}, false, fmt.Errorf("orgstore: read deleted organisation: %w", err)
	}
	return d, true, nil
}

// ForgetDeletedOrg removes the record once the clean it asked for is done.
// A later delete of the same id (re-created and deleted again meanwhile)
// has another timestamp and stays.
func (s *Store) ForgetDeletedOrg(ctx context.Context, d DeletedOrg) error {
	if err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM deleted_orgs WHERE id = $1 AND revision = $2 AND deleted_at = $3`,
			d.ID, d.Revision, d.deletedAt)
		return err
	}); err != nil {
		return fmt.Errorf("orgstore: forget deleted organisation: %w", err)
	}
	return nil
}

const getOrgSQL = `SELECT version, created_at, updated_at FROM orgs WHERE id = $1`
