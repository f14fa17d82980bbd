package orgstore_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestConsistentViews checks that a view never mixes snapshots: every write
// adds one override and bumps the version by one, so a consistent view has
// exactly version-1 overrides.
func TestConsistentViews(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		const writes = 150
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					v, err := s.ReadOverrides(ctx, "acme", orgstore.CIDROnly)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("ReadOverrides: %v", err)
						}
						return
					}
					if int64(len(v.Overrides)) != v.Version-1 {
						t.Errorf("inconsistent view: version %d with %d overrides", v.Version, len(v.Overrides))
						return
					}
				}
			}()
		}
		for i := range writes {
			c := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 0}), 24)
			if _, err := s.PutOverride(ctx, "acme", orgstore.Override{CIDR: c}); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		wg.Wait()
	})
}
