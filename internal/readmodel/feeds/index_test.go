package feeds

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// indexRefKey is a key of the reference model.
type indexRefKey struct{ name, path string }

// indexRef is the brute-force reference: every key, looked up by the
// feeds' lookup rule (docs/feeds.md) spelt out the slow way.
type indexRef map[indexRefKey][]uint16

func (r indexRef) set(l feed.Line) {
	k := indexRefKey{l.Name, l.Path}
	if l.Remove {
		delete(r, k)
		return
	}
	r[k] = slices.Clone(l.Codes)
}

// paths lists each name's path entries, for lookup.
func (r indexRef) paths() map[string][]string {
	byName := map[string][]string{}
	for k := range r {
		if k.path != "" {
			byName[k.name] = append(byName[k.name], k.path)
		}
	}
	return byName
}

// lookup is the rule: for the name and then each parent, the longest of
// its paths that prefixes path, else its entry of its own.
func (r indexRef) lookup(byName map[string][]string, name, path string) (Match, bool) {
	for {
		best, found := "", false
		for _, p := range byName[name] {
			if strings.HasPrefix(path, p) && len(p) > len(best) {
				best, found = p, true
			}
		}
		if found {
			return Match{Name: name, Path: best, Codes: r[indexRefKey{name, best}]}, true
		}
		if c, ok := r[indexRefKey{name, ""}]; ok {
			return Match{Name: name, Codes: c}, true
		}
		dot := strings.IndexByte(name, '.')
		if dot < 0 {
			return Match{}, false
		}
		name = name[dot+1:]
	}
}

// checkIndexEqual compares ix with ref: its size, its keys (All), and lookups
// of every key's name, of names under them and of random names and paths.
func checkIndexEqual(t *testing.T, ix *Index, ref indexRef, rnd *rand.Rand, what string) {
	t.Helper()
	if ix.Len() != len(ref) {
		t.Fatalf("%s: Len %d, want %d", what, ix.Len(), len(ref))
	}
	got := indexRef{}
	for m := range ix.All() {
		k := indexRefKey{m.Name, m.Path}
		if _, dup := got[k]; dup {
			t.Fatalf("%s: All yields %v twice", what, k)
		}
		got[k] = m.Codes
	}
	if !maps.EqualFunc(got, ref, slices.Equal) {
		t.Fatalf("%s: All differs from the reference:\n got %v\nwant %v", what, got, ref)
	}
	byName := ref.paths()
	check := func(name, path string) {
		t.Helper()
		m, ok := ix.Lookup(name, path)
		wm, wok := ref.lookup(byName, name, path)
		if ok != wok || m.Name != wm.Name || m.Path != wm.Path || !slices.Equal(m.Codes, wm.Codes) {
			t.Fatalf("%s: Lookup(%q, %q) = %v, %v; want %v, %v", what, name, path, m, ok, wm, wok)
		}
	}
	for k := range ref {
		for _, p := range indexPropPaths {
			check(k.name, p)
			check("q."+k.name, p)
		}
	}
	for range 300 {
		check(indexPropName(rnd), indexPropPaths[rnd.IntN(len(indexPropPaths))])
	}
}

// The property test's names and paths are drawn from small sets, so that
// names are parents of one another, keys are overwritten and removed, and
// a name has path entries and an entry of its own. The long label makes
// names past the 24 bytes an entry holds as they are, within the 32 it
// holds packed, and past those.
var (
	indexPropLabels = []string{"a", "b", "c", "xy", "www", "com", "net", "co", "cdn-tracker_0123"}
	indexPropPaths  = []string{"", "/", "/a", "/a/b", "/ab", "/b", "/a/b/c", "/a/b/c/d", "/abc", "/b/a"}
)

func indexPropName(rnd *rand.Rand) string {
	labels := make([]string, 1+rnd.IntN(5))
	for i := range labels {
		labels[i] = indexPropLabels[rnd.IntN(len(indexPropLabels))]
	}
	if rnd.IntN(4) == 0 { // many distinct names, so that indexes span many shards
		labels[0] = fmt.Sprintf("n%d", rnd.IntN(3000))
	}
	return strings.Join(labels, ".")
}

