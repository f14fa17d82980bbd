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
	return scanOrgSettings(rows.Next, rows.Scan, rows.Err)
}
