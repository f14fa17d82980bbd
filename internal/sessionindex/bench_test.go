package sessionindex

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

// spread is how a benchmark table's allocations are spread.
type spread int

const (
	// realistic: an operator's pools. IPv4 /32s inside five blocks (a /12,
	// /13, /14, /15 and /16: 2M addresses, a quarter of them allocated
	// at 1M sessions) and IPv6 /64s inside one /32.
	realistic spread = iota
	// uniform: IPv4 /32s random over the whole space and IPv6 /64s random
	// under 2001::/16, the worst case for locality.
	uniform
)

func (d spread) String() string { return [...]string{"realistic", "uniform"}[d] }

var realisticV4 = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/12"), netip.MustParsePrefix("10.32.0.0/13"),
	netip.MustParsePrefix("172.16.0.0/14"), netip.MustParsePrefix("185.10.0.0/15"),
	netip.MustParsePrefix("203.0.0.0/16"),
}

// benchSessions returns n sessions shaped like an operator's table: one
// allocation each, alternately an IPv4 /32 and an IPv6 /64 spread as d
// says; 1 000 orgs, 50 locations, an expiry; every session has a username
// and a device id (the worst case for the secondary indexes). heavy adds a
// distinct 36-character trace id and opaque id to every session. The same
// arguments always yield the same sessions.
func benchSessions(n int, d spread, heavy bool) []*session.Session {
	r := rand.New(rand.NewPCG(42, uint64(n)))
	out := make([]*session.Session, n)
	seen := make(map[netip.Prefix]bool, n)
	updated := time.Unix(1_700_000_000, 0).UTC()
	expires := updated.Add(24 * time.Hour)
	for i := range out {
		var p netip.Prefix
		for {
			p = randomAlloc(r, i%2 == 1, d)
			if !seen[p] {
				seen[p] = true
				break
			}
		}
		s := &session.Session{
			ID:          session.NewID(identity.Identity{Org: "org", Attributes: identity.Attributes{Location: fmt.Sprint(i)}}, p),
			Org:         fmt.Sprintf("org-%03d", i%1000),
			Revision:    1,
			Allocations: []netip.Prefix{p},
			Attributes:  identity.Attributes{Username: fmt.Sprintf("user-%07d", i), DeviceID: fmt.Sprintf("dev-%07d", i), Location: fmt.Sprintf("loc-%02d", i%50)},

			UpdatedAt: updated,
			ExpiresAt: &expires,
		}
		if heavy {
			s.TraceID = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
			s.OpaqueID = fmt.Sprintf("%08x-1111-4000-8000-%012x", i, i)
		}
		out[i] = s
	}
	return out
}

func randomAlloc(r *rand.Rand, v6 bool, d spread) netip.Prefix {
	if !v6 {
		var b [4]byte
		if d == uniform {
			binary.BigEndian.PutUint32(b[:], r.Uint32())
			return netip.PrefixFrom(netip.AddrFrom4(b), 32)
		}
		k := r.Uint32N(1<<20 + 1<<19 + 1<<18 + 1<<17 + 1<<16)
		for _, bl := range realisticV4 {
			if size := uint32(1) << (32 - bl.Bits()); k >= size {
				k -= size
				continue
			}
			a := bl.Addr().As4()
			binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(a[:])+k)
			break
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), 32)
	}
	var b [16]byte
	if d == uniform {
		b[0], b[1] = 0x20, 0x01
		binary.BigEndian.PutUint64(b[2:10], r.Uint64())
	} else {
		b[0], b[1], b[2], b[3] = 0x2a, 0x02, 0x12, 0x34
		binary.BigEndian.PutUint32(b[4:8], r.Uint32())
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), 64).Masked()
}

// table1M is a built 1M index and what the benchmarks need of its input.
type table1M struct {
	ix     *Index
	allocs []netip.Prefix
	ids    []string
	users  []string
}

var benchCache struct {
	sync.Mutex
	tables [2]*table1M
}

