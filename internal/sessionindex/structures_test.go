package sessionindex

import (
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// slotTreeKeys returns the keys of s in order, checking that they ascend
// strictly and that the tree counts them.
func slotTreeKeys(t *testing.T, s slotTree) []uint64 {
	t.Helper()
	if s.t == nil {
		return nil
	}
	var keys []uint64
	s.t.Ascend(func(k uint64) bool {
		if len(keys) > 0 && k <= keys[len(keys)-1] {
			t.Fatalf("key %x after %x", k, keys[len(keys)-1])
		}
		keys = append(keys, k)
		return true
	})
	if len(keys) != s.t.Len() {
		t.Fatalf("tree holds %d keys, Len=%d", len(keys), s.t.Len())
	}
	return keys
}

// runOf returns the slots run yields for tag, stopping after limit.
func runOf(s slotTree, tag uint32, limit int) []uint32 {
	var out []uint32
	s.run(tag, func(slot uint32) bool {
		out = append(out, slot)
		return len(out) < limit
	})
	return out
}

// wantRun is what runOf should return for the sorted keys.
func wantRun(keys []uint64, tag uint32, limit int) []uint32 {
	var out []uint32
	for _, k := range keys {
		if uint32(k>>32) == tag && len(out) < limit {
			out = append(out, uint32(k))
		}
	}
	return out
}

// TestSlotTreeAgainstMap runs random inserts and removes against a map,
// with runs, and persistence checks: earlier versions must not change. A
// quarter of the rounds start from an earlier version rather than the
// latest, as concurrent Apply calls on one snapshot do, so versions form a
// tree. Keys come from a small space so that removes hit and the run of
// one tag (one secondary key) spans several nodes; tag 0xffffffff is the
// last run of the key space.
func TestSlotTreeAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	tags := []uint32{0, 1, 2, 0xffffffff}
	type version struct {
		tr  slotTree
		ref map[uint64]bool
	}
	versions := []version{{slotTree{}, map[uint64]bool{}}}
	for round := 0; round < 300; round++ {
		base := versions[len(versions)-1]
		if r.IntN(4) == 0 {
			base = versions[r.IntN(len(versions))]
		}
		tr, ref := base.tr, maps.Clone(base.ref)
		ed := new(edit)
		for n := r.IntN(300) + 1; n > 0; n-- {
			k := uint64(tags[r.IntN(len(tags))])<<32 | uint64(r.IntN(3000))
			if r.IntN(3) == 0 {
				if got := tr.remove(ed, k); got != ref[k] {
					t.Fatalf("remove(%x) = %v, want %v", k, got, ref[k])
				}
				delete(ref, k)
			} else {
				if got := tr.insert(ed, k); got == ref[k] {
					t.Fatalf("insert(%x) = %v with present=%v", k, got, ref[k])
				}
				ref[k] = true
			}
		}
		keys := slotTreeKeys(t, tr)
		want := slices.Sorted(maps.Keys(ref))
		if !slices.Equal(keys, want) {
			t.Fatalf("round %d: keys differ from the reference", round)
		}
		tag, limit := tags[r.IntN(len(tags))], 1<<30
		if r.IntN(2) == 0 {
			limit = r.IntN(100) + 1
		}
		if got, want := runOf(tr, tag, limit), wantRun(want, tag, limit); !slices.Equal(got, want) {
			t.Fatalf("round %d: run(%x) gave %d slots, want %d", round, tag, len(got), len(want))
		}
		versions = append(versions, version{tr, ref})
	}
	for i, v := range versions {
		if !slices.Equal(slotTreeKeys(t, v.tr), slices.Sorted(maps.Keys(v.ref))) {
			t.Fatalf("version %d changed", i)
		}
	}
}

