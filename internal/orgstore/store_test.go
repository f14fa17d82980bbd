package orgstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// clock is a hand-set clock for timestamp assertions.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	// Nanoseconds on purpose: the store keeps microseconds.
	return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("X", 3600))}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openClocked(t *testing.T, dialect string) (*orgstore.Store, *clock) {
	clk := newClock()
	s := storetest.OpenConfig(t, orgstore.Config{URL: storetest.URL(t, dialect), Now: clk.Now})
	return s, clk
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func pfxs(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = pfx(s)
	}
	return out
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantVersion(t *testing.T, s *orgstore.Store, org string, want int64) {
	t.Helper()
	o, err := s.GetOrg(context.Background(), org)
	if err != nil {
		t.Fatalf("GetOrg(%q): %v", org, err)
	}
	if o.Version != want {
		t.Fatalf("org %q version = %d, want %d", org, o.Version, want)
	}
}

func TestOpenAndPing(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		s := open(t)
		if err := s.Ping(context.Background()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		if got := s.Dialect(); got != t.Name()[strings.LastIndexByte(t.Name(), '/')+1:] {
			t.Fatalf("Dialect() = %q in subtest %s", got, t.Name())
		}
	})
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{"", "mysql://x", "sqlite:", "sqlite::memory:", "sqlite:a.db?mode=memory", "postgres:nohost", "postgres://%zz"} {
		if s, err := orgstore.Open(ctx, orgstore.Config{URL: url}); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", url)
		}
	}
	// A password never shows up in the error.
	_, err := orgstore.Open(ctx, orgstore.Config{URL: "postgres://u:sekrit@127.0.0.1:1/db?sslmode=disable&connect_timeout=1"})
	if err == nil || strings.Contains(err.Error(), "sekrit") {
		t.Fatalf("Open with unreachable postgres: err = %v, want an error without the password", err)
	}
}

func TestOrgLifecycle(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, clk := openClocked(t, dialect)
		t0 := clk.Now().UTC().Truncate(time.Microsecond)

		if _, err := s.GetOrg(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("GetOrg(missing) err = %v, want ErrOrgNotFound", err)
		}
		if v := must[int64](t)(s.PutOrg(ctx, "acme")); v != 1 {
			t.Fatalf("PutOrg(new) = %d, want 1", v)
		}
		clk.Advance(time.Second)
		if v := must[int64](t)(s.PutOrg(ctx, "acme")); v != 2 {
			t.Fatalf("PutOrg(existing) = %d, want 2", v)
		}
		o := must[orgstore.Org](t)(s.GetOrg(ctx, "acme"))
		want := orgstore.Org{ID: "acme", Version: 2, CreatedAt: t0, UpdatedAt: t0.Add(time.Second)}
		if o != want {
			t.Fatalf("GetOrg = %+v, want %+v", o, want)
		}
		if o.CreatedAt.Location() != time.UTC {
			t.Fatalf("CreatedAt location = %v, want UTC", o.CreatedAt.Location())
		}

		for _, id := range []string{"zeta", "Beta", "beta", "a/b c", "ünïcode"} {
			must[int64](t)(s.PutOrg(ctx, id))
		}
		got := must[[]orgstore.OrgVersion](t)(s.ListOrgs(ctx))
		wantList := []orgstore.OrgVersion{{"Beta", 1}, {"a/b c", 1}, {"acme", 2}, {"beta", 1}, {"zeta", 1}, {"ünïcode", 1}}
		if !slices.Equal(got, wantList) {
			t.Fatalf("ListOrgs = %v, want %v (byte order)", got, wantList)
		}

		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatalf("DeleteOrg: %v", err)
		}
		if err := s.DeleteOrg(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("DeleteOrg(again) err = %v, want ErrOrgNotFound", err)
		}
		if _, err := s.GetOrg(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("GetOrg(deleted) err = %v, want ErrOrgNotFound", err)
		}
		if v := must[int64](t)(s.PutOrg(ctx, "acme")); v != 1 {
			t.Fatalf("PutOrg(recreated) = %d, want 1", v)
		}
	})
}

