package feeds

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// TestIndexOverlay drives an index of 2^maxShardBits shards through many
// deltas, the path of a large feed: the changed names go to the overlay
// (removals of a shard's names as tombstones), the shards whose overlay
// share comes due are rewritten, the overlay stays bounded, and the
// answers stay the reference's throughout.
func TestIndexOverlay(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 3))
	ref := indexRef{}
	const n = 6_000 // 2^maxShardBits shards of about 47 names
	b := NewBuilder(n)
	for i := range n {
		l := feed.Line{Name: fmt.Sprintf("o%d.%s", i, indexPropName(rnd)), Codes: []uint16{uint16(i % 5)}}
		if i%9 == 0 {
			l.Path = indexPropPaths[1+i%(len(indexPropPaths)-1)]
		}
		ref.set(l)
		b.Set(l)
	}
	ix := b.Index()
	if len(ix.shards) != 1<<maxShardBits {
		t.Fatalf("%d shards for %d keys", len(ix.shards), n)
	}
	var keys []indexRefKey
	for k := range ref {
		keys = append(keys, k)
	}
	rewrites, tombstones := 0, 0
	for round := range 40 {
		delta := make([]feed.Line, 1+rnd.IntN(100))
		for i := range delta {
			var l feed.Line
			switch p := rnd.IntN(10); {
			case p < 4: // remove a present key (a shard's name, as often as not)
				k := keys[rnd.IntN(len(keys))]
				l = feed.Line{Name: k.name, Path: k.path, Remove: true}
			case p < 7: // overwrite or re-add one
				k := keys[rnd.IntN(len(keys))]
				l = feed.Line{Name: k.name, Path: k.path, Codes: []uint16{uint16(round)}}
			default:
				l = indexPropLine(rnd, ref, true)
			}
			delta[i] = l
			ref.set(l)
		}
		next := ix.Apply(delta)
		if len(next.shards) != len(ix.shards) {
			t.Fatalf("round %d: rebuilt to %d shards", round, len(next.shards))
		}
		for s := range next.shards {
			if unsafe.StringData(next.shards[s]) != unsafe.StringData(ix.shards[s]) {
				rewrites++
			}
		}
		if limit := max(overlayMin, next.names/overlayMax); next.overNames > limit {
			t.Fatalf("round %d: %d names in the overlay, over %d", round, next.overNames, limit)
		}
		for o, end := 0, shardSlots(next.over)*slotSize; o < end; o += slotSize {
			if le32(next.over, o) != 0 {
				var e nameEntry
				decodeSlot(next.over, o, &e)
				if e.empty() {
					tombstones++
				}
			}
		}
		ix = next
		checkIndexEqual(t, ix, ref, rnd, fmt.Sprintf("round %d", round))
	}
	if rewrites == 0 || tombstones == 0 {
		t.Fatalf("%d shard rewrites, %d tombstones seen: the test does not reach them", rewrites, tombstones)
	}
}

// TestIndexLargeDelta: a delta that changes most of an index at once
// makes every shard due: all are rewritten, and no overlay is left.
func TestIndexLargeDelta(t *testing.T) {
	ref := indexRef{}
	b := NewBuilder(10_000)
	for i := range 10_000 {
		l := feed.Line{Name: fmt.Sprintf("r%d.example.net", i), Codes: []uint16{1}}
		ref.set(l)
		b.Set(l)
	}
	ix := b.Index()
	var delta []feed.Line
	for i := range 9_000 {
		l := feed.Line{Name: fmt.Sprintf("r%d.example.net", i), Codes: []uint16{2}}
		delta = append(delta, l)
		ref.set(l)
	}
	ix = ix.Apply(delta)
	if ix.overNames != 0 {
		t.Fatalf("%d names left in the overlay", ix.overNames)
	}
	checkIndexEqual(t, ix, ref, rand.New(rand.NewPCG(1, 1)), "after the delta")
}

// TestIndexDeepOverlay: a name of more labels than a lookup's batch, with
// entries in both batches and in the overlay: the most specific wins, and
// a tombstone in a left batch lets a right batch's entry answer.
func TestIndexDeepOverlay(t *testing.T) {
	deep := strings.Repeat("x.", 12) + "left.mid.right.example"
	ix := NewBuilder(0).Index().Apply([]feed.Line{
		{Name: "example", Codes: []uint16{1}},
		{Name: "x.x.left.mid.right.example", Codes: []uint16{2}},
	})
	if m, ok := ix.Lookup(deep, ""); !ok || m.Name != "x.x.left.mid.right.example" {
		t.Fatalf("Lookup = %q %v, want the left batch's entry", m.Name, ok)
	}
	ix2 := ix.Apply([]feed.Line{{Name: "x.x.left.mid.right.example", Remove: true}})
	if m, ok := ix2.Lookup(deep, ""); !ok || m.Name != "example" {
		t.Fatalf("after the removal: %q %v, want example", m.Name, ok)
	}
	if m, ok := ix.Lookup(deep, ""); !ok || m.Name != "x.x.left.mid.right.example" {
		t.Fatalf("the older Index changed: %q %v", m.Name, ok)
	}
}