// bench1M builds the 1M-session index for d once per test binary run.
func bench1M(b *testing.B, d spread) *table1M {
	b.Helper()
	benchCache.Lock()
	defer benchCache.Unlock()
	if benchCache.tables[d] == nil {
		ss := benchSessions(1_000_000, d, false)
		t := &table1M{allocs: make([]netip.Prefix, len(ss)), ids: make([]string, len(ss)), users: make([]string, len(ss))}
		bl := NewBuilder(len(ss))
		for i, s := range ss {
			bl.Put(s)
			t.allocs[i], t.ids[i], t.users[i] = s.Allocations[0], s.ID, s.Username
		}
		t.ix = bl.Index()
		benchCache.tables[d] = t
		// Collect the input sessions and hand the memory back to the OS now:
		// the background sweeper and scavenger would otherwise compete with
		// the first benchmark that runs.
		debug.FreeOSMemory()
	}
	return benchCache.tables[d]
}

// heap returns, after a full collection, the bytes of live objects
// (HeapAlloc) and of the spans that hold them (HeapInuse: live objects plus
// free room in partly used spans).
func heap() (live, inUse uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapInuse
}

// BenchmarkMemory1M reports everything the index holds for 1 000 000
// sessions (entries, their strings and every structure): total-MB is the live
// heap (HeapAlloc) after a full GC with the index built, minus before, with
// the input sessions released (a node decodes each session, hands it to the
// Builder and drops it); inuse-MB is the same for HeapInuse (live objects
// plus free room in partly used spans). as-sessions-MB is what the same
// sessions take as *session.Session, for comparison. The other metrics split
// the total by part (approximate: from the capacities of their arrays,
// without allocator rounding and interned strings, and for the org, username
// and device-id trees from the heap a copy of them takes); the routing table
// (bart) is the rest of total-MB.
func BenchmarkMemory1M(b *testing.B) {
	for _, c := range []struct {
		d     spread
		heavy bool
		prod  string // every session's producer
	}{{realistic, false, ""}, {uniform, false, ""}, {realistic, true, ""}, {realistic, false, session.ProducerRADIUS}} {
		name := c.d.String()
		if c.heavy {
			name += "+trace+opaque"
		}
		if c.prod != "" {
			name += "+producer"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				l0, u0 := heap()
				ss := benchSessions(1_000_000, c.d, c.heavy)
				for _, s := range ss {
					s.Producer = c.prod
				}
				l1, _ := heap()
				bl := NewBuilder(len(ss))
				for _, s := range ss {
					bl.Put(s)
				}
				ix := bl.Index()
				bl, ss = nil, nil
				l2, u2 := heap()
				runtime.KeepAlive(ix)
				b.ReportMetric(float64(l2-l0)/(1<<20), "total-MB")
				b.ReportMetric(float64(l2-l0)/1e6, "B/session")
				b.ReportMetric(float64(u2-u0)/(1<<20), "inuse-MB")
				b.ReportMetric(float64(l1-l0)/(1<<20), "as-sessions-MB")
				for _, part := range memParts(ix) {
					b.ReportMetric(float64(part.bytes)/(1<<20), part.name+"-MB")
				}
				_, _ = bl, ss
			}
		})
	}
}

// htabBytes is the size of a table's cells and inner nodes.
func htabBytes[K comparable](h *htab[K]) int {
	n := 0
	var walk func(*hkid[K])
	walk = func(k *hkid[K]) {
		n += int(unsafe.Sizeof(hcell[K]{})) * cap(k.cells)
		if k.inner != nil {
			n += int(unsafe.Sizeof(hnode[K]{}))
			for i := range k.inner.kids {
				walk(&k.inner.kids[i])
			}
		}
	}
	walk(&h.root)
	return n
}

type memPart struct {
	name  string
	bytes int
}