func TestOrgIDValidation(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		for _, id := range []string{"", strings.Repeat("x", 256), "nul\x00byte", "bad\xffutf8"} {
			if _, err := s.PutOrg(ctx, id); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("PutOrg(%q) err = %v, want ErrInvalidInput", id, err)
			}
			// Ids the store cannot hold do not exist.
			if _, err := s.GetOrg(ctx, id); !errors.Is(err, orgstore.ErrOrgNotFound) {
				t.Errorf("GetOrg(%q) err = %v, want ErrOrgNotFound", id, err)
			}
			if _, err := s.ReadOverrides(ctx, id, orgstore.Full); !errors.Is(err, orgstore.ErrOrgNotFound) {
				t.Errorf("ReadOverrides(%q) err = %v, want ErrOrgNotFound", id, err)
			}
		}
		long := strings.Repeat("é", 127) + "x" // 255 bytes
		if v, err := s.PutOrg(ctx, long); err != nil || v != 1 {
			t.Fatalf("PutOrg(255 bytes) = %d, %v", v, err)
		}
	})
}

func TestNextRevision(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		if _, err := s.NextRevision(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("NextRevision(missing) err = %v, want ErrOrgNotFound", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.PutOrg(ctx, "other"))
		for want := int64(1); want <= 3; want++ {
			if got := must[int64](t)(s.NextRevision(ctx, "acme")); got != want {
				t.Fatalf("NextRevision = %d, want %d", got, want)
			}
		}
		if got := must[int64](t)(s.NextRevision(ctx, "other")); got != 1 {
			t.Fatalf("NextRevision(other) = %d, want 1 (per organisation)", got)
		}
		wantVersion(t, s, "acme", 1)
	})
}

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

