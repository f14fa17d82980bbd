package activity

import (
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// benchRecorder is a recorder whose queue is never full.
func benchRecorder(b *testing.B, sample int, clientIP string) *Recorder {
	b.Helper()
	cfg := DefaultConfig()
	cfg.SampleAllowed, cfg.ClientIP = sample, clientIP
	cfg.Queue = 1 << 30 // never full: every block is encoded
	r, err := NewRecorder(RecorderConfig{Config: cfg, Node: "bench-node"})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkAnswered is Recorder.Answered's cost on the query path, from
// parallel goroutines (as UDP readers and slow-path goroutines call it):
// a plain allow (counted; 1 in 50 sampled, the default), a plain allow
// from a million subscribers, and a block (encoded as an event; by each
// client_ip mode), while the publisher's part takes the events.
func BenchmarkAnswered(b *testing.B) {
	subs := func(i uint32) resolver.Subscriber {
		return resolver.Subscriber{Org: "bench-" + string(rune('a'+i%64)), SessionID: "s" + itoa(i), Username: "u" + itoa(i),
			Handle: i + 1}
	}
	const nsubs = 1 << 20
	table := make([]resolver.Subscriber, nsubs)
	for i := range table {
		table[i] = subs(uint32(i))
	}
	run := func(b *testing.B, r *Recorder, verdict policy.Verdict, reason policy.Reason, many bool, handles bool) {
		// The publisher's part: take the queued events every 10 ms.
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			var t taken
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
					r.takeEvents(&t)
				}
			}
		}()
		defer func() { close(stop); <-done }()
		var next atomic.Uint32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := next.Add(1)
			a := resolver.Answered{Name: "h9.bench.test.", Type: 1, Transport: policy.TransportUDP,
				Client:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 16, 0, byte(g)}), 40000),
				Subscriber: table[1], At: time.Now(), Took: 3 * time.Microsecond, Cached: resolver.CachedPacket,
				Decision: resolver.Summary{Verdict: verdict, Action: policy.ActionAllow, Reason: reason, Policy: "0123456789abcdef"}}
			if verdict == policy.VerdictBlock {
				a.Decision.Action, a.Decision.Rule, a.Decision.Categories = policy.ActionNXDomain, "category:1 feed=bench key=h9.bench.test", []uint16{1}
			}
			i := g * 7919
			for pb.Next() {
				if many {
					i = i*1664525 + 1013904223
					s := i % nsubs
					a.Subscriber = table[s]
					if !handles {
						a.Subscriber.Handle = 0
					}
					a.Client = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 16 + byte(s>>16), byte(s >> 8), byte(s)}), 40000)
				}
				r.Answered(&a)
			}
		})
	}
	b.Run("plain-allow", func(b *testing.B) {
		run(b, benchRecorder(b, 50, ClientFull), policy.VerdictAllow, policy.ReasonDefault, false, true)
	})
	// As the resolver calls it: every subscriber with its handle.
	b.Run("plain-allow-1M-subscribers", func(b *testing.B) {
		run(b, benchRecorder(b, 50, ClientFull), policy.VerdictAllow, policy.ReasonDefault, true, true)
	})
	// Without handles: every key in the count tables.
	b.Run("plain-allow-1M-subscribers-no-handle", func(b *testing.B) {
		run(b, benchRecorder(b, 50, ClientFull), policy.VerdictAllow, policy.ReasonDefault, true, false)
	})
	for _, mode := range []string{ClientFull, ClientTruncate, ClientHash, ClientNone} {
		b.Run("block-"+mode, func(b *testing.B) {
			run(b, benchRecorder(b, 50, mode), policy.VerdictBlock, policy.ReasonCategory, false, true)
		})
	}
}

func itoa(i uint32) string {
	var buf [10]byte
	n := len(buf)
	for {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			break
		}
	}
	return string(buf[n:])
}

// BenchmarkCountSeen is the count of a plain allow whose key was seen
// before in its interval, the common case, with one shard's share of a
// million keys (2^18: far more than the caches hold), in random order:
// the dense array by handle and the count table (countTable), against a
// Go map of the same keys and counts, which the table replaced.
func BenchmarkCountSeen(b *testing.B) {
	const n = 1 << 18
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]countHash, n)
	for i := range keys {
		keys[i] = countHash{rng.Uint64(), rng.Uint64()}
	}
	order := make([]uint32, 1<<20)
	for i := range order {
		order[i] = uint32(rng.IntN(n))
	}
	b.Run("table", func(b *testing.B) {
		var t countTable
		add := func(k countHash) {
			sl := t.slot(k)
			if sl.n == 0 {
				sl.h = k
				t.n++
			}
			sl.n++
		}
		for _, k := range keys {
			add(k)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			add(keys[order[i&(len(order)-1)]])
		}
	})
	// The dense array by handle (a subscriber's first key of the
	// interval): one shard's share of a million handles.
	b.Run("dense", func(b *testing.B) {
		m := &countMap{}
		add := func(i uint32, h uint64) {
			if int(i) >= len(m.dense) {
				m.growDense(i)
			}
			d := &m.dense[i]
			if d.n != 0 && d.h != h {
				b.Fatal("wrong key")
			}
			d.h = h
			d.n++
		}
		for i, k := range keys {
			add(uint32(i), k[0])
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			j := order[i&(len(order)-1)]
			add(j, keys[j][0])
		}
	})
	b.Run("go-map", func(b *testing.B) {
		m := make(map[countHash]uint64)
		for _, k := range keys {
			m[k]++
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			m[keys[order[i&(len(order)-1)]]]++
		}
	})
}
