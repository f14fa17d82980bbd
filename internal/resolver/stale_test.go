package resolver_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// staleEnv is a resolver over two switchable forwarders, with serve_stale
// 1h, a clock the test moves, and its metrics in reg.
func staleEnv(t *testing.T, up upstream.Config) (*testEnv, []*switchUpstream, *fakeClock, *prometheus.Registry) {
	t.Helper()
	fw := []*switchUpstream{startSwitchUpstream(t), startSwitchUpstream(t)}
	clock := new(fakeClock)
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *resolver.Config) {
		c.Forwarders = []netip.AddrPort{fw[0].addr, fw[1].addr}
		c.Cache = cache.DefaultConfig()
		c.Cache.Record.ServeStale = time.Hour
		c.Upstream = up
		c.Clock = clock.now
		c.Registerer = reg
	})
	return e, fw, clock, reg
}

func setMode(fws []*switchUpstream, mode int32) {
	for _, f := range fws {
		f.mode.Store(mode)
	}
}

// TestServeStale: an expired record is answered from the record cache
// with TTL 30 and EDE 3 while every forwarder is black-holed, through the
// packet cache's path (UDP, the packet entry expired too) and TCP's; the
// stale reply is not stored in the packet cache; past serve_stale the
// answer is SERVFAIL; with the forwarders back, a fresh answer without
// EDE.
func TestServeStale(t *testing.T) {
	e, fw, clock, reg := staleEnv(t, upstream.Config{Timeout: 300 * time.Millisecond, MaxTime: time.Second})
	name := "www.t60.stale.test."
	fresh := e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false))
	if !answeredWithData(fresh) || firstTTL(fresh) != 60 {
		t.Fatalf("fresh answer %v", fresh)
	}
	if _, ok := edeOf(fresh); ok {
		t.Errorf("fresh answer carries an EDE: %v", fresh)
	}

	setMode(fw, modeBlackhole)
	clock.add(61 * time.Second)
	for _, tc := range []struct {
		netw string
		edns bool
	}{{"udp", true}, {"udp", true}, {"tcp", true}, {"udp", false}} {
		before := e.stats("packetcache-hits")
		var m *dns.Msg
		if tc.edns {
			m = e.mustAsk(tc.netw, "", query(name, dns.TypeA, 1232, false))
		} else {
			m = e.mustAsk(tc.netw, "", query(name, dns.TypeA, 0, false))
		}
		if !answeredWithData(m) || firstTTL(m) != cache.StaleTTL {
			t.Fatalf("%s edns=%v: stale answer %v, want the record with TTL %d", tc.netw, tc.edns, m, cache.StaleTTL)
		}
		ede, ok := edeOf(m)
		switch {
		case tc.edns && (!ok || ede.InfoCode != dns.ExtendedErrorCodeStaleAnswer):
			t.Errorf("%s: EDE %v, want 3 Stale Answer", tc.netw, ede)
		case !tc.edns && m.IsEdns0() != nil:
			t.Errorf("no EDNS asked, an OPT answered: %v", m)
		}
		e.wantMoved(tc.netw+" stale answer", before, map[string]uint64{"packetcache-hits": 0})
	}
	if v := promtest.Value(t, reg, "svcpf_resolver_stale_answers_total"); v != 4 {
		t.Errorf("svcpf_resolver_stale_answers_total = %v, want 4", v)
	}
	for _, f := range fw {
		if v := promtest.Value(t, reg, "svcpf_resolver_upstream_up", "forwarder", f.addr.String()); v != 0 {
			t.Errorf("black-holed %s: svcpf_resolver_upstream_up = %v", f.addr, v)
		}
		if v := promtest.Value(t, reg, "svcpf_resolver_upstream_timeouts_total", "forwarder", f.addr.String()); v < 1 {
			t.Errorf("black-holed %s: svcpf_resolver_upstream_timeouts_total = %v", f.addr, v)
		}
	}

	// The forwarders back, past the failure recheck time: fresh again.
	setMode(fw, modeAnswer)
	clock.add(cache.StaleRecheck + time.Second)
	m := e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false))
	if !answeredWithData(m) || firstTTL(m) != 60 {
		t.Fatalf("forwarders back: %v, want a fresh answer with TTL 60", m)
	}
	if ede, ok := edeOf(m); ok {
		t.Errorf("forwarders back: EDE %v", ede)
	}

	// Past serve_stale: nothing left to serve.
	setMode(fw, modeBlackhole)
	clock.add(61*time.Second + time.Hour)
	if m := e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false)); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("past serve_stale: %v, want SERVFAIL", m)
	}
}

// TestStaleClientTimer: a forwarder slower than the client response timer
// (1.8 s) gets the client a stale answer, and the question is asked again
// in the background with the forwarders' full time, whose answer then
// serves the next client fresh.
func TestStaleClientTimer(t *testing.T) {
	e, fw, clock, reg := staleEnv(t, upstream.Config{Timeout: 3500 * time.Millisecond, MaxTime: 4 * time.Second})
	name := "slow.t60.stale.test."
	if m := e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false)); !answeredWithData(m) {
		t.Fatalf("fresh answer %v", m)
	}
	setMode(fw, modeSlow) // 2.5 s
	clock.add(61 * time.Second)
	m := e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false))
	if ede, ok := edeOf(m); !answeredWithData(m) || firstTTL(m) != cache.StaleTTL || !ok || ede.InfoCode != dns.ExtendedErrorCodeStaleAnswer {
		t.Fatalf("slow forwarders: %v, want a stale answer", m)
	}
	deadline := time.Now().Add(bound)
	for promtest.Value(t, reg, "svcpf_resolver_refreshes_total", "reason", "stale", "result", "answered") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no background refresh answered within %v", bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	setMode(fw, modeAnswer)
	n := fw[0].asked(name) + fw[1].asked(name)
	m = e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false))
	if _, ok := edeOf(m); !answeredWithData(m) || ok || firstTTL(m) != 60 {
		t.Errorf("after the refresh: %v, want the refreshed record", m)
	}
	if got := fw[0].asked(name) + fw[1].asked(name); got != n {
		t.Errorf("the forwarders were asked again (%d → %d): the refresh was not stored", n, got)
	}
}

// TestServeStaleOff: with serve_stale 0 an expired record is not served.
func TestServeStaleOff(t *testing.T) {
	u := startSwitchUpstream(t)
	clock := new(fakeClock)
	e := newEnv(t, func(c *resolver.Config) {
		c.Forwarders = []netip.AddrPort{u.addr}
		c.Cache = cache.DefaultConfig()
		c.Cache.Record.ServeStale = 0
		c.Upstream = upstream.Config{Timeout: 300 * time.Millisecond, MaxTime: time.Second}
		c.Clock = clock.now
	})
	name := "off.t60.stale.test."
	if m := e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false)); !answeredWithData(m) {
		t.Fatalf("fresh answer %v", m)
	}
	u.mode.Store(modeBlackhole)
	clock.add(61 * time.Second)
	if m := e.mustAsk("udp", "", query(name, dns.TypeA, 1232, false)); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("serve_stale 0: %v, want SERVFAIL", m)
	}
}
