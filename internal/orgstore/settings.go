package orgstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// key is the scope's database key (scope, value), after Validate.
func scopeKey(sc settings.Scope) (int, string, error) {
	if err := sc.Validate(); err != nil {
		return 0, "", err
	}
	if sc.Kind == settings.ScopeProfile {
		return int(sc.Kind), strconv.Itoa(sc.Profile), nil
	}
	return int(sc.Kind), sc.Value, nil
}

// scopeFromKey is key's inverse, for rows read back.
func scopeFromKey(kind int64, value string) (settings.Scope, error) {
	sc := settings.Scope{Kind: settings.ScopeKind(kind)}
	if kind < int64(settings.ScopeOrg) || kind > int64(settings.ScopeDeviceID) {
		return settings.Scope{}, fmt.Errorf("orgstore: malformed settings row (scope %d) in the database", kind)
	}
	if sc.Kind == settings.ScopeProfile {
		n, err := strconv.Atoi(value)
		if err != nil {
			return settings.Scope{}, fmt.Errorf("orgstore: malformed settings row (profile %q) in the database", value)
		}
		sc.Profile = n
	} else {
		sc.Value = value
	}
	return sc, nil
}

// ScopedSettings is one stored settings document of an organisation.
type ScopedSettings struct {
	Scope settings.Scope
	// Doc is the document's canonical JSON (settings.Document.String()):
	// settings.Parse reads it back.
	Doc json.RawMessage
}

// GlobalSettings is the global layer: its document and its version, a
// counter of its own that every PutGlobalSettings and DeleteGlobalSettings
// bumps (0 before the first write).
type GlobalSettings struct {
	Version int64
	// Doc is the canonical JSON, nil when there is no global document.
	Doc json.RawMessage
}

// canonicalSettings returns what the store keeps of doc: its canonical
// JSON, checked to parse back with settings.Parse (a Document built by hand
// rather than by Parse may hold what Parse refuses), and the profile it
// selects. JSON text from encoding/json is valid UTF-8 without NUL bytes, so
// both databases hold it.
func canonicalSettings(doc *settings.Document) (string, any, error) {
	if doc == nil {
		return "", nil, fmt.Errorf("%w: no settings document", ErrInvalidInput)
	}
	back, err := settings.Parse([]byte(doc.String()))
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	var profile any // SQL NULL when the document selects none
	if back.Profile != nil {
		profile = int64(*back.Profile)
	}
	return back.String(), profile, nil
}

// GetSettings returns the organisation's document for sc and its version,
// ErrOrgNotFound, or ErrSettingsNotFound. It is one statement, hence one
// snapshot.
func (s *Store) GetSettings(ctx context.Context, org string, sc settings.Scope) (json.RawMessage, int64, error) {
	kind, value, err := scopeKey(sc)
	if err != nil {
		return nil, 0, err
	}
	if identity.ValidateOrg(org) != nil {
		return nil, 0, ErrOrgNotFound
	}
	var (
		version int64
		doc     []byte
	)
	err = s.reader.QueryRowContext(ctx, `SELECT o.version, s.doc FROM orgs o
		LEFT JOIN settings s ON s.org_pk = o.pk AND s.scope = $2 AND s.value = $3
		WHERE o.id = $1`, org, kind, value).Scan(&version, &doc)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, 0, ErrOrgNotFound
	case err != nil:
		return nil, 0, fmt.Errorf("orgstore: read settings: %w", err)
	case doc == nil:
		return nil, version, ErrSettingsNotFound
	}
	return doc, version, nil
}

