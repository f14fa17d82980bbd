package stats

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// BenchmarkIncOwnShard is the query path's cost of one counter: each
// parallel worker on its own shard, as the resolver's DNS workers are.
func BenchmarkIncOwnShard(b *testing.B) {
	c := newCounters(b, Config{})
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := c.Shard(uint(next.Add(1) - 1))
		for pb.Next() {
			s.Inc(Questions)
		}
	})
}

// BenchmarkIncSharedShard is the same with every worker on one shard: the
// cost of one shared counter, which the shards avoid.
func BenchmarkIncSharedShard(b *testing.B) {
	c := newCounters(b, Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := c.Shard(0)
		for pb.Next() {
			s.Inc(Questions)
		}
	})
}

// BenchmarkQueryOwnShard is everything one resolved query counts: the
// question, the concurrent-queries gauge, the outgoing query and its
// answer, the reply with its latency bucket, rcode and qa-latency sample.
func BenchmarkQueryOwnShard(b *testing.B) {
	c := newCounters(b, Config{})
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := c.Shard(uint(next.Add(1) - 1))
		for pb.Next() {
			s.Question(policy.TransportUDP, false)
			s.Inc(ConcurrentQueries)
			s.Inc(CacheMisses)
			s.OutQuery(false, false)
			s.Answer(false, 3*time.Millisecond)
			s.Replied(0, 4*time.Millisecond)
			s.Dec(ConcurrentQueries)
		}
	})
}

// BenchmarkPacketCacheHitOwnShard is what a packet cache hit counts.
func BenchmarkPacketCacheHitOwnShard(b *testing.B) {
	c := newCounters(b, Config{})
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := c.Shard(uint(next.Add(1) - 1))
		for pb.Next() {
			s.Question(policy.TransportUDP, false)
			s.PacketCacheHit(0)
		}
	})
}

// BenchmarkSnapshot is one full read (the API's statistics, a scrape).
func BenchmarkSnapshot(b *testing.B) {
	c := newCounters(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		c.Snapshot()
	}
}

// BenchmarkLookup reads one counter statistic.
func BenchmarkLookup(b *testing.B) {
	c := newCounters(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		c.Lookup("questions")
	}
}
