package cache_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// filledPacket returns a packet cache holding answers for n names (one
// policy class) and the client queries for them.
func filledPacket(b *testing.B, n int) (*cache.Packet, []*dnswire.Query) {
	c := newPacket(b, func(c *cache.PacketConfig) { c.Entries = 2 * n })
	qs := make([]*dnswire.Query, n)
	var k cache.PacketKey
	for i := range n {
		cq := clientQuery{name: fmt.Sprintf("www.Host%d.example.com.", i), qtype: dns.TypeA, edns: true}
		qs[i] = parse(b, cq)
		answer := reply(b, cq, 0, []dns.RR{
			rr(b, fmt.Sprintf("www.host%d.example.com. 3600 IN CNAME web.host%d.example.com.", i, i)),
			rr(b, fmt.Sprintf("web.host%d.example.com. 300 IN A 192.0.2.1", i)),
			rr(b, fmt.Sprintf("web.host%d.example.com. 300 IN A 192.0.2.2", i)),
		}, nil)
		k.SetQuery(qs[i], "0123456789abcdef")
		if _, err := c.Put(&k, answer, nil, t0); err != nil {
			b.Fatal(err)
		}
	}
	// An 8-way set-associative cache loses a few entries to full buckets
	// before it is full (about 1 in 200 at half load): keep the queries
	// that hit.
	kept := qs[:0]
	for _, q := range qs {
		k.SetQuery(q, "0123456789abcdef")
		if _, _, hit := c.Get(&k, q.RawName(), t0, nil); hit {
			kept = append(kept, q)
		}
	}
	return c, kept
}

// BenchmarkPacketGet measures a lookup as the fast path does it: build the
// key from the parsed query, look up, copy, age the TTLs (the clock is 7 s
// past insertion) and restore the client's letter case. Parallel, one dst
// buffer and key per goroutine as per socket worker.
func BenchmarkPacketGet(b *testing.B) {
	c, qs := filledPacket(b, 100_000)
	n := len(qs)
	now := t0.Add(7 * time.Second)
	run := func(b *testing.B, pick func(i int) (*dnswire.Query, string), wantHit, shared bool) {
		var seq atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			var k cache.PacketKey
			dst := make([]byte, 0, 65535)
			get := c.NewReader().Get
			if shared {
				get = c.Get
			}
			i := int(seq.Add(1)) * 7919
			for pb.Next() {
				i++
				q, fp := pick(i)
				k.SetQuery(q, fp)
				var hit bool
				if dst, _, hit = get(&k, q.RawName(), now, dst); hit != wantHit {
					b.Fatalf("hit = %v", hit)
				}
			}
		})
	}
	spread := func(i int) (*dnswire.Query, string) { return qs[i%n], "0123456789abcdef" }
	oneKey := func(int) (*dnswire.Query, string) { return qs[0], "0123456789abcdef" }
	b.Run("hit", func(b *testing.B) { run(b, spread, true, false) })
	// Every core on one key, through a reader each: nothing shared is written.
	b.Run("hit-one-key", func(b *testing.B) { run(b, oneKey, true, false) })
	// The same through Packet.Get: the shard's hit counter is shared.
	b.Run("hit-one-key-shared-counter", func(b *testing.B) { run(b, oneKey, true, true) })
	b.Run("miss", func(b *testing.B) {
		run(b, func(i int) (*dnswire.Query, string) { return qs[i%n], "fedcba9876543210" }, false, false)
	})
}

// BenchmarkFastPath is the whole cache-hit path short of the socket: parse
// the packet, build the key, Get, patch id and RD.
func BenchmarkFastPath(b *testing.B) {
	c, qs := filledPacket(b, 10_000)
	n := len(qs)
	pkts := make([][]byte, n)
	for i, q := range qs {
		m := new(dns.Msg)
		m.SetQuestion(dnsName(q), dns.TypeA)
		m.SetEdns0(1232, false)
		pkts[i], _ = m.Pack()
	}
	now := t0.Add(7 * time.Second)
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		var q dnswire.Query
		var k cache.PacketKey
		dst := make([]byte, 0, 65535)
		r := c.NewReader()
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			if err := q.Parse(pkts[i%n]); err != nil {
				b.Fatal(err)
			}
			k.SetQuery(&q, "0123456789abcdef")
			var hit bool
			if dst, _, hit = r.Get(&k, q.RawName(), now, dst); !hit || len(dst) > q.EDNS.MaxUDP() {
				b.Fatal("miss")
			}
			dnswire.PatchHeader(dst, &q)
		}
	})
}