// TestIndexHashSteps: the hash of every suffix a lookup computes step by
// step from the right is the hash the Builder computes of the whole
// suffix, for labels of every length class the step reads differently,
// empty labels and dots at either end.
func TestIndexHashSteps(t *testing.T) {
	k := newNameHash(maphash.MakeSeed())
	rnd := rand.New(rand.NewPCG(5, 5))
	labels := []string{"", "a", "ab", "abc", "abcd", "abcdefg", "abcdefgh", "abcdefghi", strings.Repeat("p", 16), strings.Repeat("q", 17), strings.Repeat("r", 33), strings.Repeat("s", 63)}
	seen := map[uint64]string{}
	for range 2000 {
		parts := make([]string, 1+rnd.IntN(6))
		for i := range parts {
			parts[i] = labels[rnd.IntN(len(labels))]
		}
		name := strings.Join(parts, ".")
		h, end := k.root, len(name)
		for {
			start := labelStart(name, end)
			h = k.step(h, name[start:end])
			if want := k.name(name[start:]); h != want {
				t.Fatalf("%q: step by step %x, whole %x", name[start:], h, want)
			}
			if other, ok := seen[h]; ok && other != name[start:] {
				t.Fatalf("%q and %q hash alike", other, name[start:])
			}
			seen[h] = name[start:]
			if start == 0 {
				break
			}
			end = start - 1
		}
	}
}

// TestIndexLargeShard writes one shard past a huge page, the size that
// asks the kernel for huge pages (index_mem_linux.go), and finds every
// name in it: the advice never changes what is written or read.
func TestIndexLargeShard(t *testing.T) {
	b := allocBlob(3*hugePageSize + 12345)
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d of a new blob is %d", i, c)
		}
	}
	var w shardWriter
	const n = 80_000
	fps := make([]uint32, n)
	for i := range n {
		fps[i] = uint32(i)*53_687 | 1 // increasing, spread over the 32 bits
		w.add(fps[i], &nameEntry{name: fmt.Sprintf("n%d", i), bare: uint32(1 + i%7)})
	}
	blob, homes := w.finish()
	if len(blob) < hugePageSize {
		t.Fatalf("a shard of %d bytes", len(blob))
	}
	collapseEdges(blob) // as a build does
	for i := range n {
		o, ok := findSlot(blob, homeOf(fps[i], homes)*slotSize, fps[i], fmt.Sprintf("n%d", i))
		if !ok {
			t.Fatalf("n%d not found", i)
		}
		var e nameEntry
		decodeSlot(blob, o, &e)
		if e.bare != uint32(1+i%7) {
			t.Fatalf("n%d: set %d", i, e.bare)
		}
	}
}

// TestIndexEditBlob edits blobs the way Apply does, in place (editBlob)
// and into a new blob (rebuildBlob), and checks each against the names it
// should hold: every name found with its entries, the removed ones gone,
// the records intact; and that an edit declines what it must (a blob too
// full, or with a stash).
func TestIndexEditBlob(t *testing.T) {
	rnd := rand.New(rand.NewPCG(9, 9))
	type name struct {
		fp uint32
		e  nameEntry
	}
	mk := func(i int) name {
		e := nameEntry{name: fmt.Sprintf("e%d.example", i), bare: uint32(1 + i%5)}
		if i%4 == 0 {
			e.name = strings.Repeat("long", 10) + e.name // a record
		}
		if i%7 == 0 {
			e.paths = []pathEntry{{path: fmt.Sprintf("/p%d", i), set: 3}}
		}
		return name{fp: rnd.Uint32() | 1, e: e}
	}
	check := func(what, blob string, homes uint32, want map[string]name) {
		t.Helper()
		if got := blobNames(blob); got != len(want) {
			t.Fatalf("%s: %d names, want %d", what, got, len(want))
		}
		for _, n := range want {
			o, ok := findSlot(blob, homeOf(n.fp, homes)*slotSize, n.fp, n.e.name)
			if !ok {
				t.Fatalf("%s: %s not found", what, n.e.name)
			}
			var e nameEntry
			decodeSlot(blob, o, &e)
			if e.name != n.e.name || e.bare != n.e.bare || len(e.paths) != len(n.e.paths) {
				t.Fatalf("%s: %s decodes as %+v", what, n.e.name, e)
			}
		}
	}
	var w shardWriter
	want := map[string]name{}
	for i := range 1000 {
		n := mk(i)
		want[n.e.name] = n
		w.add(n.fp, &n.e)
	}
	blob, homes := w.finish()
	check("written", blob, homes, want)
	next, edits, rebuilds := 1000, 0, 0
	for round := range 30 {
		var remove []int
		for k, n := range want {
			if rnd.IntN(10) == 0 {
				o, _ := findSlot(blob, homeOf(n.fp, homes)*slotSize, n.fp, n.e.name)
				remove = append(remove, o)
				delete(want, k)
			}
		}
		slices.Sort(remove)
		var add []added
		grow := 60 // first past the load an edit takes, then down under its floor
		if round >= 10 {
			grow = 5
		}
		for range rnd.IntN(grow) {
			n := mk(next)
			next++
			want[n.e.name] = n
			add = append(add, added{fp: n.fp, e: &n.e})
		}
		b2, h2, ok := editBlob(blob, remove, add)
		if ok {
			edits++
		} else {
			rebuilds++
			// Past the load an edit takes: a new blob, as Apply makes.
			if b2, h2, ok = rebuildBlob(blob, remove, add, slotsFor(len(want)+len(want)/4)); !ok {
				t.Fatalf("round %d: rebuildBlob failed", round)
			}
		}
		check(fmt.Sprintf("round %d", round), b2, h2, want)
		blob, homes = b2, h2
	}
	if edits == 0 || rebuilds == 0 {
		t.Fatalf("%d edits, %d rebuilds: the test does not reach both", edits, rebuilds)
	}
	if _, _, ok := editBlob(blob, nil, make([]added, 2*int(homes))); ok {
		t.Fatal("an edit past the load was made")
	}
}

