package feeds

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// The index benchmarks (docs/feed-index.md has the figures and commands).
// Each size is a sub-benchmark, so that `go test ./...` runs none of them
// and `-bench 'Index$/1M'` runs the quick variant:
//
//	go test -run '^$' -bench 'BenchmarkIndex$/10M' -benchtime 1s ./internal/readmodel/feeds/
//	go test -run '^$' -bench 'BenchmarkIndexMap/10M' -benchtime 1s ./internal/readmodel/feeds/
//	go test -run '^$' -bench 'BenchmarkIndexColdLoad/10M' -benchtime 1x ./internal/readmodel/feeds/
//	go test -run '^$' -bench 'BenchmarkIndexSteady/10M' -benchtime 1x ./internal/readmodel/feeds/
//
// Steady applies 60 deltas in a row. The side-by-side figures against the
// index before this one came from BenchmarkIndexVersus, which lived with a
// test-only copy of the old index in commit 9a9d012 (docs/feed-index.md).
//
// BenchmarkIndex builds the index once (timed and measured, reported by
// its "build" sub-benchmark); the lookups, Apply and the machine's memory
// latency are its other sub-benchmarks. The lookup p50/p99 come from
// 200 000 lookups timed one by one; ns/op is the mean of a loop, in which
// one lookup's wait for memory overlaps the next one's.
var indexBenchSizes = []struct {
	name string
	n    int
}{{"1M", 1_000_000}, {"10M", 10_000_000}}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

type benchQuery struct{ name, path string }

// benchQueries is a random mix of n queries, hits with probability hit%.
func benchQueries(keys, n, hit int) []benchQuery {
	r := synthRand{s: 42}
	qs := make([]benchQuery, n)
	for i := range qs {
		k := int(r.next() >> 1)
		qs[i].name, qs[i].path = synthQuery(keys, k, r.n(100) >= hit)
	}
	return qs
}

