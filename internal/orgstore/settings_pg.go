package orgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// pgReadOrgSettings is readOrgSettings inside pgReadView's native pgx
// transaction.
func pgReadOrgSettings(ctx context.Context, tx pgx.Tx, orgPK int64) ([]ScopedSettings, error) {
	rows, err := tx.Query(ctx, `SELECT scope, value, doc FROM settings WHERE org_pk = $1 ORDER BY scope, value`, orgPK)
	if err != nil {
		return nil, fmt.Errorf("orgstore: read settings: %w", err)
	}
	defer rows.Close()
	var out []ScopedSettings
	for rows.Next() {
		var (
			kind  int16
			value string
			doc   []byte
		)
		if err := rows.Scan(&kind, &value, &doc); err != nil {
			return nil, fmt.Errorf("orgstore: read settings: %w", err)
		}
		sc, err := scopeFromKey(int64(kind), value)
		if err != nil {
			return nil, err
		}
		out = append(out, ScopedSettings{Scope: sc, Doc: doc})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orgstore: read settings: %w", err)
	}
	sortProfiles(out)
	return out, nil
}
