package orgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

func TestUpdatePrefixes(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		if _, err := s.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8"), nil); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("UpdatePrefixes(missing org) err = %v, want ErrOrgNotFound", err)
		}
		if _, _, err := s.Prefixes(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("Prefixes(missing org) err = %v, want ErrOrgNotFound", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))

		v, ps, err := s.Prefixes(ctx, "acme")
		if err != nil || v != 1 || len(ps) != 0 {
			t.Fatalf("Prefixes(empty org) = %d, %v, %v", v, ps, err)
		}

		steps := []struct {
			name        string
			add, remove []netip.Prefix
			wantVersion int64
			want        []netip.Prefix
		}{
			{"add both families, unsorted, with duplicates",
				pfxs("2001:db8::/32", "192.168.0.0/16", "10.0.0.0/8", "10.0.0.0/8", "10.0.0.0/16", "::ffff:10.0.0.0/104"), nil, 2,
				pfxs("10.0.0.0/8", "10.0.0.0/16", "192.168.0.0/16", "::ffff:10.0.0.0/104", "2001:db8::/32")},
			{"adding owned prefixes is a no-op", pfxs("10.0.0.0/8"), nil, 2,
				pfxs("10.0.0.0/8", "10.0.0.0/16", "192.168.0.0/16", "::ffff:10.0.0.0/104", "2001:db8::/32")},
			{"removing unowned prefixes is a no-op", nil, pfxs("172.16.0.0/12", "10.0.0.0/9"), 2,
				pfxs("10.0.0.0/8", "10.0.0.0/16", "192.168.0.0/16", "::ffff:10.0.0.0/104", "2001:db8::/32")},
			{"empty update is a no-op", nil, nil, 2,
				pfxs("10.0.0.0/8", "10.0.0.0/16", "192.168.0.0/16", "::ffff:10.0.0.0/104", "2001:db8::/32")},
			{"remove and add in one call bump once", pfxs("172.16.0.0/12"), pfxs("10.0.0.0/16", "2001:db8::/32"), 3,
				pfxs("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::ffff:10.0.0.0/104")},
			{"removes run before adds", pfxs("10.0.0.0/8"), pfxs("10.0.0.0/8"), 4,
				pfxs("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::ffff:10.0.0.0/104")},
			{"host routes and default routes", pfxs("0.0.0.0/0", "::/0", "1.2.3.4/32", "2001:db8::1/128"), nil, 5,
				pfxs("0.0.0.0/0", "1.2.3.4/32", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::/0", "::ffff:10.0.0.0/104", "2001:db8::1/128")},
		}
		for _, st := range steps {
			got, err := s.UpdatePrefixes(ctx, "acme", st.add, st.remove)
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if got != st.wantVersion {
				t.Fatalf("%s: version = %d, want %d", st.name, got, st.wantVersion)
			}
			v, ps := must2(t)(s.Prefixes(ctx, "acme"))
			if v != st.wantVersion || !slices.Equal(ps, st.want) {
				t.Fatalf("%s: Prefixes = %d %v, want %d %v", st.name, v, ps, st.wantVersion, st.want)
			}
		}

		for _, bad := range []netip.Prefix{pfx("10.0.0.1/8"), {}} {
			if _, err := s.UpdatePrefixes(ctx, "acme", []netip.Prefix{bad}, nil); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("add %v: err = %v, want ErrInvalidInput", bad, err)
			}
			if _, err := s.UpdatePrefixes(ctx, "acme", nil, []netip.Prefix{bad}); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("remove %v: err = %v, want ErrInvalidInput", bad, err)
			}
		}
		wantVersion(t, s, "acme", 5)
	})
}