func indexPropLine(rnd *rand.Rand, ref indexRef, removals bool) feed.Line {
	var l feed.Line
	if len(ref) > 0 && rnd.IntN(3) == 0 { // an existing key: overwrite or remove it
		for k := range ref {
			l.Name, l.Path = k.name, k.path
			break
		}
	} else {
		l.Name = indexPropName(rnd)
		if rnd.IntN(3) == 0 {
			l.Path = indexPropPaths[1+rnd.IntN(len(indexPropPaths)-1)]
		}
	}
	if removals && rnd.IntN(4) == 0 {
		l.Remove = true // of a present key or of an absent one
		return l
	}
	l.Codes = []uint16{uint16(rnd.IntN(5))}
	if rnd.IntN(3) == 0 {
		l.Codes = append(l.Codes, uint16(5+rnd.IntN(500)))
	}
	return l
}

// TestIndexProperty builds indexes with the Builder and changes them with
// random deltas, comparing each with the reference, and checks at the end
// that every older Index still answers as it did (Apply never writes the
// Index it is given).
func TestIndexProperty(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 1))
			ref := indexRef{}
			size := []int{0, 5, 60, 400, 3000}[seed%5]
			b := NewBuilder([]int{0, size, 10 * size}[seed%3])
			for range size {
				l := indexPropLine(rnd, ref, seed%2 == 0) // a snapshot may hold removals: they delete
				ref.set(l)
				b.Set(l)
			}
			ix := b.Index()
			checkIndexEqual(t, ix, ref, rnd, "built")

			type generation struct {
				ix  *Index
				ref indexRef
			}
			var old []generation
			for round := range 12 {
				old = append(old, generation{ix, maps.Clone(ref)})
				delta := make([]feed.Line, rnd.IntN([]int{3, 40, 400}[round%3]))
				for i := range delta {
					delta[i] = indexPropLine(rnd, ref, true)
					ref.set(delta[i])
				}
				ix = ix.Apply(delta)
				checkIndexEqual(t, ix, ref, rnd, fmt.Sprintf("round %d", round))
			}
			for i, g := range old {
				checkIndexEqual(t, g.ix, g.ref, rnd, fmt.Sprintf("generation %d after later Applys", i))
			}
		})
	}
}

// TestIndexSharded drives Apply over an index of many shards without a
// rebuild, the path a large feed takes, with shards touched by one line
// and by many.
func TestIndexSharded(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 7))
	ref := indexRef{}
	b := NewBuilder(5000)
	for i := range 5000 {
		l := feed.Line{Name: fmt.Sprintf("s%d.%s", i, indexPropName(rnd)), Codes: []uint16{uint16(i % 7)}}
		if i%10 == 0 {
			l.Path = indexPropPaths[1+i%(len(indexPropPaths)-1)]
		}
		ref.set(l)
		b.Set(l)
	}
	ix := b.Index()
	shards := len(ix.shards)
	if shards < 64 {
		t.Fatalf("%d shards for 5000 keys", shards)
	}
	for round := range 20 {
		delta := make([]feed.Line, 1+rnd.IntN(200))
		for i := range delta {
			delta[i] = indexPropLine(rnd, ref, true)
			ref.set(delta[i])
		}
		next := ix.Apply(delta)
		if len(next.shards) != shards {
			t.Fatalf("round %d: rebuilt to %d shards", round, len(next.shards))
		}
		touched := 0 // shards not shared with the previous Index
		for s := range next.shards {
			if unsafe.StringData(next.shards[s]) != unsafe.StringData(ix.shards[s]) {
				touched++
			}
		}
		if touched > len(delta) {
			t.Fatalf("round %d: %d shards differ after a delta of %d lines", round, touched, len(delta))
		}
		ix = next
		checkIndexEqual(t, ix, ref, rnd, fmt.Sprintf("round %d", round))
	}
}

