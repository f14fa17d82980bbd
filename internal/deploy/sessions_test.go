package deploy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/session"
)

func TestFirstDeployRepublishesInFull(t *testing.T) {
	f := newFixture(t, Config{})
	f.org("acme", "10.0.0.0/24")
	f.settle("acme")
	f.put("acme", "10.0.0.0/25", "a", `{"trace_id":"tr"}`)
	st := f.settle("acme")
	if st.Version != 3 {
		t.Fatalf("deployed version %d", st.Version)
	}
	first := f.pub.all()[0]
	if first.Revision < 1 || first.CleanBelowRevision != first.Revision {
		t.Fatalf("first deploy %+v", first)
	}
	// Later deploys are incremental, under the same revision: only the new
	// override's session (the prefix's own session keeps its allocation).
	last := f.pub.last()
	if len(last.Set) != 1 || last.Set[0].Revision != first.Revision || last.CleanBelowRevision != 0 {
		t.Fatalf("set %+v", last)
	}
	for _, s := range last.Set {
		if s.Username == "a" && (s.TraceID != "tr" || s.ID != id("acme", "10.0.0.0/25", "a")) {
			t.Fatalf("session %+v", s)
		}
	}
}

func TestIncrementalDiffs(t *testing.T) {
	f := newFixture(t, Config{})
	f.org("acme", "10.0.0.0/24", "10.0.1.0/24")
	f.put("acme", "10.0.0.0/24", "a", "")
	f.settle("acme")
	first := f.pub.last()

	// A nested override: only the new session — its parent keeps its
	// allocation, longest-prefix match does the rest; nothing cleaned, same
	// revision.
	f.put("acme", "10.0.0.128/25", "b", "")
	f.settle("acme")
	d := f.pub.last()
	if got, want := ids(d.Set), []string{id("acme", "10.0.0.128/25", "b")}; !sameSet(got, want) {
		t.Fatalf("set %v, want %v", got, want)
	}
	if len(d.CleanIDs) != 0 || d.CleanBelowRevision != 0 || d.Revision != first.Revision {
		t.Fatalf("diff %+v", d)
	}

	// A changed attribute: new session id, the old one cleaned.
	f.put("acme", "10.0.0.128/25", "c", "")
	f.settle("acme")
	d = f.pub.last()
	if !sameSet(ids(d.Set), []string{id("acme", "10.0.0.128/25", "c")}) || !sameSet(d.CleanIDs, []string{id("acme", "10.0.0.128/25", "b")}) {
		t.Fatalf("attribute change %+v", d)
	}

	// trace_id only: nothing published, yet the version is deployed.
	n := len(f.pub.all())
	f.put("acme", "10.0.0.128/25", "c", `{"trace_id":"new"}`)
	st := f.settle("acme")
	if len(f.pub.all()) != n || st.Version != 6 {
		t.Fatalf("trace_id-only change published %d diffs; deployed %d", len(f.pub.all())-n, st.Version)
	}

	// Prefix removal: the released space is cleaned, nothing else.
	if _, err := f.store.UpdatePrefixes(f.ctx(), "acme", nil, []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}); err != nil {
		t.Fatal(err)
	}
	f.d.Notify("acme")
	f.settle("acme")
	d = f.pub.last()
	if fmt.Sprint(d.CleanSubnets) != "[10.0.1.0/24]" || !sameSet(d.CleanIDs, []string{id("acme", "10.0.1.0/24", "")}) || len(d.Set) != 0 {
		t.Fatalf("prefix removal %+v", d)
	}
}