func must2(t *testing.T) func(int64, []netip.Prefix, error) (int64, []netip.Prefix) {
	return func(v int64, ps []netip.Prefix, err error) (int64, []netip.Prefix) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v, ps
	}
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
	for _, o := range must[[]orgstore.OrgVersion](t)(s.ListOrgs(ctx)) {
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

func TestOverrides(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, clk := openClocked(t, dialect)
		t0 := clk.Now().UTC().Truncate(time.Microsecond)
		if _, err := s.PutOverride(ctx, "acme", orgstore.Override{CIDR: pfx("10.0.0.0/24")}); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("PutOverride(missing org) err = %v", err)
		}
		if _, err := s.DeleteOverride(ctx, "acme", pfx("10.0.0.0/24")); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("DeleteOverride(missing org) err = %v", err)
		}
		if _, err := s.ReadOverride(ctx, "acme", pfx("10.0.0.0/24")); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ReadOverride(missing org) err = %v", err)
		}
		if _, err := s.ReadOverrides(ctx, "acme", orgstore.Full); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ReadOverrides(missing org) err = %v", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8", "2001:db8::/32"), nil)) // v2

		if _, err := s.ReadOverride(ctx, "acme", pfx("10.0.0.0/24")); !errors.Is(err, orgstore.ErrOverrideNotFound) {
			t.Fatalf("ReadOverride(missing) err = %v, want ErrOverrideNotFound", err)
		}
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Full))
		if view.Version != 2 || len(view.Overrides) != 0 || !slices.Equal(view.Prefixes, pfxs("10.0.0.0/8", "2001:db8::/32")) {
			t.Fatalf("ReadOverrides(no overrides) = %+v", view)
		}

		first := orgstore.Override{
			CIDR: pfx("10.1.0.0/16"), Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:00:11:22:33:44:55", Location: "hq"},
			Meta:    json.RawMessage(`{ "trace_id" : "t-1", "x_team": {"a": [1, 2]} }`),
			TraceID: "ignored: derived from meta",
		}
		if v := must[int64](t)(s.PutOverride(ctx, "acme", first)); v != 3 {
			t.Fatalf("PutOverride = %d, want 3", v)
		}
		got := must[orgstore.View](t)(s.ReadOverride(ctx, "acme", first.CIDR))
		want := orgstore.Override{
			CIDR: first.CIDR, Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:00:11:22:33:44:55", Location: "hq"},
			Meta: json.RawMessage(`{"trace_id":"t-1","x_team":{"a":[1,2]}}`), TraceID: "t-1",
			CTime: t0, MTime: t0,
		}
		if got.Version != 3 || len(got.Overrides) != 1 || !equalOverride(got.Overrides[0], want) {
			t.Fatalf("ReadOverride = %+v, want version 3 and %+v", got, want)
		}
		if !slices.Equal(got.Prefixes, pfxs("10.0.0.0/8", "2001:db8::/32")) {
			t.Fatalf("ReadOverride prefixes = %v", got.Prefixes)
		}

		// Overwrite replaces everything, keeps CTime, moves MTime.
		clk.Advance(90 * time.Second)
		if v := must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Location: "branch"}})); v != 4 {
			t.Fatalf("PutOverride(overwrite) = %d, want 4", v)
		}
		got = must[orgstore.View](t)(s.ReadOverride(ctx, "acme", first.CIDR))
		want = orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Location: "branch"}, CTime: t0, MTime: t0.Add(90 * time.Second)}
		if !equalOverride(got.Overrides[0], want) {
			t.Fatalf("after overwrite: %+v, want %+v", got.Overrides[0], want)
		}
		// Even an identical overwrite bumps the version.
		if v := must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Location: "branch"}})); v != 5 {
			t.Fatalf("PutOverride(identical) = %d, want 5", v)
		}

		// An override outside the prefixes is stored like any other; order
		// is IPv4 first, then address, then length.
		for _, c := range []string{"2001:db8::/48", "10.1.0.0/24", "192.168.1.0/24", "10.1.0.0/17", "::/0", "0.0.0.0/0", "10.0.0.0/8", "2001:db8::1/128"} {
			must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: pfx(c), Attributes: identity.Attributes{Username: "u-" + c}}))
		}
		wantOrder := pfxs("0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16", "10.1.0.0/17", "10.1.0.0/24", "192.168.1.0/24", "::/0", "2001:db8::/48", "2001:db8::1/128")
		for _, d := range []orgstore.Detail{orgstore.CIDROnly, orgstore.Identity, orgstore.Full} {
			view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", d))
			if view.Version != 13 {
				t.Fatalf("detail %d: version %d, want 13", d, view.Version)
			}
			var cidrs []netip.Prefix
			for _, o := range view.Overrides {
				cidrs = append(cidrs, o.CIDR)
				switch {
				case d == orgstore.CIDROnly && (o.Username != "" || o.Location != "" || !o.MTime.IsZero()):
					t.Fatalf("CIDROnly filled more than the CIDR: %+v", o)
				case d == orgstore.Identity && o.CIDR != first.CIDR && o.Username != "u-"+o.CIDR.String():
					t.Fatalf("Identity: %+v", o)
				case d == orgstore.Identity && (!o.MTime.IsZero() || o.Meta != nil):
					t.Fatalf("Identity filled times or meta: %+v", o)
				case d == orgstore.Full && (o.MTime.IsZero() || o.CTime.IsZero() || o.MTime.Location() != time.UTC):
					t.Fatalf("Full: times missing or not UTC: %+v", o)
				}
			}
			if !slices.Equal(cidrs, wantOrder) {
				t.Fatalf("detail %d: order %v, want %v", d, cidrs, wantOrder)
			}
		}

		// Delete bumps only when something was deleted.
		if v := must[int64](t)(s.DeleteOverride(ctx, "acme", pfx("10.1.0.0/24"))); v != 14 {
			t.Fatalf("DeleteOverride = %d, want 14", v)
		}
		if v := must[int64](t)(s.DeleteOverride(ctx, "acme", pfx("10.1.0.0/24"))); v != 14 {
			t.Fatalf("DeleteOverride(absent) = %d, want 14 (no bump)", v)
		}
		if _, err := s.ReadOverride(ctx, "acme", pfx("10.1.0.0/24")); !errors.Is(err, orgstore.ErrOverrideNotFound) {
			t.Fatalf("ReadOverride(deleted) err = %v", err)
		}
		if _, err := s.DeleteOverride(ctx, "acme", pfx("10.1.0.1/24")); !errors.Is(err, orgstore.ErrInvalidInput) {
			t.Fatalf("DeleteOverride(host bits) err = %v, want ErrInvalidInput", err)
		}
		if _, err := s.ReadOverride(ctx, "acme", netip.Prefix{}); !errors.Is(err, orgstore.ErrInvalidInput) {
			t.Fatalf("ReadOverride(invalid) err = %v, want ErrInvalidInput", err)
		}
		// Overrides are per organisation: the same CIDR elsewhere is separate.
		must[int64](t)(s.PutOrg(ctx, "other"))
		must[int64](t)(s.PutOverride(ctx, "other", orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Username: "bob"}}))
		if o := must[orgstore.View](t)(s.ReadOverride(ctx, "acme", first.CIDR)).Overrides[0]; o.Location != "branch" || o.Username != "" {
			t.Fatalf("acme's override changed by other's write: %+v", o)
		}
	})
}

