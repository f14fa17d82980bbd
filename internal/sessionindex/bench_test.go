package sessionindex

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/session"
)

// benchSessions returns n sessions shaped like an operator's table: one
// allocation each, alternately an IPv4 /32 (random over the whole space, the
// worst case for the trie) and an IPv6 /64 under 2001::/16; 1 000 orgs; every
// session has a username and a device id (the worst case for the secondary
// indexes). The same n always yields the same sessions.
func benchSessions(n int) []*session.Session {
	r := rand.New(rand.NewPCG(42, uint64(n)))
	out := make([]*session.Session, n)
	seen := make(map[netip.Prefix]bool, n)
	for i := range out {
		var p netip.Prefix
		for {
			p = randomAlloc(r, i%2 == 1)
			if !seen[p] {
				seen[p] = true
				break
			}
		}
		out[i] = &session.Session{
			ID:          session.NewID("org", p, "", "", fmt.Sprint(i)),
			Org:         fmt.Sprintf("org-%03d", i%1000),
			Revision:    1,
			Allocations: []netip.Prefix{p},
			Username:    fmt.Sprintf("user-%07d", i),
			DeviceID:    fmt.Sprintf("dev-%07d", i),
			UpdatedAt:   time.Unix(1_700_000_000, 0).UTC(),
		}
	}
	return out
}

func randomAlloc(r *rand.Rand, v6 bool) netip.Prefix {
	if !v6 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], r.Uint32())
		return netip.PrefixFrom(netip.AddrFrom4(b), 32)
	}
	var b [16]byte
	b[0], b[1] = 0x20, 0x01
	binary.BigEndian.PutUint64(b[2:10], r.Uint64())
	return netip.PrefixFrom(netip.AddrFrom16(b), 64).Masked()
}

var benchCache struct {
	sync.Mutex
	sessions []*session.Session
	ix       *Index
}

// bench1M builds the 1M-session index once per test binary run.
func bench1M(b *testing.B) ([]*session.Session, *Index) {
	b.Helper()
	benchCache.Lock()
	defer benchCache.Unlock()
	if benchCache.ix == nil {
		ss := benchSessions(1_000_000)
		bl := NewBuilder(len(ss))
		for _, s := range ss {
			bl.Put(s)
		}
		benchCache.sessions, benchCache.ix = ss, bl.Index()
	}
	return benchCache.sessions, benchCache.ix
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkMemory1M reports the index's own memory for 1 000 000 sessions
// (heap in use after GC with the index, minus before, with the sessions
// already allocated), and the sessions' memory for reference.
func BenchmarkMemory1M(b *testing.B) {
	for b.Loop() {
		h0 := heapInUse()
		ss := benchSessions(1_000_000)
		h1 := heapInUse()
		bl := NewBuilder(len(ss))
		for _, s := range ss {
			bl.Put(s)
		}
		ix := bl.Index()
		bl = nil
		h2 := heapInUse()
		runtime.KeepAlive(ix)
		runtime.KeepAlive(ss)
		b.ReportMetric(float64(h2-h1)/(1<<20), "index-MB")
		b.ReportMetric(float64(h1-h0)/(1<<20), "sessions-MB")
		b.ReportMetric(float64(h2-h1)/1e6, "index-B/session")
		_ = bl
	}
}

// BenchmarkBuild1M is the bulk load of 1 000 000 sessions with a Builder.
func BenchmarkBuild1M(b *testing.B) {
	ss := benchSessions(1_000_000)
	for b.Loop() {
		bl := NewBuilder(len(ss))
		for _, s := range ss {
			bl.Put(s)
		}
		if bl.Index().Len() != len(ss) {
			b.Fatal("wrong size")
		}
	}
}

// BenchmarkLookupIP1M measures LookupIP on the 1M index. "active-10k" draws
// from 10 000 subscribers (a busy resolver's working set); "uniform-1M" draws
// from all sessions, so nearly every lookup misses the CPU caches and the
// figure is bound by memory latency ("go-map-uniform-1M", a plain Go map
// lookup with the same access pattern, shows that floor on this machine).
func BenchmarkLookupIP1M(b *testing.B) {
	ss, ix := bench1M(b)
	r := rand.New(rand.NewPCG(1, 1))
	addrs := func(pool int) []netip.Addr {
		q := make([]netip.Addr, 1<<20)
		for i := range q {
			p := ss[r.IntN(pool)].Allocations[0]
			a := p.Addr()
			if a.Is6() {
				a = a.Next() // an address inside the /64, not its first
			}
			q[i] = a
		}
		return q
	}
	run := func(b *testing.B, q []netip.Addr) {
		i := 0
		for b.Loop() {
			if _, ok := ix.LookupIP(q[i&(len(q)-1)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	}
	active, uniform := addrs(10_000), addrs(len(ss))
	b.Run("active-10k", func(b *testing.B) { run(b, active) })
	b.Run("uniform-1M", func(b *testing.B) { run(b, uniform) })
	b.Run("go-map-uniform-1M", func(b *testing.B) {
		m := make(map[netip.Addr]*session.Session, len(ss))
		for _, s := range ss {
			m[s.Allocations[0].Addr()] = s
		}
		q := make([]netip.Addr, len(uniform))
		for i := range q {
			q[i] = ss[r.IntN(len(ss))].Allocations[0].Addr()
		}
		i := 0
		for b.Loop() {
			if m[q[i&(len(q)-1)]] == nil {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// BenchmarkGet1M measures the string indexes on the 1M index.
func BenchmarkGet1M(b *testing.B) {
	ss, ix := bench1M(b)
	r := rand.New(rand.NewPCG(2, 2))
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			if _, ok := ix.Get(ss[r.IntN(len(ss))].ID); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("ByUsername", func(b *testing.B) {
		for b.Loop() {
			if len(ix.ByUsername(ss[r.IntN(len(ss))].Username)) != 1 {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkApply1M measures live updates on the 1M index: one session moved
// to a new allocation (delete old prefix, insert new one, rewrite its entries
// in every string index), a batch of 100 such moves, and one delete.
func BenchmarkApply1M(b *testing.B) {
	ss, ix := bench1M(b)
	r := rand.New(rand.NewPCG(3, 3))
	moved := func() *session.Session {
		old := ss[r.IntN(len(ss))]
		s := *old
		s.Allocations = []netip.Prefix{randomAlloc(r, r.IntN(2) == 1)}
		s.Revision++
		return &s
	}
	b.Run("update-1", func(b *testing.B) {
		ups := make([]*session.Session, 1)
		for b.Loop() {
			ups[0] = moved()
			ix.Apply(ups, nil)
		}
	})
	b.Run("update-100", func(b *testing.B) {
		ups := make([]*session.Session, 100)
		for b.Loop() {
			for i := range ups {
				ups[i] = moved()
			}
			ix.Apply(ups, nil)
		}
	})
	b.Run("delete-1", func(b *testing.B) {
		dels := make([]string, 1)
		for b.Loop() {
			dels[0] = ss[r.IntN(len(ss))].ID
			ix.Apply(nil, dels)
		}
	})
	b.Run("insert-1-new", func(b *testing.B) {
		ups := make([]*session.Session, 1)
		n := 0
		for b.Loop() {
			s := moved()
			s.ID = fmt.Sprintf("new-%d", n)
			n++
			ups[0] = s
			ix.Apply(ups, nil)
		}
	})
}
