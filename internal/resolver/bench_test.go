package resolver_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// The UDP path on real loopback sockets, client and server in this
// process: every figure includes the client's write and read syscalls and
// the kernel's loopback, which dominate. ns/query is wall time per query
// answered, cpu-ns/query the process's CPU time (client, server and, for
// misses, the fake forwarder) per query; allocs/op counts the client too
// (raw bytes: none).
//
//	go test -run '^$' -bench 'UDP' -benchmem -count 3 ./internal/resolver/

// BenchmarkUDPCacheHit: one client asks one name again and again: every
// query is a packet cache hit answered by the socket's reader (steps 1–4
// of pipeline.go).
func BenchmarkUDPCacheHit(b *testing.B) { benchCacheHit(b, nil) }

// BenchmarkUDPCacheHitObserved: BenchmarkUDPCacheHit with an Observer
// that counts the events (an atomic add): what the hook costs a hit (the
// question's text, the subscriber's lookup, the stored decision read
// back, the clock).
func BenchmarkUDPCacheHitObserved(b *testing.B) {
	var obs countingObserver
	benchCacheHit(b, func(c *resolver.Config) { c.Observer = &obs })
	if obs.n.Load() < uint64(b.N) {
		b.Fatalf("observer saw %d of %d queries", obs.n.Load(), b.N)
	}
}

// countingObserver counts the events, as cheap as an observer gets.
type countingObserver struct{ n atomic.Uint64 }

func (o *countingObserver) Answered(*resolver.Answered) { o.n.Add(1) }

func benchCacheHit(b *testing.B, mod func(*resolver.Config)) {
	e := newEnv(b, mod)
	c := e.udpClient("")
	pkt := mustPack(b, query("bench.test", dns.TypeA, 1232, false))
	buf := make([]byte, 65535)
	ask := func() {
		if _, err := c.Write(pkt); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Hour))
	ask() // the miss that fills the cache
	ask()
	hits := e.stat("packetcache-hits")
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N {
		ask()
	}
	b.StopTimer()
	report(b, cpu)
	// A hit is counted just after its reply is written.
	eventually(b, "every query a packet cache hit", func() bool { return e.stat("packetcache-hits")-hits == uint64(b.N) })
}

// BenchmarkUDPCacheHitParallel: GOMAXPROCS×4 clients, each on its own
// socket (the kernel spreads them over the SO_REUSEPORT sockets), all
// hits.
func BenchmarkUDPCacheHitParallel(b *testing.B) {
	e := newEnv(b, nil)
	pkt := mustPack(b, query("bench.test", dns.TypeA, 1232, false))
	e.mustAsk("udp", "", query("bench.test", dns.TypeA, 1232, false))
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		c := e.udpClient("")
		_ = c.SetReadDeadline(time.Now().Add(time.Hour))
		buf := make([]byte, 65535)
		for pb.Next() {
			if _, err := c.Write(pkt); err != nil {
				panic(err)
			}
			if _, err := c.Read(buf); err != nil {
				panic(err)
			}
		}
	})
	b.StopTimer()
	report(b, cpu)
}

// BenchmarkUDPCacheHitBurst: one client keeps 32 queries in flight (as
// dnsperf -q does), writing a burst and then reading its replies: the
// server's reader takes many at once (recvmmsg, dns.udp_batch) and answers
// them with one sendmmsg. One op is one query.
func BenchmarkUDPCacheHitBurst(b *testing.B) {
	const inFlight = 32
	e := newEnv(b, nil)
	c := e.udpClient("")
	pkt := mustPack(b, query("bench.test", dns.TypeA, 1232, false))
	buf := make([]byte, 65535)
	_ = c.SetReadDeadline(time.Now().Add(time.Hour))
	e.mustAsk("udp", "", query("bench.test", dns.TypeA, 1232, false))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for done := 0; done < b.N; {
		n := min(inFlight, b.N-done)
		for range n {
			if _, err := c.Write(pkt); err != nil {
				b.Fatal(err)
			}
		}
		for range n {
			if _, err := c.Read(buf); err != nil {
				b.Fatal(err)
			}
		}
		done += n
	}
	b.StopTimer()
	report(b, cpu)
}

// BenchmarkUDPMiss: every query a new name: the slow path (a goroutine,
// miekg/dns unpack, the policy, the record cache miss, the forwarder on
// loopback, the packet cache store).
func BenchmarkUDPMiss(b *testing.B) {
	e := newEnv(b, nil)
	c := e.udpClient("")
	buf := make([]byte, 65535)
	_ = c.SetReadDeadline(time.Now().Add(time.Hour))
	pkts := make([][]byte, b.N)
	for i := range pkts {
		pkts[i] = mustPack(b, query(fmt.Sprintf("n%d.bench.test", i), dns.TypeA, 1232, false))
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		if _, err := c.Write(pkts[i]); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, cpu)
}

// report adds ns/query and cpu-ns/query (CPU time since cpu).
func report(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/query")
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/query")
}

// TestUDPCacheHitAllocatesNothing: a packet-cache hit allocates nothing,
// with and without an observer (a variable of the hit path whose address
// is taken once moved to the heap for every query, observer or not).
// AllocsPerRun counts the whole process, the test's goroutines and
// timers included: an allocation per query reads as 1, none as about 0.
func TestUDPCacheHitAllocatesNothing(t *testing.T) {
	for name, mod := range map[string]func(*resolver.Config){
		"no observer": nil,
		"observer":    func(c *resolver.Config) { c.Observer = &countingObserver{} },
	} {
		e := newEnv(t, mod)
		c := e.udpClient("")
		pkt := mustPack(t, query("bench.test", dns.TypeA, 1232, false))
		buf := make([]byte, 65535)
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		ask := func() {
			if _, err := c.Write(pkt); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(buf); err != nil {
				t.Fatal(err)
			}
		}
		ask() // the miss that fills the cache
		if n := testing.AllocsPerRun(2000, ask); n > 0.5 {
			t.Errorf("%s: %.2f allocations per packet-cache hit, want none", name, n)
		}
		// Eight at once: the reader takes several in one batch, parsed
		// and looked up together (front.warm).
		burst := func() {
			for range 8 {
				if _, err := c.Write(pkt); err != nil {
					t.Fatal(err)
				}
			}
			for range 8 {
				if _, err := c.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
		}
		burst() // the batch's arrays, made once per reader
		if n := testing.AllocsPerRun(500, burst); n > 0.5 {
			t.Errorf("%s: %.2f allocations per burst of eight hits, want none", name, n)
		}
	}
}
