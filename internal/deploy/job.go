package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// globalSlot is the scheduler's name for the global settings layer: an
// organisation id can never be empty (identity.ValidateOrg), so it never
// collides with an organisation.
const globalSlot = ""

// orgJob is what the scheduler runs for one organisation: one consistent
// read of the store, then each part publishes what it derives from it —
// the sessions (to the IP Mapper), then the settings documents (to the
// settings bucket) — so the kinds of one version go out together. A part
// that fails fails the job; the scheduler retries it whole, and every part
// is idempotent.
type orgJob struct {
	store    Store
	sessions *sessionDeploys
	settings *settingsDeploys // nil: settings are not published
	log      *slog.Logger
}

var _ job = (*orgJob)(nil)

func (j *orgJob) deploy(ctx context.Context, org string, full bool) (int64, bool, error) {
	if org == globalSlot {
		if j.settings == nil {
			return 0, false, nil
		}
		v, err := j.settings.deployGlobal(ctx)
		return v, false, err
	}
	detail := orgstore.Identity
	if j.settings != nil {
		detail |= orgstore.WithSettings
	}
	view, err := j.store.ReadOverrides(ctx, org, detail)
	if errors.Is(err, orgstore.ErrOrgNotFound) {
		return 0, true, j.cleanDeleted(ctx, org)
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", org, err)
	}
	if err := j.sessions.deploy(ctx, org, full, view); err != nil {
		return 0, false, err
	}
	if j.settings != nil {
		if err := j.settings.deploy(ctx, org, full, view); err != nil {
			return 0, false, err
		}
	}
	return view.Version, false, nil
}

// cleanDeleted removes everything a deleted organisation had deployed, then
// forgets the store's record of the delete. The record is read before the
// cleans, so a later delete of the same id (another record) stays pending.
func (j *orgJob) cleanDeleted(ctx context.Context, org string) error {
	rec, pending, err := j.store.DeletedOrg(ctx, org)
	if err != nil {
		return fmt.Errorf("read delete of %s: %w", org, err)
	}
	if err := j.sessions.clean(ctx, org); err != nil {
		return err
	}
	if j.settings != nil {
		if err := j.settings.clean(ctx, org); err != nil {
			return err
		}
	}
	if pending {
		if err := j.store.ForgetDeletedOrg(ctx, rec); err != nil {
			// The cleans are done; the next scan repeats them, which is harmless.
			j.log.Warn("forgetting a cleaned organisation failed", "org", org, "err", err)
		}
	}
	return nil
}