// memParts estimates the bytes of each part of ix: from array capacities,
// except the secondary trees.
func memParts(ix *Index) []memPart {
	var entries, strs, exts int
	for _, d := range ix.slots.dirs {
		entries += int(unsafe.Sizeof(slotDir{}))
		for ci, c := range &d.chunks {
			if c != nil {
				entries += int(unsafe.Sizeof(slotChunk{}))
			}
			if x := d.sides[ci]; x != nil {
				strs += int(unsafe.Sizeof(chunkSide{})) + cap(x.rest)
				exts += 8 * cap(x.ext)
				for _, x := range x.ext {
					exts += int(unsafe.Sizeof(extra{})) + 32*cap(x.allocs)
				}
			}
		}
	}
	// google/btree does not expose its nodes, so the trees are measured as
	// the live heap taken by copies built from their keys the way
	// Builder.Index builds them (the index measured here is a built one).
	var keys [3][]uint64
	for i, tr := range [3]slotTree{ix.byOrg, ix.byUser, ix.byDevice} {
		if tr.t != nil {
			tr.t.Ascend(func(k uint64) bool { keys[i] = append(keys[i], k); return true })
		}
	}
	var copies [3]slotTree
	l0, _ := heap()
	for i, ks := range keys {
		copies[i] = buildSlotTree(ks)
	}
	l1, _ := heap()
	runtime.KeepAlive(&copies)
	runtime.KeepAlive(&keys)
	return []memPart{
		{"entries", entries},
		{"trace+opaque", strs},
		{"ext", exts},
		{"byID", htabBytes(&ix.byID)},
		{"byOrg+User+Device", int(l1 - l0)},
	}
}

// BenchmarkBuild1M is the bulk load of 1 000 000 sessions with a Builder.
func BenchmarkBuild1M(b *testing.B) {
	ss := benchSessions(1_000_000, realistic, false)
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

// BenchmarkLookupIP1M measures LookupIP on 1M-session indexes, for both
// distributions. "all-1M" draws the address from all sessions at random,
// so nearly every lookup misses the CPU caches and the figure is bound by
// memory latency; "active-10k" draws from 10 000 subscribers (a busy
// resolver's working set); "+fields" also reads what the resolver reads
// (id, org, username, device id, location). "go-map" is a plain Go map
// lookup with the all-1M pattern: the memory-latency floor on this machine.
func BenchmarkLookupIP1M(b *testing.B) {
	bench1M(b, realistic) // both tables exist during every sub-benchmark
	bench1M(b, uniform)
	for _, d := range []spread{realistic, uniform} {
		t := bench1M(b, d)
		r := rand.New(rand.NewPCG(1, 1))
		addrs := func(pool int) []netip.Addr {
			q := make([]netip.Addr, 1<<20)
			for i := range q {
				a := t.allocs[r.IntN(pool)].Addr()
				if a.Is6() {
					a = a.Next() // an address inside the /64, not its first
				}
				q[i] = a
			}
			return q
		}
		run := func(q []netip.Addr, fields bool) func(*testing.B) {
			return func(b *testing.B) {
				i, n := 0, 0
				for b.Loop() {
					e, ok := t.ix.LookupIP(q[i&(len(q)-1)])
					if !ok {
						b.Fatal("miss")
					}
					if fields {
						n += len(e.ID()) + len(e.Org()) + len(e.Username()) + len(e.DeviceID()) + len(e.Location())
					}
					i++
				}
				runtime.KeepAlive(n)
			}
		}
		all, active := addrs(len(t.allocs)), addrs(10_000)
		b.Run(d.String()+"/all-1M", run(all, false))
		b.Run(d.String()+"/all-1M+fields", run(all, true))
		b.Run(d.String()+"/active-10k", run(active, false))
		b.Run(d.String()+"/active-10k+fields", run(active, true))
		if d == uniform {
			b.Run("go-map/all-1M", func(b *testing.B) {
				m := make(map[netip.Addr]int32, len(t.allocs))
				for i, p := range t.allocs {
					m[p.Addr()] = int32(i)
				}
				q := make([]netip.Addr, len(all))
				for i := range q {
					q[i] = t.allocs[r.IntN(len(t.allocs))].Addr()
				}
				i := 0
				for b.Loop() {
					if _, ok := m[q[i&(len(q)-1)]]; !ok {
						b.Fatal("miss")
					}
					i++
				}
			})
		}
	}
}

// BenchmarkLookupIPLengths1M shows what a lookup costs per prefix length in
// use: 1M IPv4 sessions spread evenly over two lengths (/32 and /24, like
// IPv6 /64 and /56 delegations) or eight (/32 to /26 and /24), random over
// the whole space, looked up at addresses of the /24 ones, so that every
// lookup probes all the longer lengths in vain first. "miss" looks up
// addresses that no session holds.
func BenchmarkLookupIPLengths1M(b *testing.B) {
	for _, lengths := range [][]int{{32, 24}, {32, 31, 30, 29, 28, 27, 26, 24}} {
		r := rand.New(rand.NewPCG(5, 5))
		bl := NewBuilder(1_000_000)
		var short []netip.Addr
		for i := range 1_000_000 {
			var a [4]byte
			binary.BigEndian.PutUint32(a[:], r.Uint32())
			bits := lengths[i%len(lengths)]
			p := netip.PrefixFrom(netip.AddrFrom4(a), bits).Masked()
			bl.Put(&session.Session{ID: fmt.Sprint(i), Org: "o", Allocations: []netip.Prefix{p}})
			if bits == 24 {
				short = append(short, p.Addr().Next())
			}
		}
		ix := bl.Index()
		q := make([]netip.Addr, 1<<20)
		miss := make([]netip.Addr, 1<<20)
		for i := range q {
			q[i] = short[r.IntN(len(short))]
			for {
				var a [4]byte
				binary.BigEndian.PutUint32(a[:], r.Uint32())
				if _, ok := ix.LookupIP(netip.AddrFrom4(a)); !ok {
					miss[i] = netip.AddrFrom4(a)
					break
				}
			}
		}
		name := fmt.Sprintf("%d-lengths", len(lengths))
		b.Run(name+"/all-1M", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := ix.LookupIP(q[i&(len(q)-1)]); !ok {
					b.Fatal("miss")
				}
				i++
			}
		})
		b.Run(name+"/miss", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := ix.LookupIP(miss[i&(len(miss)-1)]); ok {
					b.Fatal("hit")
				}
				i++
			}
		})
	}
}

