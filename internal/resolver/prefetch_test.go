package resolver_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// TestPrefetch: a name asked twice (prefetch: 2) in the last tenth of its
// TTL is refreshed in the background: the forwarder sees the refresh, and
// the client, asking past the first answer's expiry, gets an answer from
// the cache without a miss (the record cache's cache-misses does not
// move). A name asked once there is not refreshed.
func TestPrefetch(t *testing.T) {
	u := startSwitchUpstream(t)
	clock := new(fakeClock)
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *resolver.Config) {
		c.Forwarders = []netip.AddrPort{u.addr}
		c.Cache = cache.DefaultConfig() // prefetch: 2
		c.Clock = clock.now
		c.Registerer = reg
	})
	popular, quiet := "pop.t100.prefetch.test.", "quiet.t100.prefetch.test."
	for _, n := range []string{popular, quiet} {
		if m := e.mustAsk("udp", "", query(n, dns.TypeA, 1232, false)); !answeredWithData(m) {
			t.Fatalf("%s: %v", n, m)
		}
	}
	clock.add(50 * time.Second) // not yet the last tenth: counts nothing
	for range 3 {
		e.mustAsk("udp", "", query(popular, dns.TypeA, 1232, false))
	}
	if n := u.asked(popular); n != 1 {
		t.Fatalf("refreshed before the last tenth of its TTL: asked %d times", n)
	}
	clock.add(41 * time.Second) // 91 s of 100
	misses := e.stat("cache-misses")
	e.mustAsk("udp", "", query(quiet, dns.TypeA, 1232, false))
	for range 2 {
		if m := e.mustAsk("udp", "", query(popular, dns.TypeA, 1232, false)); !answeredWithData(m) {
			t.Fatalf("popular: %v", m)
		}
	}
	deadline := time.Now().Add(bound)
	for u.asked(popular) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no prefetch of %s within %v", popular, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for promtest.Value(t, reg, "svcpf_resolver_refreshes_total", "reason", "prefetch", "result", "answered") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the prefetch's answer was not stored within %v", bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	clock.add(10 * time.Second) // past the first answer's expiry
	m := e.mustAsk("udp", "", query(popular, dns.TypeA, 1232, false))
	if !answeredWithData(m) || firstTTL(m) >= 100 || firstTTL(m) < 85 {
		t.Errorf("after expiry: %v, want the refreshed record, aged", m)
	}
	if n := u.asked(popular); n != 2 {
		t.Errorf("%s asked %d times, want 2 (the first miss and the prefetch)", popular, n)
	}
	if n := u.asked(quiet); n != 1 {
		t.Errorf("%s, asked once near its expiry, was refreshed: asked %d times", quiet, n)
	}
	if got := e.stat("cache-misses"); got != misses {
		t.Errorf("cache-misses moved %d → %d: the client waited on the forwarders", misses, got)
	}
}

// TestResolverSetForwarders swaps the forwarders and the strategy of a
// running resolver under a stream of cache misses (go test -race): every
// query is answered, a bad set is refused naming the key and changes
// nothing, and after the last swap only the new forwarder is asked.
func TestResolverSetForwarders(t *testing.T) {
	a, b := startSwitchUpstream(t), startSwitchUpstream(t)
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *resolver.Config) {
		c.Forwarders = []netip.AddrPort{a.addr}
		c.Registerer = reg
	})
	var failed, done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m, err := exchange("udp", "", e.udp, query(fmt.Sprintf("w%d-%d.swap.test.", w, i), dns.TypeA, 1232, false), bound)
				if err != nil || !answeredWithData(m) {
					failed.Add(1)
				}
				done.Add(1)
			}
		})
	}
	sets := [][]netip.AddrPort{{b.addr}, {a.addr, b.addr}, {b.addr, a.addr}, {a.addr}}
	for i := range 12 {
		time.Sleep(20 * time.Millisecond)
		if err := e.r.SetForwarders(sets[i%len(sets)], upstream.Strategy(i%2)); err != nil {
			t.Fatalf("SetForwarders: %v", err)
		}
	}
	if err := e.r.SetForwarders([]netip.AddrPort{b.addr, b.addr}, upstream.StrategyOrdered); err == nil ||
		!containsAll(err.Error(), "forwarders", "twice") {
		t.Errorf("a duplicate forwarder: err %v", err)
	}
	if v := promtest.Value(t, reg, "svcpf_resolver_upstream_strategy", "strategy", "ordered"); v != 1 {
		t.Errorf("the refused set changed the strategy: ordered = %v", v)
	}
	if err := e.r.SetForwarders([]netip.AddrPort{b.addr}, upstream.StrategyFastest); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	before := a.all.Load()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if got := a.all.Load(); got != before {
		t.Errorf("the forwarder left out was asked %d more times", got-before)
	}
	if failed.Load() != 0 || done.Load() < 50 {
		t.Errorf("%d of %d queries unanswered", failed.Load(), done.Load())
	}
	if v := promtest.Value(t, reg, "svcpf_resolver_upstream_answers_total", "forwarder", b.addr.String()); v < 1 {
		t.Errorf("svcpf_resolver_upstream_answers_total{%s} = %v", b.addr, v)
	}
	if v := promtest.Value(t, reg, "svcpf_resolver_upstream_up", "forwarder", b.addr.String()); v != 1 {
		t.Errorf("svcpf_resolver_upstream_up{%s} = %v", b.addr, v)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