// TestIndexStash writes more names of one fingerprint than their two
// slots hold, which only the stash takes, and finds each of them, by
// findSlot as Apply does and by the lookup's own search.
func TestIndexStash(t *testing.T) {
	var w shardWriter
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	for i, n := range names {
		w.add(77, &nameEntry{name: n, bare: uint32(i + 1)})
	}
	w.add(5, &nameEntry{name: "other", bare: 9})
	blob, homes := w.finish()
	if homes&stashFlag == 0 {
		t.Fatal("no stash for seven names of one fingerprint")
	}
	ix := &Index{shards: []string{blob}, homes: []uint32{homes}, shift: 64, sets: make([][]uint16, 10)}
	for i := range ix.sets {
		ix.sets[i] = []uint16{uint16(i)}
	}
	for i, n := range append(names, "other") {
		fp := uint32(77)
		if n == "other" {
			fp = 5
		}
		o, ok := findSlot(blob, homeOf(fp, homes)*slotSize, fp, n)
		if !ok {
			t.Fatalf("%s not found", n)
		}
		var e nameEntry
		decodeSlot(blob, o, &e)
		if n != "other" && e.bare != uint32(i+1) {
			t.Fatalf("%s: set %d", n, e.bare)
		}
		p := probe{fp: fp}
		first := homeOf(fp, homes)
		p.slot, p.slot2 = uint32(first*slotSize), uint32(altOf(fp, first, homes)*slotSize)
		if m, ok := ix.search(&p, n, ""); !ok || m.Name != n || m.Codes[0] != uint16(e.bare-1) {
			t.Fatalf("search %s: %v %v", n, m, ok)
		}
	}
	if _, ok := findSlot(blob, homeOf(77, homes)*slotSize, 77, "z"); ok {
		t.Fatal("z found")
	}
	// An edit declines a blob with a stash; a rebuild into more slots
	// cannot place them either, and says so.
	if _, _, ok := editBlob(blob, nil, nil); ok {
		t.Fatal("an edit of a blob with a stash")
	}
	if _, _, ok := rebuildBlob(blob, nil, nil, 64); ok {
		t.Fatal("seven names of one fingerprint placed in two slots")
	}
}

// TestIndexFindDots checks the word-at-a-time dot search against the plain
// one, on names of every length around the word size and with dots
// everywhere, and its stop past maxDots.
func TestIndexFindDots(t *testing.T) {
	rnd := rand.New(rand.NewPCG(4, 4))
	for range 20000 {
		b := make([]byte, rnd.IntN(40))
		for i := range b {
			b[i] = "ab.-/\x00\xae"[rnd.IntN(7)]
		}
		name := string(b)
		var want []int
		for i := range b {
			if b[i] == '.' {
				want = append(want, i)
			}
		}
		var d [maxDots]int
		n := findDots(name, &d)
		if len(want) > maxDots {
			if n != maxDots+1 {
				t.Fatalf("%q: %d, want %d", name, n, maxDots+1)
			}
			continue
		}
		if !slices.Equal(d[:n], want) {
			t.Fatalf("%q: dots %v, want %v", name, d[:n], want)
		}
	}
}