// PutSettings stores doc as the organisation's document for sc, replacing
// the one there (PUT /org/{org}/settings). It always bumps the version and
// returns the version after the call.
func (s *Store) PutSettings(ctx context.Context, org string, sc settings.Scope, doc *settings.Document) (int64, error) {
	defer s.cache.invalidate(org) // the cached views carry the version
	kind, value, err := scopeKey(sc)
	if err != nil {
		return 0, err
	}
	text, profile, err := canonicalSettings(doc)
	if err != nil {
		return 0, err
	}
	now := s.nowMicros()
	var version int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lockOrg(ctx, tx, org)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO settings (org_pk, scope, value, selects_profile, doc)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (org_pk, scope, value) DO UPDATE SET selects_profile = excluded.selects_profile, doc = excluded.doc`,
			pk, kind, value, profile, text); err != nil {
			return fmt.Errorf("orgstore: write settings: %w", err)
		}
		version, err = bumpVersion(ctx, tx, pk, now)
		return err
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// DeleteSettings deletes the organisation's document for sc, bumps the
// version and returns it; ErrSettingsNotFound (and no bump) when there is
// none.
func (s *Store) DeleteSettings(ctx context.Context, org string, sc settings.Scope) (int64, error) {
	defer s.cache.invalidate(org) // the cached views carry the version
	kind, value, err := scopeKey(sc)
	if err != nil {
		return 0, err
	}
	now := s.nowMicros()
	var version int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		pk, _, err := s.lockOrg(ctx, tx, org)
		if err != nil {
			return err
		}
		n, err := execAffected(ctx, tx, `DELETE FROM settings WHERE org_pk = $1 AND scope = $2 AND value = $3`,
			[]any{pk, kind, value})
		if err != nil {
			return fmt.Errorf("orgstore: delete settings: %w", err)
		}
		if n == 0 {
			return ErrSettingsNotFound
		}
		version, err = bumpVersion(ctx, tx, pk, now)
		return err
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// ListSettings returns the organisation's version and every settings
// document it has, in layer order: org, profiles by number, locations,
// usernames, device ids, each by value (byte order). One statement, hence
// one snapshot.
func (s *Store) ListSettings(ctx context.Context, org string) (int64, []ScopedSettings, error) {
	if identity.ValidateOrg(org) != nil {
		return 0, nil, ErrOrgNotFound
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT o.version, s.scope, s.value, s.doc FROM orgs o
		LEFT JOIN settings s ON s.org_pk = o.pk
		WHERE o.id = $1 ORDER BY s.scope, s.value`, org)
	if err != nil {
		return 0, nil, fmt.Errorf("orgstore: list settings: %w", err)
	}
	defer rows.Close()
	var (
		version int64
		found   bool
		out     []ScopedSettings
	)
	for rows.Next() {
		var (
			kind  sql.NullInt64
			value sql.NullString
			doc   []byte
		)
		if err := rows.Scan(&version, &kind, &value, &doc); err != nil {
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
		out = append(out, ScopedSettings{Scope: sc, Doc: doc})
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("orgstore: list settings: %w", err)
	}
	if !found {
		return 0, nil, ErrOrgNotFound
	}
	sortProfiles(out)
	return version, out, nil
}

// readOrgSettings reads every settings document of the organisation inside
// tx (ReadOverrides with WithSettings), in ListSettings' order.
func readOrgSettings(ctx context.Context, tx *sql.Tx, orgPK int64) ([]ScopedSettings, error) {
	rows, err := tx.QueryContext(ctx, `SELECT scope, value, doc FROM settings WHERE org_pk = $1 ORDER BY scope, value`, orgPK)
	if err != nil {
		return nil, fmt.Errorf("orgstore: read settings: %w", err)
	}
	defer rows.Close()
	return scanOrgSettings(rows.Next, rows.Scan, rows.Err)
}

// scanOrgSettings reads the rows of the settings query, whichever driver's
// rows (database/sql's or pgx's) next, scan and rowsErr belong to.
func scanOrgSettings(next func() bool, scan func(...any) error, rowsErr func() error) ([]ScopedSettings, error) {
	var out []ScopedSettings
	for next() {
		var (
			kind  int64
			value string
			doc   []byte
		)
		if err := scan(&kind, &value, &doc); err != nil {
			return nil, fmt.Errorf("orgstore: read settings: %w", err)
		}
		sc, err := scopeFromKey(kind, value)
		if err != nil {
			return nil, err
		}
		out = append(out, ScopedSettings{Scope: sc, Doc: doc})
	}
	if err := rowsErr(); err != nil {
		return nil, fmt.Errorf("orgstore: read settings: %w", err)
	}
	sortProfiles(out)
	return out, nil
}

