package orgstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// The listings of the management API and the console: organisations page
// by page, and an organisation's settings documents without their bodies.

// OrgSummary is one organisation of a ListOrgs page.
type OrgSummary = Org

// MaxListOrgs is the most organisations one ListOrgs page holds.
const MaxListOrgs = 1000

// ListOrgs returns the organisations whose id sorts after after (byte
// order; "" starts at the beginning), at most limit of them (clamped to
// 1..MaxListOrgs), in id order, and next: the id to pass as after for the
// following page, "" when this page is the last. Keyset pagination: each
// page is one range scan of the orgs.id index from after, as fast on the
// thousandth page as on the first, and an organisation created or deleted
// between two pages neither shifts nor repeats the others.
func (s *Store) ListOrgs(ctx context.Context, after string, limit int) ([]OrgSummary, string, error) {
	limit = min(max(limit, 1), MaxListOrgs)
	if after != "" && identity.ValidateOrg(after) != nil {
		// Not an id that can exist: PostgreSQL would refuse text with a
		// NUL or invalid UTF-8 outright. The API checks it first.
		return nil, "", fmt.Errorf("%w: after is not an organisation id", ErrInvalidInput)
	}
	// One row more than asked tells whether another page follows.
	rows, err := s.reader.QueryContext(ctx, `SELECT id, version, created_at, updated_at FROM orgs
		WHERE id > $1 ORDER BY id LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("orgstore: list organisations: %w", err)
	}
	defer rows.Close()
	out := make([]OrgSummary, 0, min(limit+1, 128))
	for rows.Next() {
		var (
			o                OrgSummary
			created, updated int64
		)
		if err := rows.Scan(&o.ID, &o.Version, &created, &updated); err != nil {
			return nil, "", fmt.Errorf("orgstore: list organisations: %w", err)
		}
		o.CreatedAt, o.UpdatedAt = fromMicros(created), fromMicros(updated)
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("orgstore: list organisations: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// SettingsEntry is one settings document of an organisation as a listing
// shows it: which scope it is for, what it selects and how large it is,
// without its body (GetSettings reads that).
type SettingsEntry struct {
	Scope settings.Scope
	// SelectsProfile is the profile number the document's own "profile"
	// field selects; HasProfile is false when it selects none.
	SelectsProfile int
	HasProfile     bool
	// Size is the length in bytes of the stored (canonical JSON) document.
	Size int64
}

// ListSettingsEntries returns the organisation's version and one entry per
// settings document it has, in ListSettings' order (org, profiles by
// number, locations, usernames, device ids, each by value), from one
// statement, hence one snapshot; ErrOrgNotFound when the organisation does
// not exist. The documents themselves are not read: the size comes from
// the database's own length of the stored text.
func (s *Store) ListSettingsEntries(ctx context.Context, org string) (int64, []SettingsEntry, error) {
	if identity.ValidateOrg(org) != nil {
		return 0, nil, ErrOrgNotFound
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT o.version, s.scope, s.value, s.selects_profile, `+s.q.docBytes+` FROM orgs o
		LEFT JOIN settings s ON s.org_pk = o.pk
		WHERE o.id = $1 ORDER BY s.scope, s.value`, org)
	if err != nil {
		return 0, nil, fmt.Errorf("orgstore: list settings: %w", err)
	}
	defer rows.Close()
	var (
		version int64
		found   bool
		list    []ScopedSettings // for sortProfiles' order
		entries = map[settings.Scope]SettingsEntry{}
	)
	for rows.Next() {
		var (
			kind    sql.NullInt64
			value   sql.NullString
			profile sql.NullInt64
			size    sql.NullInt64
		)
		if err := rows.Scan(&version, &kind, &value, &profile, &size); err != nil {
			return 0, nil, fmt.Errorf("orgstore: list settings: %w", err)
		}
		found = true
		if !kind.Valid {
			continue // the organisation has none
		}
		sc, err := scopeFromKey(kind.Int64, value.String)
		if err != nil {
			return 0, nil, err
		}
		list = append(list, ScopedSettings{Scope: sc})
		entries[sc] = SettingsEntry{Scope: sc, SelectsProfile: int(profile.Int64), HasProfile: profile.Valid, Size: size.Int64}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("orgstore: list settings: %w", err)
	}
	if !found {
		return 0, nil, ErrOrgNotFound
	}
	sortProfiles(list)
	out := make([]SettingsEntry, len(list))
	for i, l := range list {
		out[i] = entries[l.Scope]
	}
	return version, out, nil
}
