package ipmapper

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
)

func TestExpiredSessionIsReplacedNotMerged(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "e", Org: "a", OpaqueID: "o1", Attributes: identity.Attributes{Username: "old"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Second)
	// Not swept yet, but expired: another org may take the id, with a new opaque_id.
	got, err := f.client.SetSession(ctx, session.Session{ID: "e", Org: "b", OpaqueID: "o2"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Username != "" || got.ExpiresAt != nil || got.Org != "b" {
		t.Fatalf("expired session leaked into the new one: %+v", got)
	}
	if n, _ := f.svc.sweep(); n != 0 {
		t.Fatalf("sweep removed the replacement")
	}
}

// TestGetSessionsByIPSkipsExpiredWinner: an expired session not swept yet
// must not hide the next session covering the address.
func TestGetSessionsByIPSkipsExpiredWinner(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	set := func(s session.Session, ttl time.Duration) {
		t.Helper()
		if _, err := f.client.SetSession(ctx, s, ttl); err != nil {
			t.Fatal(err)
		}
	}
	set(session.Session{ID: "wide", Org: "o", Allocations: []netip.Prefix{mustPrefix("10.0.0.0/8")}}, 0)
	set(session.Session{ID: "mid", Org: "o", Allocations: []netip.Prefix{mustPrefix("10.1.0.0/16")}}, 2*time.Minute)
	set(session.Session{ID: "narrow", Org: "o", Allocations: []netip.Prefix{mustPrefix("10.1.2.0/24")}}, time.Minute)
	// Two holders of one prefix: the later one answers while it lives.
	set(session.Session{ID: "older", Org: "o", Allocations: []netip.Prefix{mustPrefix("192.0.2.0/24")}}, 0)
	set(session.Session{ID: "newer", Org: "o", Allocations: []netip.Prefix{mustPrefix("192.0.2.0/24")}}, time.Minute)
	set(session.Session{ID: "alone", Org: "o", Allocations: []netip.Prefix{mustPrefix("2001:db8::/64")}}, time.Minute)

	check := func(when string, want map[string]string) {
		t.Helper()
		for ip, id := range want {
			list, err := f.client.GetSessions(ctx, mapperclient.Query{IP: netip.MustParseAddr(ip)})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if len(list) == 1 {
				got = list[0].ID
			}
			if len(list) > 1 || got != id {
				t.Errorf("%s: %s → %+v, want %q", when, ip, list, id)
			}
		}
	}
	check("before expiry", map[string]string{"10.1.2.3": "narrow", "10.1.9.9": "mid", "192.0.2.7": "newer", "2001:db8::1": "alone"})
	f.clock.Advance(90 * time.Second)
	check("narrow expired", map[string]string{"10.1.2.3": "mid", "10.1.9.9": "mid", "192.0.2.7": "older", "2001:db8::1": ""})
	f.clock.Advance(time.Minute)
	check("mid expired too", map[string]string{"10.1.2.3": "wide", "10.1.9.9": "wide", "192.0.2.7": "older"})
	// Nothing was swept: the answers came from the table with the expired
	// sessions still in it.
	if v := metricValue(f.svc.metrics.stored); v != 6 {
		t.Fatalf("table holds %v sessions, want 6", v)
	}
}

// TestKVDeleteFailureKeepsSessions seals the bucket's stream, after which
// JetStream refuses every write: deletes (clean, sweep) must then fail with
// an error and leave the table as it was.
func TestKVDeleteFailureKeepsSessions(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "a1", Org: "a"}, {ID: "a2", Org: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "a3", Org: "a"}, time.Second); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(f.bus.nc)
	stream, err := js.Stream(ctx, "KV_"+session.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.Sealed = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	_, err = f.client.CleanSessions(ctx, mapperclient.CleanRequest{Org: "a", All: true})
	var re *mapperclient.RemoteError
	if !errors.As(err, &re) || re.Code != 500 || !strings.Contains(re.Message, "removed 0 of 3") {
		t.Fatalf("want a 500 delete error, got %v", err)
	}
	f.clock.Advance(time.Minute)
	if n, err := f.svc.sweep(); err == nil || n != 0 {
		t.Fatalf("sweep on a sealed bucket: removed %d, err %v", n, err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "a1", Org: "a", Attributes: identity.Attributes{Username: "new"}}, 0); err == nil {
		t.Fatal("set-session on a sealed bucket succeeded")
	}
	list, _ := f.client.GetSessions(ctx, mapperclient.Query{Org: "a"})
	if len(list) != 2 || list[0].Username != "" {
		t.Fatalf("table changed although every write failed: %+v", list)
	}
	// The expired one is hidden from readers but still held for the next sweep.
	if v := metricValue(f.svc.metrics.stored); v != 3 {
		t.Fatalf("table holds %v sessions, want 3", v)
	}
	if v := metricValue(f.svc.metrics.kvWriteErrors); v != 5 {
		t.Fatalf("kv write errors = %v, want 5", v)
	}
}