// sortProfiles orders the profile documents of a list sorted by (scope,
// value) by number: their values are decimal text, where "10" sorts before
// "2".
func sortProfiles(list []ScopedSettings) {
	i := slices.IndexFunc(list, func(s ScopedSettings) bool { return s.Scope.Kind == settings.ScopeProfile })
	if i < 0 {
		return
	}
	j := i
	for j < len(list) && list[j].Scope.Kind == settings.ScopeProfile {
		j++
	}
	slices.SortFunc(list[i:j], func(a, b ScopedSettings) int { return cmp.Compare(a.Scope.Profile, b.Scope.Profile) })
}

// GlobalSettings returns the global document (nil when there is none) and
// the global version.
func (s *Store) GlobalSettings(ctx context.Context) (GlobalSettings, error) {
	var g GlobalSettings
	var doc []byte
	if err := s.reader.QueryRowContext(ctx, `SELECT version, doc FROM global_settings WHERE id = 1`).
		Scan(&g.Version, &doc); err != nil {
		return GlobalSettings{}, fmt.Errorf("orgstore: read global settings: %w", err)
	}
	g.Doc = doc
	return g, nil
}

// PutGlobalSettings stores doc as the global document, replacing the one
// there, and returns the new global version. No organisation's version
// changes.
func (s *Store) PutGlobalSettings(ctx context.Context, doc *settings.Document) (int64, error) {
	text, profile, err := canonicalSettings(doc)
	if err != nil {
		return 0, err
	}
	var v int64
	if err := s.write(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `UPDATE global_settings SET version = version + 1, selects_profile = $1, doc = $2
		WHERE id = 1 RETURNING version`, profile, text).Scan(&v)
	}); err != nil {
		return 0, fmt.Errorf("orgstore: write global settings: %w", err)
	}
	return v, nil
}

// DeleteGlobalSettings deletes the global document and returns the new
// global version; ErrSettingsNotFound (and no bump) when there is none.
func (s *Store) DeleteGlobalSettings(ctx context.Context) (int64, error) {
	var v int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `UPDATE global_settings SET version = version + 1, selects_profile = NULL, doc = NULL
		WHERE id = 1 AND doc IS NOT NULL RETURNING version`).Scan(&v)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrSettingsNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("orgstore: delete global settings: %w", err)
	}
	return v, nil
}

// LayerQuery names the subscriber whose layers ReadSettingsLayers reads.
type LayerQuery struct {
	// Attributes select the location, username and deviceid layers; ""
	// leaves a layer out.
	identity.Attributes
	// Profile, when HasProfile, is the profile asked for explicitly
	// (simulate's parameter); otherwise the layers' own profile fields name
	// the candidates.
	Profile    int
	HasProfile bool
}

// SettingsLayers is what the effective policy of one subscriber merges,
// read from one snapshot.
type SettingsLayers struct {
	// Version is the organisation's.
	Version int64
	// Global is the global document, nil when there is none.
	Global json.RawMessage
	// Docs holds, in ListSettings' order, those that exist of: the org
	// document; the location, username and deviceid documents of the
	// query's attributes; and the profile documents that can be the
	// profile layer — the query's Profile when HasProfile, else every
	// profile that the global, org, location, username or deviceid
	// document selects (which one applies, the most specific, is
	// settings.ProfileOf's to say).
	Docs []ScopedSettings
}