func equalOverride(a, b orgstore.Override) bool {
	return a.CIDR == b.CIDR && a.Username == b.Username && a.DeviceID == b.DeviceID && a.Location == b.Location &&
		string(a.Meta) == string(b.Meta) && (a.Meta == nil) == (b.Meta == nil) && a.TraceID == b.TraceID &&
		a.CTime.Equal(b.CTime) && a.MTime.Equal(b.MTime)
}

func TestOverrideValidation(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		c := pfx("10.0.0.0/24")
		bad := []orgstore.Override{
			{CIDR: pfx("10.0.0.1/24")},
			{},
			{CIDR: c, Meta: json.RawMessage(`[1,2]`)},
			{CIDR: c, Meta: json.RawMessage(`"x"`)},
			{CIDR: c, Meta: json.RawMessage(`null`)},
			{CIDR: c, Meta: json.RawMessage(`{"a":`)},
			{CIDR: c, Meta: json.RawMessage(`{} {}`)},
			{CIDR: c, Meta: json.RawMessage("{\"a\":\"\xff\"}")},
			{CIDR: c, Meta: json.RawMessage(`{"trace_id":"a\u0000b"}`)},
			{CIDR: c, Attributes: identity.Attributes{Username: "nul\x00"}},
			{CIDR: c, Attributes: identity.Attributes{DeviceID: "\xfe"}},
			{CIDR: c, Attributes: identity.Attributes{Location: "x\x00"}},
		}
		for _, o := range bad {
			if _, err := s.PutOverride(ctx, "acme", o); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("PutOverride(%+v) err = %v, want ErrInvalidInput", o, err)
			}
		}
		wantVersion(t, s, "acme", 1)

		// NUL inside meta is fine as an escape; unicode survives.
		ok := orgstore.Override{CIDR: c, Attributes: identity.Attributes{Username: "ünï"}, Meta: json.RawMessage(`{"x_k":"a\u0000b","trace_id":5}`)}
		must[int64](t)(s.PutOverride(ctx, "acme", ok))
		got := must[orgstore.View](t)(s.ReadOverride(ctx, "acme", c)).Overrides[0]
		if got.Username != "ünï" || string(got.Meta) != `{"x_k":"a\u0000b","trace_id":5}` || got.TraceID != "" {
			t.Fatalf("round trip: %+v", got)
		}
	})
}

