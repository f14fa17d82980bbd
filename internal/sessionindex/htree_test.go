package sessionindex

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type kv struct {
	k string
	v int
}

// checkTree verifies the B+tree invariants and returns the entry count.
func checkTree[E any](t *testing.T, tr htree[E]) {
	t.Helper()
	if tr.root == nil {
		if tr.n != 0 {
			t.Fatalf("empty tree with n=%d", tr.n)
		}
		return
	}
	var count int
	var walk func(n *hnode[E], lo uint64, hasLo bool, hi uint64, hasHi bool, depth int) int
	walk = func(n *hnode[E], lo uint64, hasLo bool, hi uint64, hasHi bool, depth int) int {
		if len(n.hashes) == 0 {
			t.Fatalf("empty node at depth %d", depth)
		}
		for i := 1; i < len(n.hashes); i++ {
			if n.leaf() && n.hashes[i] < n.hashes[i-1] || !n.leaf() && n.hashes[i] <= n.hashes[i-1] {
				t.Fatalf("hashes out of order at depth %d", depth)
			}
		}
		if n.leaf() {
			if len(n.items) != len(n.hashes) {
				t.Fatal("leaf items/hashes length mismatch")
			}
			for _, h := range n.hashes {
				if hasLo && h < lo || hasHi && h >= hi {
					t.Fatalf("leaf hash %x outside [%x,%x)", h, lo, hi)
				}
			}
			count += len(n.items)
			return depth
		}
		if len(n.kids) != len(n.hashes) {
			t.Fatal("internal kids/hashes length mismatch")
		}
		if len(n.kids) > maxInner {
			t.Fatalf("internal node with %d kids", len(n.kids))
		}
		d := -1
		for i, k := range n.kids {
			klo, kHasLo := lo, hasLo
			if i > 0 || hasLo {
				klo, kHasLo = n.hashes[i], true
				if i == 0 && lo > klo {
					klo = lo
				}
			}
			khi, kHasHi := hi, hasHi
			if i+1 < len(n.kids) {
				khi, kHasHi = n.hashes[i+1], true
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
	if count != tr.n {
		t.Fatalf("tree counts %d entries, n=%d", count, tr.n)
	}
}

// TestHTreeAgainstMap runs random puts and deletes against a map, with
// persistence checks: earlier versions must not change.
func TestHTreeAgainstMap(t *testing.T) {
	for _, hashBits := range []uint{64, 6} { // 6 bits: heavy collisions
		r := rand.New(rand.NewPCG(7, uint64(hashBits)))
		hash := func(k string) uint64 {
			var h uint64 = 1469598103934665603
			for i := 0; i < len(k); i++ {
				h = (h ^ uint64(k[i])) * 1099511628211
			}
			if hashBits < 64 {
				h &= 1<<hashBits - 1
			}
			return h
		}
		var tr htree[kv]
		ref := map[string]int{}
		type version struct {
			tr  htree[kv]
			ref map[string]int
		}
		var versions []version
		for round := 0; round < 300; round++ {
			ed := new(edit)
			n := r.IntN(200) + 1
			for i := 0; i < n; i++ {
				k := string(rune('a'+r.IntN(26))) + string(rune('a'+r.IntN(26))) + string(rune('a'+r.IntN(26)))
				match := func(e kv) bool { return e.k == k }
				if r.IntN(3) == 0 {
					_, had := ref[k]
					if got := tr.del(ed, hash(k), match); got != had {
						t.Fatalf("del(%q) = %v, want %v", k, got, had)
					}
					delete(ref, k)
				} else {
					v := r.Int()
					_, had := ref[k]
					if got := tr.put(ed, hash(k), kv{k, v}, match); got != had {
						t.Fatalf("put(%q) replaced = %v, want %v", k, got, had)
					}
					ref[k] = v
				}
			}
			checkTree(t, tr)
			if tr.len() != len(ref) {
				t.Fatalf("len %d, want %d", tr.len(), len(ref))
			}
			for k, v := range ref {
				e, ok := tr.get(hash(k), func(e kv) bool { return e.k == k })
				if !ok || e.v != v {
					t.Fatalf("get(%q) = %v %v, want %d", k, e, ok, v)
				}
			}
			versions = append(versions, version{tr, maps(ref)})
		}
		// Every earlier version is intact.
		for i, v := range versions {
			var got []kv
			v.tr.all(func(e kv) bool { got = append(got, e); return true })
			if len(got) != len(v.ref) {
				t.Fatalf("version %d: %d entries, want %d", i, len(got), len(v.ref))
			}
			for _, e := range got {
				if v.ref[e.k] != e.v {
					t.Fatalf("version %d changed: %q=%d, want %d", i, e.k, e.v, v.ref[e.k])
				}
			}
		}
	}
}

func maps(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func TestBuildHTree(t *testing.T) {
	for _, n := range []int{0, 1, maxLeaf, maxLeaf + 1, maxLeaf * maxInner, maxLeaf*maxInner + 1, 100_000} {
		hs := make([]uint64, n)
		items := make([]int, n)
		for i := range hs {
			hs[i] = uint64(i/3) * 7 // runs of three equal hashes
			items[i] = i
		}
		tr := buildHTree(hs, items)
		checkTree(t, tr)
		var got []int
		tr.all(func(e int) bool { got = append(got, e); return true })
		if !slices.Equal(got, items) && n > 0 {
			t.Fatalf("n=%d: entries differ after build", n)
		}
		// The built tree accepts changes like any other.
		ed := new(edit)
		for i := 0; i < n; i += 2 {
			i := i
			tr.del(ed, hs[i], func(e int) bool { return e == i })
		}
		checkTree(t, tr)
		if tr.len() != n/2 {
			t.Fatalf("n=%d: %d left after deleting evens, want %d", n, tr.len(), n/2)
		}
	}
}