// BenchmarkGet1M measures the string indexes on the 1M index (random keys).
func BenchmarkGet1M(b *testing.B) {
	t := bench1M(b, realistic)
	r := rand.New(rand.NewPCG(2, 2))
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			if _, ok := t.ix.Get(t.ids[r.IntN(len(t.ids))]); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("Get+Session", func(b *testing.B) {
		for b.Loop() {
			if e, ok := t.ix.Get(t.ids[r.IntN(len(t.ids))]); !ok || e.Session() == nil {
				b.Fatal("miss")
			}
		}
	})
	b.Run("ByUsername", func(b *testing.B) {
		for b.Loop() {
			if len(t.ix.ByUsername(t.users[r.IntN(len(t.users))])) != 1 {
				b.Fatal("miss")
			}
		}
	})
	b.Run("ByOrg-1000", func(b *testing.B) {
		for b.Loop() {
			if len(t.ix.ByOrg(fmt.Sprintf("org-%03d", r.IntN(1000)))) != 1000 {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkApply1M measures live updates on the 1M index: one session moved
// to a new allocation (its old route removed, the new one added, the entry
// rewritten), a batch of 100 such moves, one delete, one new session.
func BenchmarkApply1M(b *testing.B) {
	t := bench1M(b, realistic)
	ss := benchSessions(1_000_000, realistic, false)
	r := rand.New(rand.NewPCG(3, 3))
	moved := func() *session.Session {
		old := ss[r.IntN(len(ss))]
		s := *old
		s.Allocations = []netip.Prefix{randomAlloc(r, r.IntN(2) == 1, realistic)}
		s.Revision++
		return &s
	}
	b.Run("update-1", func(b *testing.B) {
		ups := make([]*session.Session, 1)
		for b.Loop() {
			ups[0] = moved()
			t.ix.Apply(ups, nil)
		}
	})
	b.Run("update-100", func(b *testing.B) {
		ups := make([]*session.Session, 100)
		for b.Loop() {
			for i := range ups {
				ups[i] = moved()
			}
			t.ix.Apply(ups, nil)
		}
	})
	b.Run("delete-1", func(b *testing.B) {
		dels := make([]string, 1)
		for b.Loop() {
			dels[0] = t.ids[r.IntN(len(t.ids))]
			t.ix.Apply(nil, dels)
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
			t.ix.Apply(ups, nil)
		}
	})
}