// percentiles times lookups of qs one by one, in order: p50 and p99 in
// ns, and the p50 of the timer alone (time.Now twice), which each figure
// includes. The query's own bytes, every cache line of its name and of
// its path, are read before the clock starts, so that fetching the query
// from memory is not counted as the lookup's: a resolver looks up a name
// and a path it has just parsed. (Before, the path was not read: a hit on
// a name with path entries, which compares the request's path with its
// entries', waited for the query's path too.)
func percentiles(qs []benchQuery, n int, lookup func(q *benchQuery)) (p50, p99, timer float64) {
	d := make([]time.Duration, n)
	sink := 0
	for i := range d {
		q := &qs[i%len(qs)]
		sink += touch(q.name) + touch(q.path)
		t0 := time.Now()
		lookup(q)
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	p50, p99 = float64(d[n/2]), float64(d[n*99/100])
	for i := range d {
		t0 := time.Now()
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	runtime.KeepAlive(sink)
	return p50, p99, float64(d[n/2])
}

// touch reads a byte of every cache line s spans (one every 64 bytes and
// its last), so that s is in the cache.
func touch(s string) int {
	if s == "" {
		return 0
	}
	sum := int(s[len(s)-1])
	for i := 0; i < len(s); i += 64 {
		sum += int(s[i])
	}
	return sum
}

// benchDelta is a delta of n changes to a feed of keys keys, shaped like a
// day's: overwrites of present keys, new names (some with paths), removals,
// new paths on present names, removals of absent keys.
func benchDelta(keys, n int) []feed.Line {
	r := synthRand{s: 4242}
	out := make([]feed.Line, n)
	for j := range out {
		i := r.n(keys)
		l := synthLine(i)
		switch p := r.n(100); {
		case p < 35:
			l.Codes = []uint16{uint16(r.n(60))}
		case p < 65:
			l = synthLine(keys + j)
		case p < 85:
			l = feed.Line{Name: l.Name, Path: l.Path, Remove: true}
		case p < 95:
			l.Path = fmt.Sprintf("/new/%d", j)
		default:
			l = feed.Line{Name: synthBase(synthMax - 1 - j), Remove: true}
		}
		out[j] = l
	}
	return out
}

func BenchmarkIndex(b *testing.B) {
	for _, size := range indexBenchSizes {
		b.Run(size.name, func(b *testing.B) { benchIndex(b, size.n) })
	}
}

func benchIndex(b *testing.B, n int) {
	before := liveHeap()
	t0 := time.Now()
	bld := NewBuilder(n)
	nameBytes := 0
	for i := range n {
		l := synthLine(i)
		nameBytes += len(l.Name) + len(l.Path)
		bld.Set(l)
	}
	ix := bld.Index()
	buildTime := time.Since(t0)
	indexBytes := liveHeap() - before
	if ix.Len() != n {
		b.Fatalf("Len %d, want %d", ix.Len(), n)
	}

	b.Run("build", func(b *testing.B) {
		b.ReportMetric(float64(indexBytes)/float64(n), "bytes/entry")
		b.ReportMetric(float64(nameBytes)/float64(n), "keybytes/entry")
		b.ReportMetric(float64(ix.SizeBytes())/float64(n), "estimate-bytes/entry")
		b.ReportMetric(float64(len(ix.shards)), "shards")
		b.ReportMetric(buildTime.Seconds(), "build-s")
		b.ReportMetric(float64(hugeBytes())/float64(n), "huge-bytes/entry")
	})

	b.Run("dram-latency", benchDRAMLatency)

	const nq = 1 << 20
	for _, mix := range []struct {
		name string
		hit  int
	}{{"hit", 100}, {"miss", 0}, {"mix", 50}} {
		qs := benchQueries(n, nq, mix.hit)
		b.Run("lookup-"+mix.name, func(b *testing.B) {
			b.ReportAllocs()
			found := 0
			for i := 0; b.Loop(); i++ {
				q := &qs[i&(nq-1)]
				if _, ok := ix.Lookup(q.name, q.path); ok {
					found++
				}
			}
			if mix.hit == 100 && found != b.N || mix.hit == 0 && found != 0 {
				b.Fatalf("%d found in %d", found, b.N)
			}
			p50, p99, timer := percentiles(qs, 200_000, func(q *benchQuery) { ix.Lookup(q.name, q.path) })
			b.ReportMetric(p50, "p50-ns")
			b.ReportMetric(p99, "p99-ns")
			b.ReportMetric(timer, "timer-ns")
		})
	}

	// The same lookups over 4096 names only, which stay in the caches: a
	// resolver's popular names, and the index's own cost without the
	// wait for memory.
	hot := benchQueries(n, 4096, 50)
	b.Run("lookup-hot", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			q := &hot[i&4095]
			ix.Lookup(q.name, q.path)
		}
		p50, p99, _ := percentiles(hot, 200_000, func(q *benchQuery) { ix.Lookup(q.name, q.path) })
		b.ReportMetric(p50, "p50-ns")
		b.ReportMetric(p99, "p99-ns")
	})

	// Apply of a delta of 10 000 lines, the target, and of 1 000, to show
	// the cost follows the delta.
	for _, d := range []struct {
		name string
		n    int
	}{{"1k", 1_000}, {"10k", 10_000}} {
		delta := benchDelta(n, d.n)
		b.Run("apply-"+d.name, func(b *testing.B) {
			// Retained: the heap with both Indexes alive less the heap with
			// the old one alone, against the old one's size. Allocated:
			// everything Apply allocates, kept or not, which bounds the peak
			// above the old Index while Apply runs.
			base := liveHeap()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			allocBefore := ms.TotalAlloc
			next := ix.Apply(delta)
			runtime.ReadMemStats(&ms)
			allocated := ms.TotalAlloc - allocBefore
			extra := int64(liveHeap()) - int64(base)
			touched := 0
			for s := range next.shards {
				if unsafe.StringData(next.shards[s]) != unsafe.StringData(ix.shards[s]) {
					touched++
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if ix.Apply(delta).Len() != next.Len() {
					b.Fatal("one delta applied twice to one Index gives two sizes")
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(extra)/float64(indexBytes)*100, "retained-%")
			b.ReportMetric(float64(allocated)/float64(indexBytes)*100, "allocated-%")
			// The shards Apply rewrote (index_apply.go): none until their
			// share of the overlay comes due.
			b.ReportMetric(float64(touched)/float64(len(ix.shards))*100, "shards-touched-%")
		})
	}

	// Lookups while another goroutine applies the 10 000-line delta over
	// and over: a reader holds an *Index, so it never waits for the writer.
	delta := benchDelta(n, 10_000)
	qs := benchQueries(n, nq, 50)
	b.Run("lookup-during-apply", func(b *testing.B) {
		var stop atomic.Bool
		var applies atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				ix.Apply(delta)
				applies.Add(1)
			}
		})
		for i := 0; b.Loop(); i++ {
			q := &qs[i&(nq-1)]
			ix.Lookup(q.name, q.path)
		}
		p50, p99, _ := percentiles(qs, 200_000, func(q *benchQuery) { ix.Lookup(q.name, q.path) })
		stop.Store(true)
		wg.Wait()
		b.ReportMetric(p50, "p50-ns")
		b.ReportMetric(p99, "p99-ns")
		b.ReportMetric(float64(applies.Load()), "applies")
	})
	runtime.KeepAlive(ix)
}

