package orgmanager

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// refusing is an IP Mapper that answers every publish with a refusal, so
// that deploys stay dirty for as long as a test reads them.
type refusing struct{}

func (refusing) Publish(context.Context, deploy.Diff) error {
	return errors.New("test: the IP Mapper refuses")
}

// TestDirtySinceAfterRestart: dirty_since of a version the deployer learnt
// of from the database, as docs/orgmanager.md states it — the write
// (updated_at) when it came after the process started (another instance's
// write), the start when the write is older (it predates the restart).
func TestDirtySinceAfterRestart(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		// The previous process wrote "old" an hour ago, then stopped.
		before := storetest.OpenConfig(t, orgstore.Config{URL: url, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		if _, err := before.PutOrg(ctx, "old"); err != nil {
			t.Fatal(err)
		}

		start := time.Now()
		h := newHarnessConfig(t, deploy.Config{Store: storetest.OpenConfig(t, orgstore.Config{URL: url}),
			Publisher: refusing{}, VersionCheckInterval: 20 * time.Millisecond})
		// Another instance writes "other" now, without telling this one:
		// its version scan finds it.
		other := storetest.OpenConfig(t, orgstore.Config{URL: url})
		if _, err := other.PutOrg(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		o, err := other.GetOrg(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}

		read := func(org string) time.Time {
			var rr rangesResponse
			h.must(200, "GET", "/org/"+org+"/effective-ranges", nil).decode(t, &rr)
			if !rr.Dirty {
				t.Fatalf("%s: not dirty: %+v", org, rr)
			}
			ts, err := time.Parse(time.RFC3339Nano, rr.DirtySince)
			if err != nil {
				t.Fatalf("%s: dirty_since %q: %v", org, rr.DirtySince, err)
			}
			return ts
		}
		// Read before and after the scans found them: the same answer.
		for range 2 {
			if got := read("old"); got.Before(start.Truncate(time.Microsecond)) || got.After(time.Now()) {
				t.Errorf("old: dirty_since %s, want the restart (%s), not the write an hour ago", got, start)
			}
			if got := read("other"); !got.Equal(o.UpdatedAt) {
				t.Errorf("other: dirty_since %s, want its write %s", got, o.UpdatedAt)
			}
			time.Sleep(100 * time.Millisecond) // several version scans
		}
	})
}