// TestIndexResize grows an index from Empty far past its shard sizing and
// shrinks it again: Apply rebuilds it at both ends and stays exact.
func TestIndexResize(t *testing.T) {
	ix, ref := Empty(), indexRef{}
	var lines []feed.Line
	for i := range 20000 {
		l := feed.Line{Name: fmt.Sprintf("g%d.example.com", i), Codes: []uint16{uint16(i % 3)}}
		lines = append(lines, l)
		ref.set(l)
		if len(lines) == 500 {
			ix = ix.Apply(lines)
			lines = nil
		}
	}
	if n := len(ix.shards); n < 20000/maxPerShard {
		t.Fatalf("20000 names in %d shards: not resized", n)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	checkIndexEqual(t, ix, ref, rnd, "grown")
	for i := range 19990 {
		l := feed.Line{Name: fmt.Sprintf("g%d.example.com", i), Remove: true}
		lines = append(lines, l)
		ref.set(l)
	}
	ix = ix.Apply(lines)
	if n := len(ix.shards); n > 4 {
		t.Fatalf("10 names in %d shards: not resized", n)
	}
	checkIndexEqual(t, ix, ref, rnd, "shrunk")
}

// TestIndexDeepNames looks up names of more labels than a lookup probes
// at once, in an index of many shards, some empty.
func TestIndexDeepNames(t *testing.T) {
	// Lines set and removed again size the shards for many names; 30 stay.
	b := NewBuilder(3000)
	for i := range 3000 {
		b.Set(feed.Line{Name: fmt.Sprintf("l%d.deep.example", i), Codes: []uint16{uint16(i)}})
	}
	for i := 30; i < 3000; i++ {
		b.Set(feed.Line{Name: fmt.Sprintf("l%d.deep.example", i), Remove: true})
	}
	ix := b.Index()
	empty := 0
	for _, h := range ix.homes {
		if h == 0 {
			empty++
		}
	}
	if len(ix.shards) < 4 || empty == 0 {
		t.Fatalf("%d shards, %d empty: the test needs several and some empty", len(ix.shards), empty)
	}
	for i := range 30 {
		for depth := range 20 {
			name := strings.Repeat("x.", depth) + fmt.Sprintf("l%d.deep.example", i)
			if m, ok := ix.Lookup(name, ""); !ok || m.Codes[0] != uint16(i) {
				t.Fatalf("Lookup(%q) = %v %v", name, m, ok)
			}
			if _, ok := ix.Lookup(strings.Repeat("y.", depth)+"nowhere.example", ""); ok {
				t.Fatal("a miss hits")
			}
		}
	}
}

// TestIndexLookupRule is the lookup rule's edge cases.
func TestIndexLookupRule(t *testing.T) {
	long := strings.Repeat("l", 63) + "." + strings.Repeat("m", 63) + "." + strings.Repeat("n", 63) + ".com" // 2-byte length
	deep := strings.Repeat("d.", 120) + "deep.org"
	b := NewBuilder(0)
	for _, l := range []feed.Line{
		{Name: "example.com", Codes: []uint16{1}},
		{Name: "ads.example.com", Codes: []uint16{2}},
		{Name: "example.com", Path: "/a", Codes: []uint16{3}},
		{Name: "example.com", Path: "/a/b", Codes: []uint16{4}},
		{Name: "example.com", Path: "/", Codes: []uint16{5, 6}},
		{Name: "paths.net", Path: "/x", Codes: []uint16{7}}, // no entry of its own
		{Name: "net", Codes: []uint16{8}},
		{Name: long, Codes: []uint16{9}},
		{Name: "deep.org", Codes: []uint16{10}},
		{Name: "gone.org", Codes: []uint16{11}},
		{Name: "gone.org", Remove: true},
		{Name: "twice.org", Codes: []uint16{12}},
		{Name: "twice.org", Codes: []uint16{13}},
	} {
		b.Set(l)
	}
	ix := b.Index()
	for _, tc := range []struct {
		name, path string
		key        string // "" for no match
		codes      []uint16
	}{
		{"example.com", "", "example.com", []uint16{1}},
		{"www.example.com", "", "example.com", []uint16{1}},                   // a parent
		{"ads.example.com", "", "ads.example.com", []uint16{2}},               // the most specific name wins
		{"x.ads.example.com", "/a/b", "ads.example.com", []uint16{2}},         // even against a parent's path entry
		{"example.com", "/a/b/c", "example.com/a/b", []uint16{4}},             // the longest path prefix
		{"example.com", "/a/c", "example.com/a", []uint16{3}},                 // a shorter one
		{"example.com", "/ab", "example.com/a", []uint16{3}},                  // prefixes are byte for byte
		{"example.com", "/z", "example.com/", []uint16{5, 6}},                 // "/" prefixes every path
		{"example.com", "", "example.com", []uint16{1}},                       // no path: the name's own entry
		{"sub.example.com", "/a/b", "example.com/a/b", []uint16{4}},           // a parent's path entry
		{"paths.net", "/x/y", "paths.net/x", []uint16{7}},                     // a path entry alone
		{"paths.net", "/y", "net", []uint16{8}},                               // no entry applies: the parent
		{"paths.net", "", "net", []uint16{8}},                                 // same without a path
		{"net", "", "net", []uint16{8}},                                       // a TLD entry
		{"a.b.c.net", "", "net", []uint16{8}},                                 // the walk to the top
		{"org", "", "", nil},                                                  // no entry
		{"gone.org", "", "", nil},                                             // removed in the snapshot
		{"twice.org", "", "twice.org", []uint16{13}},                          // the later line wins
		{"example.co", "", "", nil},                                           // a near name
		{"xample.com", "", "", nil},                                           // a suffix that is no parent
		{"", "", "", nil},                                                     // the empty name
		{long, "", long, []uint16{9}},                                         // a long name
		{"x." + long, "/p", long, []uint16{9}},                                // under it
		{deep, "", "deep.org", []uint16{10}},                                  // 122 labels deep
		{"example.com.", "", "", nil},                                         // a trailing dot is not the feed's form
		{"EXAMPLE.com", "", "", nil},                                          // nor upper case: the caller folds
		{"ads.example.com.evil.net", "/a", "net", []uint16{8}},                // a name's parents, not its prefixes
		{"example.com", "/a/b/c/d/e/f/g/h/i", "example.com/a/b", []uint16{4}}, // a long path
	} {
		m, ok := ix.Lookup(tc.name, tc.path)
		if ok != (tc.key != "") || ok && (m.Key() != tc.key || !slices.Equal(m.Codes, tc.codes)) {
			t.Errorf("Lookup(%q, %q) = %q %v %v; want %q %v", tc.name, tc.path, m.Key(), m.Codes, ok, tc.key, tc.codes)
		}
	}
	if ix.Len() != 10 {
		t.Errorf("Len = %d, want 10", ix.Len())
	}

	// A delta: the entry of its own removed, the paths stay; the last
	// path removed and no entry left, the name goes.
	ix2 := ix.Apply([]feed.Line{
		{Name: "example.com", Remove: true},
		{Name: "paths.net", Path: "/x", Remove: true},
		{Name: "absent.org", Remove: true},
		{Name: "absent.org", Path: "/p", Remove: true},
	})
	if m, ok := ix2.Lookup("example.com", "/q"); !ok || m.Key() != "example.com/" {
		t.Errorf("after removal of the bare entry: %q %v", m.Key(), ok)
	}
	if _, ok := ix2.Lookup("example.com", ""); ok {
		t.Errorf("after removal of the bare entry, a lookup without a path still matches")
	}
	if m, ok := ix2.Lookup("paths.net", "/x"); !ok || m.Key() != "net" {
		t.Errorf("after removal of the only path: %q %v, want net", m.Key(), ok)
	}
	if ix2.Len() != 8 {
		t.Errorf("Len after removals = %d, want 8", ix2.Len())
	}
	if m, ok := ix.Lookup("example.com", ""); !ok || m.Key() != "example.com" {
		t.Errorf("the old Index changed: %q %v", m.Key(), ok)
	}
}

// TestIndexCodesShared checks that a caller appending to a Match's codes
// cannot change the Index.
func TestIndexCodesShared(t *testing.T) {
	b := NewBuilder(2)
	b.Set(feed.Line{Name: "a.com", Codes: []uint16{1}})
	b.Set(feed.Line{Name: "b.com", Codes: []uint16{2}})
	ix := b.Index()
	m, _ := ix.Lookup("a.com", "")
	_ = append(m.Codes, 99)
	if m2, _ := ix.Lookup("b.com", ""); !slices.Equal(m2.Codes, []uint16{2}) {
		t.Fatalf("b.com's codes are %v after an append to a.com's", m2.Codes)
	}
}

func TestIndexEmpty(t *testing.T) {
	ix := Empty()
	if _, ok := ix.Lookup("example.com", "/"); ok || ix.Len() != 0 {
		t.Fatal("Empty is not empty")
	}
	ix2 := ix.Apply([]feed.Line{{Name: "example.com", Codes: []uint16{1}}})
	if _, ok := ix2.Lookup("www.example.com", ""); !ok || ix2.Len() != 1 {
		t.Fatal("Apply on Empty")
	}
	if _, ok := ix.Lookup("example.com", ""); ok {
		t.Fatal("Apply changed Empty")
	}
	if NewBuilder(0).Index().Len() != 0 {
		t.Fatal("an empty build")
	}
}

// TestIndexFingerprintCollisions builds a shard whose names share
// fingerprints and homes, which hashing makes rare but a 10-million-name
// feed meets a few times: lookups compare the names, and find each, in a
// slot or in a record.
func TestIndexFingerprintCollisions(t *testing.T) {
	var w shardWriter
	names := []string{"a", "b", "c", strings.Repeat("d", 30), "e", "f", "g", strings.Repeat("h", 300)}
	fps := []uint32{1, 5, 5, 5, 5, 1<<31 | 1, 1<<32 - 1, 1<<32 - 1}
	for i, n := range names {
		w.add(fps[i], &nameEntry{name: n, bare: uint32(i + 1)})
	}
	blob, homes := w.finish()
	for i, n := range names {
		o, ok := findSlot(blob, homeOf(fps[i], homes)*slotSize, fps[i], n)
		if !ok {
			t.Fatalf("%s not found", n)
		}
		var e nameEntry
		decodeSlot(blob, o, &e)
		if e.name != n || e.bare != uint32(i+1) {
			t.Fatalf("%s: slot holds %q, set %d", n, e.name, e.bare)
		}
	}
	for _, fp := range []uint32{1, 3, 5, 7, 1<<32 - 1} {
		if _, ok := findSlot(blob, homeOf(fp, homes)*slotSize, fp, "z"); ok {
			t.Fatalf("z found at %d", fp)
		}
	}
	// Copied slot by slot into another shard, as Apply does, they stay.
	for o, end := 0, shardSlots(blob)*slotSize; o < end; o += slotSize {
		if le32(blob, o) != 0 {
			w.addSlot(blob, o)
		}
	}
	blob2, homes2 := w.finish()
	if blob2 != blob || homes2 != homes {
		t.Fatal("a shard copied slot by slot differs")
	}
}

// TestIndexBuildHashCollision gives the build two names with one 64-bit hash,
// which no test can make maphash produce: the staged lines of a group are
// split by name.
func TestIndexBuildHashCollision(t *testing.T) {
	b := newBuilder(Empty().seed, 0)
	b.sb, b.stage = 0, make([][]byte, 1) // one bucket, in the order set
	b.set(feed.Line{Name: "one.com", Codes: []uint16{1}})
	b.set(feed.Line{Name: "two.com", Codes: []uint16{2}})
	b.set(feed.Line{Name: "one.com", Path: "/p", Codes: []uint16{3}})
	buf := slices.Concat(b.stage...)
	var refs []staged
	for off := 0; off < len(buf); off = skipStaged(buf, off) {
		refs = append(refs, staged{h: 1, off: off})
	}
	var e nameEntry
	name, rest := buildName(buf, refs, &e)
	if name != "one.com" || e.bare != 1 || len(e.paths) != 1 || len(rest) != 1 {
		t.Fatalf("first name: %q %+v, %d left", name, e, len(rest))
	}
	name, rest = buildName(buf, rest, &e)
	if name != "two.com" || e.bare != 2 || len(e.paths) != 0 || len(rest) != 0 {
		t.Fatalf("second name: %q %+v, %d left", name, e, len(rest))
	}
}

// TestIndexLookupDuringApply reads an Index from many goroutines while a writer
// applies deltas to it and publishes each new Index; every reader checks
// the Index it holds against that Index's own answers. Run with -race.
func TestIndexLookupDuringApply(t *testing.T) {
	b := NewBuilder(2000)
	for i := range 2000 {
		b.Set(feed.Line{Name: fmt.Sprintf("r%d.example.com", i), Codes: []uint16{0}})
	}
	var cur atomic.Pointer[Index]
	cur.Store(b.Index())
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := 0; !stop.Load(); k++ {
				ix := cur.Load()
				name := fmt.Sprintf("x.r%d.example.com", (k*7+g)%2000)
				m1, ok1 := ix.Lookup(name, "/p")
				m2, ok2 := ix.Lookup(name, "/p")
				if ok1 != ok2 || m1.Key() != m2.Key() || !slices.Equal(m1.Codes, m2.Codes) {
					t.Errorf("one Index answered %v then %v", m1, m2)
					return
				}
			}
		})
	}
	for round := range 200 {
		var delta []feed.Line
		for i := range 50 {
			n := fmt.Sprintf("r%d.example.com", (round*50+i)%2000)
			delta = append(delta, feed.Line{Name: n, Codes: []uint16{uint16(round)}}, feed.Line{Name: n, Path: "/p", Remove: round%2 == 0, Codes: []uint16{1}})
		}
		cur.Store(cur.Load().Apply(delta))
	}
	stop.Store(true)
	wg.Wait()
}