func TestApplyBatch(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, clk := openClocked(t, dialect)
		t0 := clk.Now().UTC().Truncate(time.Microsecond)
		if _, err := s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{{Override: orgstore.Override{CIDR: pfx("10.0.0.0/8")}}}); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ApplyBatch(missing org) err = %v", err)
		}
		if _, err := s.ApplyBatch(ctx, "acme", nil); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ApplyBatch(missing org, empty) err = %v", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		if v := must[int64](t)(s.ApplyBatch(ctx, "acme", nil)); v != 1 {
			t.Fatalf("empty batch = %d, want 1 (no bump)", v)
		}
		up := func(c, user string) orgstore.BatchOp {
			return orgstore.BatchOp{Override: orgstore.Override{CIDR: pfx(c), Attributes: identity.Attributes{Username: user}, Meta: json.RawMessage(`{"trace_id":"` + user + `"}`)}}
		}
		del := func(c string) orgstore.BatchOp {
			return orgstore.BatchOp{Delete: true, Override: orgstore.Override{CIDR: pfx(c)}}
		}
		// Existing rows for the re-create and keep-ctime cases.
		must[int64](t)(s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{up("10.0.1.0/24", "old"), up("10.0.2.0/24", "old"), up("10.0.3.0/24", "old")}))
		clk.Advance(time.Minute)
		t1 := t0.Add(time.Minute)

		v := must[int64](t)(s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{
			up("10.9.0.0/24", "a"), del("10.9.0.0/24"), // upsert then delete: absent
			del("10.9.1.0/24"), up("10.9.1.0/24", "b"), // delete then upsert: present
			up("10.9.2.0/24", "c1"), up("10.9.2.0/24", "c2"), // last upsert wins
			del("10.0.1.0/24"),                                 // delete of an existing row
			del("10.0.2.0/24"), up("10.0.2.0/24", "recreated"), // re-created: new ctime
			up("10.0.3.0/24", "overwritten"), // overwrite: ctime kept
			del("2001:db8::/64"),             // delete of nothing
			up("2001:db8::/64", "v6"), del("2001:db8::/64"), up("2001:db8::/64", "v6b"),
		}))
		if v != 3 {
			t.Fatalf("batch version = %d, want 3 (one bump per batch)", v)
		}
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Full))
		type row struct {
			cidr, user, trace string
			ctime             time.Time
		}
		var got []row
		for _, o := range view.Overrides {
			got = append(got, row{o.CIDR.String(), o.Username, o.TraceID, o.CTime})
		}
		want := []row{
			{"10.0.2.0/24", "recreated", "recreated", t1},
			{"10.0.3.0/24", "overwritten", "overwritten", t0},
			{"10.9.1.0/24", "b", "b", t1},
			{"10.9.2.0/24", "c2", "c2", t1},
			{"2001:db8::/64", "v6b", "v6b", t1},
		}
		if len(got) != len(want) {
			t.Fatalf("after batch: %v, want %v", got, want)
		}
		for i := range want {
			if got[i].cidr != want[i].cidr || got[i].user != want[i].user || got[i].trace != want[i].trace || !got[i].ctime.Equal(want[i].ctime) {
				t.Fatalf("after batch row %d: %v, want %v", i, got[i], want[i])
			}
			if !view.Overrides[i].MTime.Equal(t1) {
				t.Fatalf("row %s: MTime %v, want %v", got[i].cidr, view.Overrides[i].MTime, t1)
			}
		}

		// An invalid op anywhere fails the whole batch.
		_, err := s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{up("10.50.0.0/16", "x"), {Override: orgstore.Override{CIDR: pfx("10.9.1.0/24"), Meta: json.RawMessage(`[]`)}}})
		if !errors.Is(err, orgstore.ErrInvalidInput) || !strings.Contains(err.Error(), "item 1") {
			t.Fatalf("invalid batch err = %v, want ErrInvalidInput naming item 1", err)
		}
		wantVersion(t, s, "acme", 3)
		if _, err := s.ReadOverride(ctx, "acme", pfx("10.50.0.0/16")); !errors.Is(err, orgstore.ErrOverrideNotFound) {
			t.Fatalf("op of a refused batch was applied: %v", err)
		}

		// Large batches cross the statement chunk size.
		var ops []orgstore.BatchOp
		for i := range 2500 {
			ops = append(ops, up(netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + byte(i>>8), byte(i), 0}), 24).String(), fmt.Sprint(i)))
		}
		for i := range 1200 {
			ops = append(ops, del(netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + byte(i>>8), byte(i), 0}), 24).String()))
		}
		if v := must[int64](t)(s.ApplyBatch(ctx, "acme", ops)); v != 4 {
			t.Fatalf("large batch version = %d, want 4", v)
		}
		view = must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Identity))
		if len(view.Overrides) != 5+1300 {
			t.Fatalf("after large batch: %d overrides, want %d", len(view.Overrides), 5+1300)
		}
	})
}

