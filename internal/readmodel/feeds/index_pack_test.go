package feeds

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// TestIndexPackName packs names of every length up to packedMax and reads
// them back, and checks that packedEqual tells each from its near misses:
// one character changed at each place, one more or fewer, a byte with no
// code (upper case, a space, a byte past 127) at each place.
func TestIndexPackName(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 3))
	random := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = unpackTable[1+rnd.IntN(len(unpackTable)-1)]
		}
		return string(b)
	}
	for n := 0; n <= packedMax; n++ {
		for range 50 {
			name := random(n)
			if !packable(name) {
				t.Fatalf("%q: not packable", name)
			}
			var p [24]byte
			packName(p[:], name)
			ps := string(p[:])
			if got := unpackName(ps, n); got != name {
				t.Fatalf("unpacked %q, want %q", got, name)
			}
			if !packedEqual(ps, n, name) {
				t.Fatalf("%q: not equal to itself packed", name)
			}
			for i := range n {
				b := []byte(name)
				for b[i] == name[i] {
					b[i] = unpackTable[1+rnd.IntN(len(unpackTable)-1)]
				}
				if packedEqual(ps, n, string(b)) {
					t.Fatalf("%q equal to %q", b, name)
				}
				for _, c := range []byte{'A', 'Z', ' ', 0, '/', 0xc3, 0xff} {
					b[i] = c
					if packedEqual(ps, n, string(b)) || packable(string(b)) {
						t.Fatalf("%q equal to %q, or packable", b, name)
					}
				}
			}
			if n > 0 && packedEqual(ps, n, name[:n-1]) || packedEqual(ps, n, name+"a") {
				t.Fatalf("%q: equal to a shorter or longer name", name)
			}
		}
	}
	if packable(strings.Repeat("a", packedMax+1)) {
		t.Fatal("a name past packedMax is packable")
	}
}

// TestIndexPackedEntries builds and changes an index of names around the
// lengths an entry holds (24 bytes as they are, 32 DNS characters
// packed), packable and not, and checks it against the reference; and
// that the names of 25 to 32 DNS characters with only an entry of their
// own are packed in their entries (no record), the others not.
func TestIndexPackedEntries(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 5))
	name := func() string {
		n := 18 + rnd.IntN(20) // 18 to 37 bytes, with its TLD
		b := make([]byte, n-4)
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyz0123456789-_."[rnd.IntN(39)]
		}
		if rnd.IntN(8) == 0 {
			b[rnd.IntN(len(b))] = 'Q' // no code: a record
		}
		return strings.Trim(string(b), ".") + ".com"
	}
	ref := indexRef{}
	b := NewBuilder(4000)
	for range 4000 {
		l := feed.Line{Name: name(), Codes: []uint16{uint16(rnd.IntN(9))}}
		if rnd.IntN(10) == 0 {
			l.Path = "/p"
		}
		ref.set(l)
		b.Set(l)
	}
	ix := b.Index()
	checkIndexEqual(t, ix, ref, rnd, "built")
	kinds := map[byte]int{}
	byName := ref.paths()
	for k := range ref {
		s := ix.key.name(k.name) >> ix.shift
		fp := shardFP(ix.key.name(k.name), ix.bits)
		o, ok := findSlot(ix.shards[s], homeOf(fp, ix.homes[s])*slotSize, fp, k.name)
		if !ok {
			t.Fatalf("%s: no entry", k.name)
		}
		kind := ix.shards[s][o+5]
		kinds[kind]++
		_, bare := ref[indexRefKey{k.name, ""}]
		want := byte(slotRecord)
		switch {
		case len(byName[k.name]) > 0 || !bare:
		case len(k.name) <= inlineMax:
			want = slotInline
		case packable(k.name):
			want = slotPacked
		}
		if kind != want {
			t.Fatalf("%s: entry kind %d, want %d", k.name, kind, want)
		}
	}
	if kinds[slotPacked] < 500 || kinds[slotRecord] < 100 || kinds[slotInline] < 500 {
		t.Fatalf("entry kinds %v: the test does not reach each", kinds)
	}
	// Deltas that overwrite, remove and add such names: Apply decodes
	// packed entries (unpacking their names) into the overlay and the
	// rewritten shards.
	for round := range 30 {
		delta := make([]feed.Line, 200)
		for i := range delta {
			switch rnd.IntN(3) {
			case 0:
				for k := range ref {
					delta[i] = feed.Line{Name: k.name, Path: k.path, Remove: true}
					break
				}
			case 1:
				for k := range ref {
					delta[i] = feed.Line{Name: k.name, Path: k.path, Codes: []uint16{uint16(rnd.IntN(9))}}
					break
				}
			default:
				delta[i] = feed.Line{Name: name(), Codes: []uint16{uint16(rnd.IntN(9))}}
			}
			ref.set(delta[i])
		}
		ix = ix.Apply(delta)
		checkIndexEqual(t, ix, ref, rnd, fmt.Sprintf("round %d", round))
	}
}
