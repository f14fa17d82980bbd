package orgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
)

// The API tokens (docs/access.md): the rows access.Tokens keeps, in the
// orgmanager's database so that the CLI, every orgmanager replica and an
// IP Mapper reading the same database agree on them.

var _ access.Store = (*Store)(nil)

const bumpTokenChanges = `UPDATE token_changes SET counter = counter + 1 WHERE id = 1`

// InsertToken stores a new token.
func (s *Store) InsertToken(ctx context.Context, t access.StoredToken) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, name, role, org, hash, created_at, expires_at, revoked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			t.ID, t.Name, string(t.Role), t.Org, t.Hash[:], t.CreatedAt.UnixMicro(), micros(t.ExpiresAt), micros(t.RevokedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, bumpTokenChanges)
		return err
	})
	if err != nil {
		return fmt.Errorf("orgstore: insert token: %w", err)
	}
	return nil
}

const tokenColumns = `id, name, role, org, hash, created_at, expires_at, revoked_at`

type rowScanner interface{ Scan(dst ...any) error }

func scanToken(r rowScanner) (access.StoredToken, error) {
	var t access.StoredToken
	var role string
	var hash []byte
	var created, expires, revoked int64
	if err := r.Scan(&t.ID, &t.Name, &role, &t.Org, &hash, &created, &expires, &revoked); err != nil {
		return t, err
	}
	if len(hash) != len(t.Hash) {
		return t, fmt.Errorf("token %s: stored hash of %d bytes", t.ID, len(hash))
	}
	copy(t.Hash[:], hash)
	t.Role = access.Role(role)
	t.CreatedAt = fromMicros(created)
	if expires != 0 {
		t.ExpiresAt = fromMicros(expires)
	}
	if revoked != 0 {
		t.RevokedAt = fromMicros(revoked)
	}
	return t, nil
}

// TokenByID returns the token, or access.ErrTokenNotFound.
func (s *Store) TokenByID(ctx context.Context, id string) (access.StoredToken, error) {
	t, err := scanToken(s.reader.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return access.StoredToken{}, access.ErrTokenNotFound
	}
	if err != nil {
		return access.StoredToken{}, fmt.Errorf("orgstore: read token: %w", err)
	}
	return t, nil
}

// ListTokens lists org's tokens, or every token when org is "", oldest
// first.
func (s *Store) ListTokens(ctx context.Context, org string) ([]access.Token, error) {
	q := `SELECT ` + tokenColumns + ` FROM tokens`
	var args []any
	if org != "" {
		q += ` WHERE org = $1`
		args = append(args, org)
	}
	rows, err := s.reader.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("orgstore: list tokens: %w", err)
	}
	defer rows.Close()
	out := []access.Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("orgstore: list tokens: %w", err)
		}
		out = append(out, t.Token)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orgstore: list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken marks the token revoked at at; a revoked token keeps its
// first revocation time. access.ErrTokenNotFound for an unknown id.
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		var revoked int64
		err := tx.QueryRowContext(ctx, `SELECT revoked_at FROM tokens WHERE id = $1`, id).Scan(&revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return access.ErrTokenNotFound
		}
		if err != nil || revoked != 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = $2 WHERE id = $1`, id, max(at.UnixMicro(), 1)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, bumpTokenChanges)
		return err
	})
	if errors.Is(err, access.ErrTokenNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("orgstore: revoke token: %w", err)
	}
	return nil
}

// TokenChanges returns the counter every insert and revocation bumps.
func (s *Store) TokenChanges(ctx context.Context) (int64, error) {
	var n int64
	if err := s.reader.QueryRowContext(ctx, `SELECT counter FROM token_changes WHERE id = 1`).Scan(&n); err != nil {
		return 0, fmt.Errorf("orgstore: token changes: %w", err)
	}
	return n, nil
}

// HasTokens reports whether any token exists, revoked or not.
func (s *Store) HasTokens(ctx context.Context) (bool, error) {
	var n int
	err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM tokens LIMIT 1`).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("orgstore: tokens: %w", err)
	}
	return true, nil
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}
