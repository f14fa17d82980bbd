package sessionindex

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkBset verifies the B+tree invariants and returns the keys in order.
func checkBset(t *testing.T, tr bset) []uint64 {
	t.Helper()
	if tr.root == nil {
		if tr.n != 0 {
			t.Fatalf("empty tree with n=%d", tr.n)
		}
		return nil
	}
	var keys []uint64
	var walk func(n *bnode, lo uint64, hasLo bool, hi uint64, hasHi bool, depth int) int
	walk = func(n *bnode, lo uint64, hasLo bool, hi uint64, hasHi bool, depth int) int {
		if len(n.keys) == 0 {
			t.Fatalf("empty node at depth %d", depth)
		}
		for i := 1; i < len(n.keys); i++ {
			if n.keys[i] <= n.keys[i-1] {
				t.Fatalf("keys out of order at depth %d", depth)
			}
		}
		if n.leaf() {
			if len(n.keys) > bsetMax {
				t.Fatalf("leaf with %d keys", len(n.keys))
			}
			for _, k := range n.keys {
				if hasLo && k < lo || hasHi && k >= hi {
					t.Fatalf("leaf key %x outside [%x,%x)", k, lo, hi)
				}
			}
			keys = append(keys, n.keys...)
			return depth
		}
		if len(n.kids) != len(n.keys) || len(n.kids) > bsetMax {
			t.Fatalf("inner node with %d kids, %d keys", len(n.kids), len(n.keys))
		}
		d := -1
		for i, k := range n.kids {
			klo, kHasLo := lo, hasLo
			if i > 0 || hasLo {
				klo, kHasLo = n.keys[i], true
				if i == 0 && lo > klo {
					klo = lo
				}
			}
			khi, kHasHi := hi, hasHi
			if i+1 < len(n.kids) {
				khi, kHasHi = n.keys[i+1], true
			}
			kd := walk(k, klo, kHasLo, khi, kHasHi, depth+1)
			if d >= 0 && kd != d {
				t.Fatalf("unbalanced: leaves at depths %d and %d", d, kd)
			}
			d = kd
		}
		return d
	}
	walk(tr.root, 0, false, 0, false, 0)
	if len(keys) != tr.n {
		t.Fatalf("tree holds %d keys, n=%d", len(keys), tr.n)
	}
	return keys
}

// TestBsetAgainstMap runs random inserts and removes against a map, with
// range scans, invariants, and persistence checks: earlier versions must
// not change. Keys come from a small space so that removes hit and runs of
// one high half (one secondary key) span several leaves.
func TestBsetAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var tr bset
	ref := map[uint64]bool{}
	type version struct {
		tr  bset
		ref map[uint64]bool
	}
	var versions []version
	for round := 0; round < 300; round++ {
		ed := new(edit)
		for n := r.IntN(300) + 1; n > 0; n-- {
			k := uint64(r.IntN(4))<<32 | uint64(r.IntN(3000))
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
		keys := checkBset(t, tr)
		want := slices.Sorted(maps.Keys(ref))
		if !slices.Equal(keys, want) {
			t.Fatalf("round %d: keys differ from the reference", round)
		}
		hi := uint64(r.IntN(4)) << 32
		var run []uint64
		tr.ascend(hi, func(k uint64) bool {
			if k>>32 != hi>>32 {
				return false
			}
			run = append(run, k)
			return true
		})
		var wantRun []uint64
		for _, k := range want {
			if k>>32 == hi>>32 {
				wantRun = append(wantRun, k)
			}
		}
		if !slices.Equal(run, wantRun) {
			t.Fatalf("round %d: ascend(%x) gave %d keys, want %d", round, hi, len(run), len(wantRun))
		}
		versions = append(versions, version{tr, maps.Clone(ref)})
	}
	for i, v := range versions {
		if !slices.Equal(checkBset(t, v.tr), slices.Sorted(maps.Keys(v.ref))) {
			t.Fatalf("version %d changed", i)
		}
	}
}

func TestBuildBset(t *testing.T) {
	for _, n := range []int{0, 1, bsetMax, bsetMax + 1, bsetMax * bsetMax, bsetMax*bsetMax + 1, 100_000} {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(i/1000)<<32 | uint64(i)
		}
		tr := buildBset(keys)
		if got := checkBset(t, tr); !slices.Equal(got, keys) && n > 0 {
			t.Fatalf("n=%d: keys differ after build", n)
		}
		// The built tree accepts changes like any other.
		ed := new(edit)
		for i := 0; i < n; i += 2 {
			tr.remove(ed, keys[i])
		}
		checkBset(t, tr)
		if tr.len() != n/2 {
			t.Fatalf("n=%d: %d left after removing evens, want %d", n, tr.len(), n/2)
		}
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
