package sessions_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	"github.com/svc-pf/svc-pf/internal/session"
)

// TestProducersShareAddressesAlike writes sessions of both producers for
// the same addresses through a real IP Mapper and checks that the IP
// Mapper, a node following the bucket, a node started afresh (a restart:
// a full replay of the bucket) and a restarted IP Mapper all give the
// same answer: the longest prefix wins, and on the exact same prefix the
// session written last to the bucket, whichever producer wrote it.
func TestProducersShareAddressesAlike(t *testing.T) {
	bus := natstest.Start(t)
	nc, js := bus.NC, bus.JS
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	mapper := startMapper(ctx, t, nc, ipmapper.Config{})
	defer func() { _ = mapper.Stop() }()
	client := newClient(t, nc, 30*time.Second)
	node := startNode(ctx, t, js, sessions.Config{})

	set := func(s session.Session) {
		t.Helper()
		if _, err := client.SetSession(ctx, s, 0); err != nil {
			t.Fatalf("set %s: %v", s.ID, err)
		}
	}
	om := func(id, prefix string, rev int64) session.Session {
		return session.Session{ID: id, Org: "acme", Revision: rev, Allocations: []netip.Prefix{netip.MustParsePrefix(prefix)}}
	}
	rad := func(id, prefix, user string) session.Session {
		return session.Session{ID: id, Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix(prefix)},
			Attributes: identity.Attributes{Username: user, DeviceID: "msisdn:447900000001"}, Producer: session.ProducerRADIUS}
	}
	// want: address → id of the session that must answer it.
	check := func(step string, want map[string]string) {
		t.Helper()
		fresh := startNode(ctx, t, js, sessions.Config{})
		for a, id := range want {
			addr := netip.MustParseAddr(a)
			list, err := client.GetSessions(ctx, mapperclient.Query{IP: addr})
			if err != nil || len(list) != 1 || list[0].ID != id {
				t.Fatalf("%s: the IP Mapper answers %s with %+v (%v), want %s", step, a, list, err, id)
			}
			if e, ok := fresh.Snapshot().LookupIP(addr); !ok || e.ID() != id {
				t.Fatalf("%s: a freshly started node answers %s with %q, want %s", step, a, e.ID(), id)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				e, ok := node.Snapshot().LookupIP(addr)
				if ok && e.ID() == id {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: the following node answers %s with %q, want %s", step, a, e.ID(), id)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}

	// The same /32: the one written last answers, whichever producer.
	set(om("om-32", "100.64.0.1/32", 1))
	set(rad("rad-32", "100.64.0.1/32", "alice"))
	check("RADIUS wrote the /32 after the orgmanager", map[string]string{"100.64.0.1": "rad-32"})
	set(om("om-32", "100.64.0.1/32", 2)) // a change: written again, so last
	check("the orgmanager rewrote its /32", map[string]string{"100.64.0.1": "om-32"})
	set(om("om-32", "100.64.0.1/32", 2)) // no change: no write, the order stands
	check("the orgmanager sent its /32 unchanged", map[string]string{"100.64.0.1": "om-32"})
	set(rad("rad-32", "100.64.0.1/32", "alice2"))
	check("RADIUS updated its /32", map[string]string{"100.64.0.1": "rad-32"})

	// A /24 against a /32 inside it: the /32 answers its address in either
	// order of writing; the /24 the rest.
	set(om("om-24", "100.64.1.0/24", 1))
	set(rad("rad-in-24", "100.64.1.5/32", "bob"))
	set(rad("rad-first", "100.64.2.7/32", "carol"))
	set(om("om-24-later", "100.64.2.0/24", 1))
	// The same for IPv6: a /64 of RADIUS in a /48 of the orgmanager.
	set(rad("rad-v6", "2001:db8:1:2::/64", "dave"))
	set(om("om-v6", "2001:db8:1::/48", 1))
	want := map[string]string{
		"100.64.0.1": "rad-32",
		"100.64.1.5": "rad-in-24", "100.64.1.6": "om-24",
		"100.64.2.7": "rad-first", "100.64.2.8": "om-24-later",
		"2001:db8:1:2::99": "rad-v6", "2001:db8:1:3::1": "om-v6",
	}
	check("a /24 and a /32 of different producers", want)

	// Removing the latest holder of a prefix hands it to the previous
	// one, on every side; a producer's clean leaves the other's sessions.
	if n, err := client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{"rad-32"}, Producer: session.ProducerRADIUS}); err != nil || n != 1 {
		t.Fatalf("RADIUS clean: %d %v", n, err)
	}
	want["100.64.0.1"] = "om-32"
	check("RADIUS removed its /32", want)
	set(rad("rad-32", "100.64.0.1/32", "alice3"))
	want["100.64.0.1"] = "rad-32"
	if n, err := client.CleanSessions(ctx, mapperclient.CleanRequest{Org: "acme", All: true}); err != nil || n != 4 {
		t.Fatalf("the orgmanager's clean of the org removed %d, %v; want its 4", n, err)
	}
	check("the orgmanager cleaned its org", map[string]string{
		"100.64.0.1": "rad-32", "100.64.1.5": "rad-in-24", "100.64.2.7": "rad-first", "2001:db8:1:2::99": "rad-v6",
	})
	set(om("om-32", "100.64.0.1/32", 3))
	set(om("om-24", "100.64.1.0/24", 3))
	want = map[string]string{"100.64.0.1": "om-32", "100.64.1.5": "rad-in-24", "100.64.1.6": "om-24", "100.64.2.7": "rad-first", "2001:db8:1:2::99": "rad-v6"}
	check("the orgmanager redeployed", want)

	// A restarted IP Mapper rebuilds its table from the bucket and answers
	// as before.
	if err := mapper.Stop(); err != nil {
		t.Fatal(err)
	}
	mapper = startMapper(ctx, t, nc, ipmapper.Config{})
	check("after the IP Mapper restarted", want)
}