// TestIndexLookupNoAlloc is the hot path's promise: a lookup, hit or miss,
// allocates nothing.
func TestIndexLookupNoAlloc(t *testing.T) {
	b := NewBuilder(1000)
	for i := range 1000 {
		b.Set(synthLine(i))
	}
	ix := b.Index()
	queries := make([][2]string, 40)
	for i := range queries {
		queries[i][0], queries[i][1] = synthQuery(1000, i, i%2 == 0)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, q := range queries {
			ix.Lookup(q[0], q[1])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 40 lookups", allocs)
	}
}

// TestIndexSynthFeed checks the benchmark generator: distinct keys, the
// advertised share of paths, and that its misses miss.
func TestIndexSynthFeed(t *testing.T) {
	const n = 20000
	seen := map[string]bool{}
	paths := 0
	b := NewBuilder(n)
	for i := range n {
		l := synthLine(i)
		if err := feed.CheckName(l.Name); err != nil {
			t.Fatal(err)
		}
		if seen[l.Key()] {
			t.Fatalf("key %d, %s, repeats", i, l.Key())
		}
		seen[l.Key()] = true
		if l.Path != "" {
			paths++
		}
		b.Set(l)
	}
	if paths < n*4/100 || paths > n*6/100 {
		t.Fatalf("%d path keys in %d", paths, n)
	}
	ix := b.Index()
	if ix.Len() != n {
		t.Fatalf("Len %d", ix.Len())
	}
	for i := range 2000 {
		if name, path := synthQuery(n, i, false); !indexHas(ix, name, path) {
			t.Fatalf("hit query %q %q misses", name, path)
		}
		if name, path := synthQuery(n, i*7919, true); indexHas(ix, name, path) {
			t.Fatalf("miss query %q hits", name)
		}
	}
}

func indexHas(ix *Index, name, path string) bool {
	_, ok := ix.Lookup(name, path)
	return ok
}

// Empty is an Index with no entry: the start of the tests' histories
// (a node starts from a snapshot, through a Builder).
func Empty() *Index {
	seed := maphash.MakeSeed()
	return &Index{shards: []string{""}, homes: []uint32{0}, shift: 64, seed: seed, key: newNameHash(seed), setIDs: map[string]uint32{}}
}

// addSlot adds the full entries of the slot at o of another shard: the
// test's reference for a slot-by-slot copy.
func (w *shardWriter) addSlot(blob string, o int) {
	for e := o; e < o+slotSize; e += entrySize {
		if le32(blob, e) != 0 {
			w.addEntry(blob, e)
		}
	}
}