// benchDRAMLatency is the machine's yardstick, taken beside the lookups:
// one dependent load from a random place in 256 MB (a pointer chase), which
// is what a lookup of a cold name cannot avoid at least once. On a shared machine it moves
// with the neighbours' load (from under 200 ns to over 400 ns), and the
// lookups with it; their ratio to it is the figure to compare.
func benchDRAMLatency(b *testing.B) {
	const lines = 256 << 20 / 64
	next := make([]uint32, lines*16) // one used word per cache line
	r := synthRand{s: 9}
	perm := make([]uint32, lines)
	for i := range perm {
		perm[i] = uint32(i)
	}
	for i := len(perm) - 1; i > 0; i-- {
		j := r.n(i + 1)
		perm[i], perm[j] = perm[j], perm[i]
	}
	for i := range perm {
		next[perm[i]*16] = perm[(i+1)%len(perm)] * 16
	}
	p := uint32(0)
	for b.Loop() {
		p = next[p]
	}
	// Timed one by one as the lookups are: the figure to hold their p50
	// against.
	d := make([]time.Duration, 200_000)
	for i := range d {
		t0 := time.Now()
		p = next[p]
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2]), "p50-ns")
	runtime.KeepAlive(p)
}

// BenchmarkIndexMap is the peer: a plain map[string][]uint16 of the same
// keys, its lookups walking the parents with one map access each (no path
// rule, so a lower bound of what the rule would cost on a map).
func BenchmarkIndexMap(b *testing.B) {
	for _, size := range indexBenchSizes {
		b.Run(size.name, func(b *testing.B) {
			n := size.n
			before := liveHeap()
			m := make(map[string][]uint16)
			for i := range n {
				l := synthLine(i)
				m[l.Key()] = l.Codes
			}
			mapBytes := liveHeap() - before
			b.Run("build", func(b *testing.B) {
				b.ReportMetric(float64(mapBytes)/float64(n), "bytes/entry")
			})
			const nq = 1 << 20
			for _, mix := range []struct {
				name string
				hit  int
			}{{"hit", 100}, {"miss", 0}, {"mix", 50}} {
				qs := benchQueries(n, nq, mix.hit)
				lookup := func(q *benchQuery) bool {
					for name := q.name; ; {
						if _, ok := m[name]; ok {
							return true
						}
						dot := indexByte(name, '.')
						if dot < 0 {
							return false
						}
						name = name[dot+1:]
					}
				}
				b.Run("lookup-"+mix.name, func(b *testing.B) {
					for i := 0; b.Loop(); i++ {
						lookup(&qs[i&(nq-1)])
					}
					p50, p99, _ := percentiles(qs, 200_000, func(q *benchQuery) { lookup(q) })
					b.ReportMetric(p50, "p50-ns")
					b.ReportMetric(p99, "p99-ns")
				})
			}
			runtime.KeepAlive(m)
		})
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// BenchmarkIndexColdLoad is a node's start: the snapshot file on disk
// (written once, untimed) → gzip → feed.ReadLines → Builder → Index.
func BenchmarkIndexColdLoad(b *testing.B) {
	for _, size := range indexBenchSizes {
		b.Run(size.name, func(b *testing.B) {
			file := filepath.Join(b.TempDir(), feed.FileName(feed.TypeSnapshot, 1))
			writeSnapshot(b, file, size.n)
			st, err := os.Stat(file)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				ix := loadSnapshotFile(b, file, size.n)
				if ix.Len() != size.n {
					b.Fatalf("Len %d", ix.Len())
				}
			}
			b.ReportMetric(float64(st.Size())/1e6, "file-MB")
		})
	}
}

func writeSnapshot(b *testing.B, file string, n int) {
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	zw := gzip.NewWriter(bw)
	var line []byte
	for i := range n {
		line = feed.AppendLine(line[:0], synthLine(i))
		if _, err := zw.Write(line); err != nil {
			b.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func loadSnapshotFile(b *testing.B, file string, sizeHint int) *Index {
	f, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		b.Fatal(err)
	}
	bld := NewBuilder(sizeHint)
	err = feed.ReadLines(zr, false, func(l feed.Line) error {
		bld.Set(l)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return bld.Index()
}

// dramP50 is the yardstick of benchDRAMLatency, as a number: the p50 of
// one dependent read at a random place in 256 MB.
func dramP50() float64 {
	const lines = 256 << 20 / 64
	next := make([]uint32, lines*16)
	r := synthRand{s: 9}
	perm := make([]uint32, lines)
	for i := range perm {
		perm[i] = uint32(i)
	}
	for i := len(perm) - 1; i > 0; i-- {
		j := r.n(i + 1)
		perm[i], perm[j] = perm[j], perm[i]
	}
	for i := range perm {
		next[perm[i]*16] = perm[(i+1)%len(perm)] * 16
	}
	p := uint32(0)
	for range 1_000_000 {
		p = next[p]
	}
	d := make([]time.Duration, 200_000)
	for i := range d {
		t0 := time.Now()
		p = next[p]
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	runtime.KeepAlive(p)
	return float64(d[len(d)/2])
}

// hugeBytes is the process's memory on transparent huge pages (Linux's
// AnonHugePages), 0 where that is not known.
func hugeBytes() int {
	data, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			var kb int
			fmt.Sscan(rest, &kb)
			return kb << 10
		}
	}
	return 0
}

// benchDeltaRound is the round'th of a series of distinct deltas of n
// changes shaped like benchDelta's, to a feed of keys keys: each adds new
// keys of its own (numbered past keys and past every earlier round's).
func benchDeltaRound(keys, n, round int) []feed.Line {
	r := synthRand{s: uint64(4242 + 7919*round)}
	out := make([]feed.Line, n)
	for j := range out {
		l := synthLine(r.n(keys))
		switch p := r.n(100); {
		case p < 35:
			l.Codes = []uint16{uint16(r.n(60))}
		case p < 65:
			l = synthLine(keys + round*n + j)
		case p < 85:
			l = feed.Line{Name: l.Name, Path: l.Path, Remove: true}
		case p < 95:
			l.Path = fmt.Sprintf("/new/%d/%d", round, j)
		default:
			l = feed.Line{Name: synthBase(synthMax - 1 - j), Remove: true}
		}
		out[j] = l
	}
	return out
}

// BenchmarkIndexSteady applies 60 distinct deltas of 10 000 lines in a row
// to one index, as a node does over days, and reports what the overlay
// and the shard rewrites cost once they have reached their steady state:
// the largest share of the index one Apply allocated and retained, the
// Apply times, the memory per entry at the end, and the lookups then
// (with the yardstick).
//
//	go test -run '^$' -bench 'BenchmarkIndexSteady/10M' -benchtime 1x ./internal/readmodel/feeds/
func BenchmarkIndexSteady(b *testing.B) {
	for _, size := range indexBenchSizes {
		b.Run(size.name, func(b *testing.B) {
			for b.Loop() {
				benchSteady(b, size.n)
			}
		})
	}
}

func benchSteady(b *testing.B, n int) {
	const rounds = 60
	const nq = 1 << 20
	hits, misses := benchQueries(n, nq, 100), benchQueries(n, nq, 0)
	base := liveHeap()
	bld := NewBuilder(n)
	for i := range n {
		bld.Set(synthLine(i))
	}
	ix := bld.Index()
	var maxAlloc, maxRetained, sumMS, maxMS float64
	for r := range rounds {
		delta := benchDeltaRound(n, 10_000, r)
		size := float64(liveHeap() - base)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		allocBefore := ms.TotalAlloc
		t0 := time.Now()
		next := ix.Apply(delta)
		took := float64(time.Since(t0).Microseconds()) / 1000
		runtime.ReadMemStats(&ms)
		allocated := float64(ms.TotalAlloc - allocBefore)
		retained := float64(liveHeap()-base) - size
		runtime.KeepAlive(ix) // alive while next is measured, as a reader keeps it
		maxAlloc = max(maxAlloc, allocated/size*100)
		maxRetained = max(maxRetained, retained/size*100)
		sumMS += took
		maxMS = max(maxMS, took)
		ix = next
	}
	bytes := float64(liveHeap() - base)
	dram := dramP50()
	hit, _, _ := percentiles(hits, 200_000, func(q *benchQuery) { ix.Lookup(q.name, q.path) })
	miss, _, _ := percentiles(misses, 200_000, func(q *benchQuery) { ix.Lookup(q.name, q.path) })
	b.ReportMetric(bytes/float64(ix.Len()), "bytes/entry")
	b.ReportMetric(float64(ix.overNames)/float64(ix.names)*100, "overlay-%")
	b.ReportMetric(maxAlloc, "max-allocated-%")
	b.ReportMetric(maxRetained, "max-retained-%")
	b.ReportMetric(sumMS/rounds, "apply-mean-ms")
	b.ReportMetric(maxMS, "apply-max-ms")
	b.ReportMetric(dram, "dram-p50-ns")
	b.ReportMetric(hit, "hit-p50-ns")
	b.ReportMetric(miss, "miss-p50-ns")
	b.ReportMetric(float64(hugeBytes())/float64(ix.Len()), "huge-bytes/entry")
	runtime.KeepAlive(ix)
}