// TestIPv4MappedPrefixesPublishIPv4: ::ffff:a.b.c.d/n CIDRs in the store
// (the API refuses them, the store does not) deploy in IPv4 form, the only
// one the IP Mapper holds.
func TestIPv4MappedPrefixesPublishIPv4(t *testing.T) {
	f := newFixture(t, Config{})
	f.org("acme", "::ffff:10.0.0.0/104", "::ffff:11.1.0.0/112")
	f.put("acme", "::ffff:10.0.1.0/120", "u", "")
	f.settle("acme")
	var allocs []string
	for _, d := range f.pub.all() {
		for _, s := range d.Set {
			allocs = append(allocs, fmt.Sprint(s.Allocations))
			if err := s.Validate(); err != nil {
				t.Fatalf("published session the IP Mapper refuses: %v", err)
			}
		}
	}
	slices.Sort(allocs)
	allocs = slices.Compact(allocs)
	if want := []string{"[10.0.0.0/8]", "[10.0.1.0/24]", "[11.1.0.0/16]"}; !slices.Equal(allocs, want) {
		t.Fatalf("allocations %v, want %v", allocs, want)
	}
	if _, err := f.store.UpdatePrefixes(f.ctx(), "acme", nil, []netip.Prefix{netip.MustParsePrefix("::ffff:11.1.0.0/112")}); err != nil {
		t.Fatal(err)
	}
	f.d.Notify("acme")
	f.settle("acme")
	if got := fmt.Sprint(f.pub.last().CleanSubnets); got != "[11.1.0.0/16]" {
		t.Fatalf("released subnets %s, want [11.1.0.0/16]", got)
	}
}

func TestReleasedSubnetsKeepCoveredSpace(t *testing.T) {
	p := netip.MustParsePrefix
	got := releasedSubnets([]netip.Prefix{p("10.0.0.0/8"), p("10.1.0.0/16"), p("2001:db8::/32")}, []netip.Prefix{p("10.0.0.0/8")})
	if fmt.Sprint(got) != "[2001:db8::/32]" {
		t.Fatalf("released %v", got)
	}
	got = releasedSubnets([]netip.Prefix{p("10.0.0.0/8")}, []netip.Prefix{p("10.0.0.0/9")})
	if fmt.Sprint(got) != "[10.128.0.0/9]" {
		t.Fatalf("released %v", got)
	}
}

func TestDeletedOrgCleansAll(t *testing.T) {
	f := newFixture(t, Config{})
	f.org("acme", "10.0.0.0/24")
	f.settle("acme")
	if err := f.store.DeleteOrg(f.ctx(), "acme"); err != nil {
		t.Fatal(err)
	}
	f.d.Notify("acme")
	deadline := time.Now().Add(5 * time.Second)
	for !f.pub.last().CleanOrg {
		if time.Now().After(deadline) {
			t.Fatal("no clean of the deleted organisation")
		}
		time.Sleep(time.Millisecond)
	}
	// The state is dropped just after the publish returns (and the store
	// forgot the delete).
	for st := f.d.Status("acme"); st.Deployed || st.Dirty; st = f.d.Status("acme") {
		if time.Now().After(deadline) {
			t.Fatalf("deleted org still has state %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	if pending, err := f.store.DeletedOrgs(f.ctx()); err != nil || len(pending) != 0 {
		t.Fatalf("delete still pending after its clean: %+v %v", pending, err)
	}
}

func TestRedeploy(t *testing.T) {
	f := newFixture(t, Config{})
	f.org("acme", "10.0.0.0/24")
	f.put("acme", "10.0.0.0/26", "a", "")
	first := f.settle("acme")
	rev := f.pub.last().Revision
	f.d.Redeploy("acme")
	st := f.settle("acme")
	d := f.pub.last()
	// Every session again: the prefix's and the override's.
	if d.Revision <= rev || d.CleanBelowRevision != d.Revision || len(d.Set) != 2 {
		t.Fatalf("redeploy %+v (before rev %d)", d, rev)
	}
	if st.Version != first.Version {
		t.Fatal("redeploy changed the version")
	}
}

func TestComputeSessions(t *testing.T) {
	p := netip.MustParsePrefix
	snap := Compute("acme", orgstore.View{Version: 7,
		Prefixes: []netip.Prefix{p("10.0.0.0/9"), p("10.128.0.0/9")},
		Overrides: []orgstore.Override{
			{CIDR: p("10.0.0.0/8"), Attributes: identity.Attributes{Username: "a"}, TraceID: "t"},
			{CIDR: p("10.1.0.0/16"), Attributes: identity.Attributes{Location: "l"}},
		}})
	// The /9 prefixes are wholly overridden: no session of their own.
	if len(snap.Ranges) != 3 || len(snap.Sessions) != 2 {
		t.Fatalf("ranges %v sessions %v", snap.Ranges, snap.Sessions)
	}
	a := snap.Sessions[session.NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "a"}}, p("10.0.0.0/8"))]
	if a.TraceID != "t" || fmt.Sprint(a.Allocations) != "[10.0.0.0/8]" {
		t.Fatalf("session a %+v", a)
	}
	l := snap.Sessions[session.NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Location: "l"}}, p("10.1.0.0/16"))]
	if fmt.Sprint(l.Allocations) != "[10.1.0.0/16]" || l.Location != "l" {
		t.Fatalf("session l %+v", l)
	}
}