func TestBuildSlotTree(t *testing.T) {
	const maxKeys = 2*slotTreeDegree - 1
	for _, n := range []int{0, 1, maxKeys, maxKeys + 1, maxKeys * (maxKeys + 1), maxKeys*(maxKeys+1) + 1, 100_000} {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(i/1000)<<32 | uint64(i)
		}
		built := buildSlotTree(keys)
		if got := slotTreeKeys(t, built); !slices.Equal(got, keys) && n > 0 {
			t.Fatalf("n=%d: keys differ after build", n)
		}
		for tag := uint32(0); tag <= uint32(n/1000); tag++ {
			if got, want := runOf(built, tag, 1<<30), wantRun(keys, tag, 1<<30); !slices.Equal(got, want) {
				t.Fatalf("n=%d: run(%d) gave %d slots, want %d", n, tag, len(got), len(want))
			}
		}
		// The built tree accepts changes like any other, and keeps its keys.
		tr := built
		ed := new(edit)
		for i := 0; i < n; i += 2 {
			if !tr.remove(ed, keys[i]) {
				t.Fatalf("n=%d: remove(%x) missed", n, keys[i])
			}
		}
		odd := slotTreeKeys(t, tr)
		if len(odd) != n/2 {
			t.Fatalf("n=%d: %d left after removing evens, want %d", n, len(odd), n/2)
		}
		for i, k := range odd {
			if k != keys[2*i+1] {
				t.Fatalf("n=%d: key %d is %x, want %x", n, i, k, keys[2*i+1])
			}
		}
		if got := slotTreeKeys(t, built); !slices.Equal(got, keys) && n > 0 {
			t.Fatalf("n=%d: the built tree changed", n)
		}
	}
}

