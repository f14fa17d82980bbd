package resolver_test

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// BenchmarkMissBlackholed measures what one black-holed forwarder among
// three adds to the latency of cache misses, per strategy: every query a
// new name, 16 clients at once, the black-holed forwarder listed first
// (for ordered, the one asked first). It reports the p50 and p99 of the
// clients' round trips (p50-ms, p99-ms). Before the timer starts, 20
// misses let the resolver find the black hole (the first pays an attempt
// timeout, 1.5 s; that onset is not in the figure):
//
//	go test -run '^$' -bench MissBlackholed -benchtime 4000x ./internal/resolver/
func BenchmarkMissBlackholed(b *testing.B) {
	for _, s := range []upstream.Strategy{upstream.StrategyFastest, upstream.StrategyOrdered} {
		for _, black := range []bool{false, true} {
			state := "healthy"
			if black {
				state = "one-blackholed"
			}
			b.Run(s.String()+"/"+state, func(b *testing.B) { benchMissBlackholed(b, s, black) })
		}
	}
}

var benchRun atomic.Int64 // names differ between runs, so every query misses

func benchMissBlackholed(b *testing.B, s upstream.Strategy, black bool) {
	fw := []*switchUpstream{startSwitchUpstream(b), startSwitchUpstream(b), startSwitchUpstream(b)}
	if black {
		fw[0].mode.Store(modeBlackhole)
	}
	e := newEnv(b, func(c *resolver.Config) {
		c.Forwarders = []netip.AddrPort{fw[0].addr, fw[1].addr, fw[2].addr}
		c.ForwarderStrategy = s
		c.Upstream.Timeout, c.Upstream.MaxTime = 0, 0 // the defaults: 1.5 s an attempt, 4 s a query
		c.Cache = cache.DefaultConfig()
	})
	run := benchRun.Add(1)
	for i := range 20 {
		if _, err := exchange("udp", "", e.udp, query(fmt.Sprintf("warm%d.r%d.bench.test.", i, run), dns.TypeA, 1232, false), bound); err != nil {
			b.Fatal(err)
		}
	}
	took := make([]time.Duration, b.N)
	var next, failed atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				m, err := exchange("udp", "", e.udp, query(fmt.Sprintf("q%d.r%d.bench.test.", i, run), dns.TypeA, 1232, false), bound)
				took[i] = time.Since(t0)
				if err != nil || !answeredWithData(m) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d misses unanswered", failed.Load(), b.N)
	}
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
	b.ReportMetric(ms(took[len(took)*99/100]), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
}