// ReadSettingsLayers reads the layers of one subscriber of the organisation
// (GET /org/{org}/settings/effective) in one read transaction: the global
// document, the organisation's version and the documents SettingsLayers
// describes. An attribute the store could not hold has no document and is
// left out; the caller validates its input first.
func (s *Store) ReadSettingsLayers(ctx context.Context, org string, q LayerQuery) (SettingsLayers, error) {
	if identity.ValidateOrg(org) != nil {
		return SettingsLayers{}, ErrOrgNotFound
	}
	if q.HasProfile && (q.Profile < 0 || q.Profile > settings.MaxProfile) {
		return SettingsLayers{}, fmt.Errorf("%w: profile must be a whole number from 0 to %d", ErrInvalidInput, settings.MaxProfile)
	}
	var out SettingsLayers
	err := s.read(ctx, func(tx *sql.Tx) error {
		var pk int64
		err := tx.QueryRowContext(ctx, `SELECT pk, version FROM orgs WHERE id = $1`, org).Scan(&pk, &out.Version)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrOrgNotFound
		}
		if err != nil {
			return fmt.Errorf("orgstore: read organisation: %w", err)
		}
		var (
			globalProfile sql.NullInt64
			globalDoc     []byte
			candidates    []int64
		)
		if err := tx.QueryRowContext(ctx, `SELECT selects_profile, doc FROM global_settings WHERE id = 1`).
			Scan(&globalProfile, &globalDoc); err != nil {
			return fmt.Errorf("orgstore: read global settings: %w", err)
		}
		out.Global = globalDoc
		if globalProfile.Valid {
			candidates = append(candidates, globalProfile.Int64)
		}
		// A value the store refuses cannot have a document: asking for it
		// would only hand PostgreSQL text it cannot take.
		attr := func(kind settings.ScopeKind, v string) string {
			if (settings.Scope{Kind: kind, Value: v}).Validate() != nil {
				return ""
			}
			return v
		}
		rows, err := tx.QueryContext(ctx, `SELECT scope, value, selects_profile, doc FROM settings
			WHERE org_pk = $1 AND (scope = 1 OR (scope = 3 AND value = $2) OR (scope = 4 AND value = $3) OR (scope = 5 AND value = $4))
			ORDER BY scope`, pk, attr(settings.ScopeLocation, q.Location), attr(settings.ScopeUsername, q.Username), attr(settings.ScopeDeviceID, q.DeviceID))
		if err != nil {
			return fmt.Errorf("orgstore: read settings: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				kind    int64
				value   string
				profile sql.NullInt64
				doc     []byte
			)
			if err := rows.Scan(&kind, &value, &profile, &doc); err != nil {
				return fmt.Errorf("orgstore: read settings: %w", err)
			}
			sc, err := scopeFromKey(kind, value)
			if err != nil {
				return err
			}
			out.Docs = append(out.Docs, ScopedSettings{Scope: sc, Doc: doc})
			if profile.Valid {
				candidates = append(candidates, profile.Int64)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("orgstore: read settings: %w", err)
		}
		if q.HasProfile {
			candidates = []int64{int64(q.Profile)}
		}
		slices.Sort(candidates)
		var profiles []ScopedSettings
		for _, n := range slices.Compact(candidates) {
			var doc []byte
			err := tx.QueryRowContext(ctx, `SELECT doc FROM settings WHERE org_pk = $1 AND scope = 2 AND value = $2`,
				pk, strconv.FormatInt(n, 10)).Scan(&doc)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("orgstore: read settings: %w", err)
			}
			profiles = append(profiles, ScopedSettings{Scope: settings.Scope{Kind: settings.ScopeProfile, Profile: int(n)}, Doc: doc})
		}
		// Layer order: org first, then the profiles, then the rest.
		i := 0
		if len(out.Docs) > 0 && out.Docs[0].Scope.Kind == settings.ScopeOrg {
			i = 1
		}
		out.Docs = slices.Insert(out.Docs, i, profiles...)
		return nil
	})
	if err != nil {
		return SettingsLayers{}, err
	}
	return out, nil
}