func TestDeletedOrgsArePendingUntilForgotten(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		for _, org := range []string{"acme", "keep"} {
			must[int64](t)(s.PutOrg(ctx, org))
		}
		must[int64](t)(s.NextRevision(ctx, "acme"))
		must[int64](t)(s.NextRevision(ctx, "acme"))
		if _, ok, err := s.DeletedOrg(ctx, "acme"); ok || err != nil {
			t.Fatalf("DeletedOrg before the delete: %v %v", ok, err)
		}
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		first, ok, err := s.DeletedOrg(ctx, "acme")
		if !ok || err != nil || first.ID != "acme" || first.Revision != 2 {
			t.Fatalf("DeletedOrg = %+v %v %v, want acme at revision 2", first, ok, err)
		}
		if list := must[[]orgstore.DeletedOrg](t)(s.DeletedOrgs(ctx)); len(list) != 1 || list[0] != first {
			t.Fatalf("DeletedOrgs = %+v", list)
		}
		// Re-created, deployed and deleted again before the first clean was
		// forgotten: forgetting the first record keeps the second.
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.NextRevision(ctx, "acme"))
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if err := s.ForgetDeletedOrg(ctx, first); err != nil {
			t.Fatal(err)
		}
		second, ok, err := s.DeletedOrg(ctx, "acme")
		if !ok || err != nil || second.Revision != 3 {
			t.Fatalf("second delete = %+v %v %v, want pending at revision 3", second, ok, err)
		}
		if err := s.ForgetDeletedOrg(ctx, second); err != nil {
			t.Fatal(err)
		}
		if list := must[[]orgstore.DeletedOrg](t)(s.DeletedOrgs(ctx)); len(list) != 0 {
			t.Fatalf("DeletedOrgs after forgetting = %+v", list)
		}
	})
}

func TestDeleteOrgRemovesEverything(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		for _, org := range []string{"acme", "keep"} {
			must[int64](t)(s.PutOrg(ctx, org))
		}
		must[int64](t)(s.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8", "2001:db8::/32"), nil))
		must[int64](t)(s.UpdatePrefixes(ctx, "keep", pfxs("11.0.0.0/8"), nil))
		for _, org := range []string{"acme", "keep"} {
			must[int64](t)(s.ApplyBatch(ctx, org, []orgstore.BatchOp{
				{Override: orgstore.Override{CIDR: pfx("10.1.0.0/16"), Attributes: identity.Attributes{Username: org}}},
				{Override: orgstore.Override{CIDR: pfx("2001:db8::/64"), Meta: json.RawMessage(`{}`)}},
			}))
		}
		must[int64](t)(s.NextRevision(ctx, "acme"))
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		// The prefixes are free again, for anyone.
		if _, err := s.UpdatePrefixes(ctx, "keep", pfxs("10.0.0.0/8", "2001:db8::/32"), nil); err != nil {
			t.Fatalf("prefixes of a deleted organisation are still taken: %v", err)
		}
		must[int64](t)(s.UpdatePrefixes(ctx, "keep", nil, pfxs("10.0.0.0/8", "2001:db8::/32")))
		must[int64](t)(s.PutOrg(ctx, "acme"))
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Full))
		if view.Version != 1 || len(view.Prefixes) != 0 || len(view.Overrides) != 0 {
			t.Fatalf("re-created organisation inherited data: %+v", view)
		}
		// The deploy revisions continue: the deleted organisation was at 1.
		if rev := must[int64](t)(s.NextRevision(ctx, "acme")); rev != 2 {
			t.Fatalf("re-created organisation's revision = %d, want 2", rev)
		}
		if pending := must[[]orgstore.DeletedOrg](t)(s.DeletedOrgs(ctx)); len(pending) != 0 {
			t.Fatalf("re-creating the organisation left its delete pending: %+v", pending)
		}
		keep := must[orgstore.View](t)(s.ReadOverrides(ctx, "keep", orgstore.Identity))
		if len(keep.Overrides) != 2 || keep.Overrides[0].Username != "keep" || !slices.Equal(keep.Prefixes, pfxs("11.0.0.0/8")) {
			t.Fatalf("other organisation changed: %+v", keep)
		}
	})
}

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

