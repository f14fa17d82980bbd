package store

import (
	"context"
	"errors"
)

func openPostgres(ctx context.Context, url string) (backend, error) {
	return nil, errors.New("activity store: PostgreSQL not yet available")
}