// TestSessionsResolveLikeRanges: for random nested prefixes and overrides in
// both families, resolving every address by longest-prefix match over the
// published sessions gives the effective range's source and attributes.
func TestSessionsResolveLikeRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sub := func(base netip.Prefix, extra int) netip.Prefix {
		a := base.Addr().As16()
		off := 0
		if base.Addr().Is4() {
			off = 96
		}
		for i := base.Bits(); i < base.Addr().BitLen(); i++ {
			if rng.IntN(2) == 1 {
				a[(off+i)/8] |= 0x80 >> ((off + i) % 8)
			}
		}
		addr := netip.AddrFrom16(a)
		if base.Addr().Is4() {
			addr = addr.Unmap()
		}
		p, _ := addr.Prefix(base.Bits() + rng.IntN(extra+1))
		return p
	}
	for iter := range 300 {
		v := orgstore.View{Version: 1}
		seen := map[netip.Prefix]bool{}
		for _, base := range []netip.Prefix{netip.MustParsePrefix("10.1.0.0/22"), netip.MustParsePrefix("2001:db8::/118")} {
			for range rng.IntN(4) {
				v.Prefixes = append(v.Prefixes, sub(base, 10))
			}
			wide, _ := base.Addr().Prefix(base.Bits() - 1)
			for range rng.IntN(12) {
				p := sub(wide, 11)
				if !seen[p] {
					seen[p] = true
					v.Overrides = append(v.Overrides, orgstore.Override{CIDR: p, Attributes: identity.Attributes{Username: fmt.Sprint("u", rng.IntN(3))}})
				}
			}
		}
		snap := Compute("acme", v)
		k := 0
		for _, universe := range []netip.Prefix{netip.MustParsePrefix("10.1.0.0/21"), netip.MustParsePrefix("2001:db8::/117")} {
			for a := universe.Addr(); universe.Contains(a); a = a.Next() {
				// Longest-prefix match over the sessions, as the IP Mapper does.
				var best *session.Session
				bestBits := -1
				for _, s := range snap.Sessions {
					for _, p := range s.Allocations {
						if p.Contains(a) && p.Bits() > bestBits {
							s := s
							best, bestBits = &s, p.Bits()
						}
					}
				}
				for k < len(snap.Ranges) && snap.Ranges[k].To.Less(a) {
					k++
				}
				inRange := k < len(snap.Ranges) && !a.Less(snap.Ranges[k].From)
				if inRange != (best != nil) {
					t.Fatalf("iteration %d, %s: in a range %v, resolves to a session %v\n%+v", iter, a, inRange, best != nil, v)
				}
				if !inRange {
					continue
				}
				r := snap.Ranges[k]
				want := session.NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: r.Attrs.Username, DeviceID: r.Attrs.DeviceID, Location: r.Attrs.Location}}, r.Orig)
				if best.ID != want {
					t.Fatalf("iteration %d, %s: session %v %+v, range %v %+v\n%+v", iter, a, best.Allocations, best, r.Orig, r.Attrs, v)
				}
			}
		}
	}
}