// TestSlotTreeConcurrentEdits derives trees from one shared tree in
// several goroutines at once while others read it, as concurrent Apply
// calls and readers of one snapshot do; with -race it proves that an edit
// writes nothing the shared tree holds, its header included.
func TestSlotTreeConcurrentEdits(t *testing.T) {
	keys := make([]uint64, 20_000)
	for i := range keys {
		keys[i] = uint64(i%7)<<32 | uint64(i)
	}
	slices.Sort(keys)
	shared := buildSlotTree(keys)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for round := 0; round < 20; round++ {
				tr, ref := shared, make(map[uint64]bool, len(keys))
				for _, k := range keys {
					ref[k] = true
				}
				ed := new(edit)
				for n := 0; n < 500; n++ {
					k := uint64(r.IntN(7))<<32 | uint64(r.IntN(2*len(keys)))
					if ref[k] {
						tr.remove(ed, k)
						delete(ref, k)
					} else {
						tr.insert(ed, k)
						ref[k] = true
					}
				}
				var got []uint64
				tr.t.Ascend(func(k uint64) bool { got = append(got, k); return true })
				if !slices.Equal(got, slices.Sorted(maps.Keys(ref))) {
					errs <- "an edit's keys differ from its reference"
					return
				}
			}
		}()
	}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 20; round++ {
				if got := runOf(shared, 3, 1<<30); !slices.Equal(got, wantRun(keys, 3, 1<<30)) {
					errs <- "the shared tree changed under its readers"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if !slices.Equal(slotTreeKeys(t, shared), keys) {
		t.Fatal("the shared tree changed")
	}
}

// checkHtab verifies the hash trie's invariants and returns its cells.
func checkHtab[K comparable](t *testing.T, h *htab[K], hf hashFn[K]) map[hcell[K]]int {
	t.Helper()
	cells := map[hcell[K]]int{}
	var walk func(k *hkid[K], prefix uint32, shift int) int
	walk = func(k *hkid[K], prefix uint32, shift int) int {
		if k.inner != nil {
			if k.cells != nil {
				t.Fatal("inner node with cells")
			}
			sum := 0
			for i := range k.inner.kids {
				sum += walk(&k.inner.kids[i], prefix|uint32(i)<<uint(shift), shift-fanBits)
			}
			if sum != k.used || sum == 0 {
				t.Fatalf("subtree counts %d, used=%d", sum, k.used)
			}
			return sum
		}
		size := len(k.cells)
		if k.used == 0 {
			if size != 0 {
				t.Fatalf("empty leaf with %d cells", size)
			}
			return 0
		}
		if size < leafMin {
			t.Fatalf("leaf of %d cells", size)
		}
		if k.used*4 > size*3 {
			t.Fatalf("leaf with %d of %d cells used", k.used, size)
		}
		used := 0
		for _, c := range k.cells {
			if c.slot == 0 {
				continue
			}
			used++
			cells[c]++
			h := hf(c.key)
			if shift < topShift && h>>uint(shift+fanBits) != prefix>>uint(shift+fanBits) {
				t.Fatalf("hash %08x in the leaf for %08x", h, prefix)
			}
			if index(k.cells, h, c) < 0 {
				t.Fatalf("cell %v not reachable by probing", c)
			}
		}
		if used != k.used {
			t.Fatalf("leaf counts %d, used=%d", used, k.used)
		}
		return used
	}
	walk(&h.root, 0, topShift)
	return cells
}

// TestHtabAgainstMap drives the hash trie with random inserts, removes and
// replaces against a multiset, with hashes over 32 bits (splits and
// merges), 12 bits and 3 bits (every cell collides: leaves that cannot
// split, long probe runs), with persistence checks. Keys are a wide type
// whose hash is narrower, as in the routing tables, and several slots share
// a key, as in the id index.
func TestHtabAgainstMap(t *testing.T) {
	for _, hashBits := range []uint{32, 12, 3} {
		r := rand.New(rand.NewPCG(3, uint64(hashBits)))
		hf := func(k [2]uint64) uint32 { return uint32((k[0]*0x9e3779b97f4a7c15)>>32) >> (32 - hashBits) }
		keyOf := func(slot uint32) [2]uint64 { return [2]uint64{uint64(slot % 4000), 7} } // slots s and s+4000 share a key
		var h htab[[2]uint64]
		ref := map[hcell[[2]uint64]]int{}
		cell := func(slot uint32) hcell[[2]uint64] { return hcell[[2]uint64]{keyOf(slot), slot + 1} }
		type version struct {
			h   htab[[2]uint64]
			ref map[hcell[[2]uint64]]int
		}
		var versions []version
		live := map[uint32]bool{}
		for round := 0; round < 200; round++ {
			ed := new(edit)
			grow := round < 100 // grow to thousands, then shrink
			for n := r.IntN(400) + 1; n > 0; n-- {
				slot := uint32(r.IntN(8000))
				switch {
				case !live[slot] && (grow || r.IntN(4) == 0):
					h.insert(ed, keyOf(slot), slot, hf)
					ref[cell(slot)]++
					live[slot] = true
				case live[slot] && r.IntN(5) == 0:
					// Move the cell to slot+8000 (same key) and back.
					to := slot + 8000
					if !h.replace(ed, keyOf(slot), slot, to, hf) {
						t.Fatalf("replace(%d) missed", slot)
					}
					got, ok := h.find(hf(keyOf(slot)), keyOf(slot), func(s uint32) bool { return s == to })
					if !ok || got != to {
						t.Fatalf("replaced cell not found: %d %v", got, ok)
					}
					if !h.replace(ed, keyOf(slot), to, slot, hf) {
						t.Fatalf("replace back(%d) missed", slot)
					}
				case live[slot] && !grow:
					if !h.remove(ed, keyOf(slot), slot, hf) {
						t.Fatalf("remove(%d) missed", slot)
					}
					delete(ref, cell(slot))
					delete(live, slot)
				case !live[slot]:
					if h.remove(ed, keyOf(slot), slot, hf) {
						t.Fatalf("remove(%d) of an absent cell", slot)
					}
				}
			}
			if got := checkHtab(t, &h, hf); !maps.Equal(got, ref) {
				t.Fatalf("hash bits %d round %d: %d cells, want %d", hashBits, round, len(got), len(ref))
			}
			if h.len() != len(ref) {
				t.Fatalf("len %d, want %d", h.len(), len(ref))
			}
			for slot := range live {
				k := keyOf(slot)
				got, ok := h.find(hf(k), k, func(s uint32) bool { return s == slot })
				if !ok || got != slot {
					t.Fatalf("find(%d) = %d %v", slot, got, ok)
				}
				if got, ok := h.get(hf(k), k); !ok || keyOf(got) != k {
					t.Fatalf("get(%v) = %d %v", k, got, ok)
				}
			}
			versions = append(versions, version{h, maps.Clone(ref)})
		}
		for i, v := range versions {
			if got := checkHtab(t, &v.h, hf); !maps.Equal(got, v.ref) {
				t.Fatalf("hash bits %d: version %d changed", hashBits, i)
			}
		}
	}
}