func dnsName(q *dnswire.Query) string { return string(dnswire.AppendNameText(nil, q.RawName())) }

// BenchmarkPacketPut is the miss path's store: scan, copy, insert, with
// evictions once the cache is full.
func BenchmarkPacketPut(b *testing.B) {
	const n = 50_000
	c := newPacket(b, func(c *cache.PacketConfig) { c.Entries = n / 2 })
	keys := make([]cache.PacketKey, n)
	answers := make([][]byte, n)
	for i := range n {
		cq := clientQuery{name: fmt.Sprintf("host%d.example.com.", i), qtype: dns.TypeA, edns: true}
		keys[i].SetQuery(parse(b, cq), "0123456789abcdef")
		answers[i] = reply(b, cq, 0, []dns.RR{rr(b, fmt.Sprintf("host%d.example.com. 300 IN A 192.0.2.1", i))}, nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	i := 0
	for b.Loop() {
		if _, err := c.Put(&keys[i%n], answers[i%n], nil, t0); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRecordGet is a record-cache hit: a three-record answer copied out.
func BenchmarkRecordGet(b *testing.B) {
	const n = 10_000
	c := newRecord(b, func(c *cache.RecordConfig) { c.Entries = 2 * n })
	keys := make([]cache.RecordKey, n)
	for i := range n {
		name := fmt.Sprintf("www.host%d.example.com.", i)
		keys[i] = cache.RecordKey{Name: name, Type: dns.TypeA, Class: dns.ClassINET}
		m := upstream(b, name, dns.TypeA, 0, []dns.RR{
			rr(b, fmt.Sprintf("%s 3600 IN CNAME web.host%d.example.com.", name, i)),
			rr(b, fmt.Sprintf("web.host%d.example.com. 300 IN A 192.0.2.1", i)),
			rr(b, fmt.Sprintf("web.host%d.example.com. 300 IN A 192.0.2.2", i)),
		}, nil)
		if _, err := c.Put(keys[i], m, t0); err != nil {
			b.Fatal(err)
		}
	}
	now := t0.Add(7 * time.Second)
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			if _, hit := c.Get(keys[i%n], now); !hit {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkPacketGetCold is a batch of hits as the UDP reader answers
// them from many subscribers: 32 keys at random among 400 000 entries (a
// bucket array and entries far larger than the processor's caches),
// looked up one after the other, or after Warm read the batch's lines.
// One goroutine; ns/op is per key. The keys are built beforehand (65 536
// of them, read in order: the processor's prefetcher streams them in).
func BenchmarkPacketGetCold(b *testing.B) {
	c, qs := filledPacket(b, 400_000)
	now := t0.Add(7 * time.Second)
	const batch, ring = 32, 1 << 16
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]cache.PacketKey, ring)
	names := make([][]byte, ring)
	for i := range keys {
		q := qs[rng.IntN(len(qs))]
		keys[i].SetQuery(q, "0123456789abcdef")
		names[i] = q.RawName()
	}
	for _, warm := range []bool{false, true} {
		b.Run(map[bool]string{false: "one-by-one", true: "warmed"}[warm], func(b *testing.B) {
			r := c.NewReader()
			dst := make([]byte, 0, 65535)
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				at := done % ring
				if warm {
					r.Warm(keys[at : at+batch])
				}
				for i := at; i < at+batch; i++ {
					var hit bool
					if dst, _, hit = r.Get(&keys[i], names[i], now, dst); !hit {
						b.Fatal("miss")
					}
				}
			}
		})
	}
}