func TestReopenKeepsDataAndMigrationsAreIdempotent(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s1 := storetest.OpenConfig(t, orgstore.Config{URL: url})
		must[int64](t)(s1.PutOrg(ctx, "acme"))
		must[int64](t)(s1.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8"), nil))
		if err := s1.Close(); err != nil {
			t.Fatal(err)
		}
		// Reopen (migrations run again) and open concurrently.
		var wg sync.WaitGroup
		stores := make([]*orgstore.Store, 4)
		for i := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := orgstore.Open(ctx, orgstore.Config{URL: url})
				if err != nil {
					t.Errorf("reopen %d: %v", i, err)
					return
				}
				stores[i] = s
			}()
		}
		wg.Wait()
		for _, s := range stores {
			if s == nil {
				t.FailNow()
			}
			v, ps := must2(t)(s.Prefixes(ctx, "acme"))
			if v != 2 || !slices.Equal(ps, pfxs("10.0.0.0/8")) {
				t.Fatalf("after reopen: %d %v", v, ps)
			}
			s.Close()
		}
	})
}

func TestMigrationsRecordedAndNewerSchemaRefused(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s, err := orgstore.Open(ctx, orgstore.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		db := rawDB(t, dialect, url)
		var n, maxV int
		if err := db.QueryRow(`SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &maxV); err != nil {
			t.Fatal(err)
		}
		if n < 1 || maxV < 1 {
			t.Fatalf("schema_migrations has %d rows up to version %d", n, maxV)
		}
		// A second Open applies nothing new.
		s, err = orgstore.Open(ctx, orgstore.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		var n2 int
		if err := db.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n2); err != nil || n2 != n {
			t.Fatalf("after reopen schema_migrations has %d rows (err %v), want %d", n2, err, n)
		}
		// A schema from a newer binary is refused rather than misused.
		if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`); err != nil {
			t.Fatal(err)
		}
		if s, err := orgstore.Open(ctx, orgstore.Config{URL: url}); err == nil || !strings.Contains(err.Error(), "newer") {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open on a newer schema: err = %v, want a refusal", err)
		}
	})
}

// rawDB opens the store's database directly, to inspect or tamper with it.
func rawDB(t *testing.T, dialect, url string) *sql.DB {
	t.Helper()
	var (
		db  *sql.DB
		err error
	)
	if dialect == storetest.SQLite {
		db, err = sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:"))
	} else {
		db, err = sql.Open("pgx", url)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConcurrentWritesToOneOrg(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		const writers, each = 8, 15
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			versions = map[int64]bool{}
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					c := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(w), byte(i), 0}), 24)
					var (
						v   int64
						err error
					)
					switch i % 3 {
					case 0:
						v, err = s.PutOverride(ctx, "acme", orgstore.Override{CIDR: c})
					case 1:
						v, err = s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{{Override: orgstore.Override{CIDR: c}}})
					default:
						v, err = s.UpdatePrefixes(ctx, "acme", []netip.Prefix{c}, nil)
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if versions[v] {
						t.Errorf("version %d returned twice", v)
					}
					versions[v] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// Every write changed something, so each bumped exactly once.
		wantVersion(t, s, "acme", 1+writers*each)
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.CIDROnly))
		if len(view.Overrides) != writers*each*2/3 || len(view.Prefixes) != writers*each/3 {
			t.Fatalf("%d overrides and %d prefixes, want %d and %d", len(view.Overrides), len(view.Prefixes), writers*each*2/3, writers*each/3)
		}
	})
}