func TestPrefixOverlapAcrossOrgs(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		for _, org := range []string{"alpha", "beta"} {
			must[int64](t)(s.PutOrg(ctx, org))
		}
		must[int64](t)(s.UpdatePrefixes(ctx, "alpha", pfxs("10.0.0.0/8", "10.20.0.0/16", "2001:db8::/32", "192.0.2.128/25"), nil))

		conflicts := []struct {
			add, existing string
		}{
			{"10.0.0.0/8", "10.0.0.0/8"},         // equal
			{"10.1.0.0/16", "10.0.0.0/8"},        // contained
			{"10.20.30.0/24", ""},                // contained in both of alpha's nested prefixes
			{"8.0.0.0/6", "10.0.0.0/8"},          // contains
			{"0.0.0.0/0", ""},                    // contains everything
			{"10.255.255.255/32", "10.0.0.0/8"},  // last address
			{"192.0.2.0/24", "192.0.2.128/25"},   // contains, starting before it
			{"192.0.2.255/32", "192.0.2.128/25"}, // last address
			{"2001:db8:1::/48", "2001:db8::/32"}, // IPv6 contained
			{"2000::/3", "2001:db8::/32"},        // IPv6 contains
			{"::/0", "2001:db8::/32"},
		}
		for _, c := range conflicts {
			_, err := s.UpdatePrefixes(ctx, "beta", pfxs("11.0.0.0/8", c.add), nil)
			var oe *orgstore.OverlapError
			if !errors.As(err, &oe) {
				t.Fatalf("beta adds %s: err = %v, want *OverlapError", c.add, err)
			}
			if oe.CIDR != pfx(c.add) || oe.Org != "alpha" || !oe.Existing.Overlaps(oe.CIDR) {
				t.Fatalf("beta adds %s: OverlapError = %+v", c.add, *oe)
			}
			if c.existing != "" && oe.Existing != pfx(c.existing) {
				t.Fatalf("beta adds %s: Existing = %s, want %s", c.add, oe.Existing, c.existing)
			}
			if msg := err.Error(); strings.Contains(msg, "alpha") || !strings.Contains(msg, c.add) {
				t.Fatalf("error message %q must name the prefix and not the other organisation", msg)
			}
		}
		// Nothing of a refused update is applied.
		if v, ps := must2(t)(s.Prefixes(ctx, "beta")); v != 1 || len(ps) != 0 {
			t.Fatalf("after refused updates beta has %d %v, want version 1 and no prefix", v, ps)
		}

		// Neighbours, the other family and the same organisation are fine.
		ok := pfxs("11.0.0.0/8", "9.255.255.255/32", "192.0.2.0/25", "::ffff:10.0.0.0/104", "2001:db9::/32", "10.0.0.0/7")
		if _, err := s.UpdatePrefixes(ctx, "beta", ok[:5], nil); err != nil {
			t.Fatalf("beta adds non-overlapping prefixes: %v", err)
		}
		if _, err := s.UpdatePrefixes(ctx, "alpha", pfxs("10.0.0.0/7", "10.20.30.0/24"), nil); err == nil {
			t.Fatalf("alpha adds 10.0.0.0/7, which overlaps beta's 11.0.0.0/8: want an error")
		}
		if _, err := s.UpdatePrefixes(ctx, "alpha", pfxs("10.20.30.0/24"), nil); err != nil {
			t.Fatalf("overlap within one organisation must be allowed: %v", err)
		}

		// Once alpha lets go of its prefixes, beta may take them.
		must[int64](t)(s.UpdatePrefixes(ctx, "alpha", nil, pfxs("10.0.0.0/8", "10.20.0.0/16", "10.20.30.0/24")))
		if _, err := s.UpdatePrefixes(ctx, "beta", pfxs("10.1.0.0/16"), nil); err != nil {
			t.Fatalf("beta adds a prefix alpha removed: %v", err)
		}
	})
}

func TestPrefixRace(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		const orgs = 24
		for i := range orgs {
			must[int64](t)(s.PutOrg(ctx, fmt.Sprintf("org%02d", i)))
		}

		// Each round, every organisation races to add one prefix; all of
		// them overlap (nested or equal), so exactly one may win.
		rounds := []func(i int) []netip.Prefix{
			func(i int) []netip.Prefix { return pfxs("100.64.0.0/10") },
			func(i int) []netip.Prefix {
				return []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), 8+i)}
			},
			func(i int) []netip.Prefix {
				return []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("2001:db8::"), 32+4*i)}
			},
			func(i int) []netip.Prefix {
				// Disjoint padding plus one contested prefix.
				own := netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16, byte(i), 0}), 24)
				return []netip.Prefix{own, netip.PrefixFrom(netip.MustParseAddr("198.18.0.0"), 15+i%8).Masked()}
			},
		}
		for r, add := range rounds {
			var (
				wg       sync.WaitGroup
				start    = make(chan struct{})
				mu       sync.Mutex
				winners  []int
				overlaps int
			)
			for i := range orgs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, err := s.UpdatePrefixes(ctx, fmt.Sprintf("org%02d", i), add(i), nil)
					var oe *orgstore.OverlapError
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						winners = append(winners, i)
					case errors.As(err, &oe):
						overlaps++
					default:
						t.Errorf("round %d org%02d: unexpected error %v", r, i, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if len(winners) != 1 || overlaps != orgs-1 {
				t.Fatalf("round %d: winners %v, %d overlap errors; want exactly one winner", r, winners, overlaps)
			}
		}
		assertNoCrossOrgOverlap(t, s)

		// Free-for-all: random-looking prefixes from a small space.
		var wg sync.WaitGroup
		for i := range orgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				org := fmt.Sprintf("org%02d", i)
				for j := range 20 {
					n := (i*7919 + j*104729) % 4096
					bits := 12 + n%13
					a := netip.AddrFrom4([4]byte{44, byte(n >> 4), byte(n << 4), 0})
					p, _ := a.Prefix(bits)
					_, err := s.UpdatePrefixes(ctx, org, []netip.Prefix{p}, nil)
					var oe *orgstore.OverlapError
					if err != nil && !errors.As(err, &oe) {
						t.Errorf("%s adds %s: %v", org, p, err)
					}
				}
			}()
		}
		wg.Wait()
		assertNoCrossOrgOverlap(t, s)
	})
}

func assertNoCrossOrgOverlap(t *testing.T, s *orgstore.Store) {
	t.Helper()
	ctx := context.Background()
	type owned struct {
		org string
		p   netip.Prefix
	}
	var all []owned
	for _, o := range must[[]orgstore.OrgVersion](t)(s.OrgVersions(ctx)) {
		_, ps := must2(t)(s.Prefixes(ctx, o.ID))
		for _, p := range ps {
			all = append(all, owned{o.ID, p})
		}
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[i].org != all[j].org && all[i].p.Overlaps(all[j].p) {
				t.Fatalf("%s's %s overlaps %s's %s", all[i].org, all[i].p, all[j].org, all[j].p)
			}
		}
	}
}
