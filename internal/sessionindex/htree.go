package sessionindex

import (
	"slices"
	"sort"
)

// htree is a persistent (copy-on-write) B+tree ordered by a 64-bit key hash.
// It is the building block of every string-keyed index here: a hash-ordered
// B+tree keeps leaves 50–100 % full whatever the size, so 1 000 000 entries
// cost little more than the entries themselves, and an update copies one
// root-to-leaf path (five nodes of at most 32 entries at 1M) instead of a
// whole map.
//
// Entries carry no key: callers derive the key from the entry (a session id,
// an org) and pass a match function, so a byID entry is 8 bytes of hash plus
// one pointer.
//
// Invariants:
//   - leaves hold hashes in ascending order; entries with equal hashes (true
//     64-bit collisions) always sit in one leaf, so a lookup visits one leaf;
//   - an internal node's hashes[i] is a lower bound of every hash under
//     kids[i], and hashes[i] < every hash under kids[i+1];
//   - a node whose owner is the current edit token was created during this
//     edit and is invisible to readers, so it may be changed in place; any
//     other node is shared and is copied before a change.
type htree[E any] struct {
	root *hnode[E]
	n    int
}

type hnode[E any] struct {
	owner  *edit
	hashes []uint64
	items  []E         // leaf only
	kids   []*hnode[E] // internal only; nil marks a leaf
}

// edit marks the nodes created by one Apply or one build. It must not be a
// zero-size type: distinct zero-size allocations may share an address.
type edit struct{ _ byte }

const (
	maxLeaf  = 32
	maxInner = 32
	// A node that falls below minFill after a delete is merged with a
	// neighbour when the two fit in mergeMax, so a tree shrinking under churn
	// does not degrade into a chain of near-empty leaves.
	minFill  = 8
	mergeMax = 24
)

func (n *hnode[E]) leaf() bool { return n.kids == nil }

func (n *hnode[E]) size() int { return len(n.hashes) }

// own returns n itself when the edit owns it, else a private copy.
func (n *hnode[E]) own(ed *edit) *hnode[E] {
	if ed != nil && n.owner == ed {
		return n
	}
	c := &hnode[E]{owner: ed, hashes: slices.Clone(n.hashes)}
	if n.leaf() {
		c.items = slices.Clone(n.items)
	} else {
		c.kids = slices.Clone(n.kids)
	}
	return c
}

// child is the index of the subtree that holds hash h.
func (n *hnode[E]) child(h uint64) int {
	i := sort.Search(len(n.hashes), func(i int) bool { return n.hashes[i] > h })
	if i > 0 {
		i--
	}
	return i
}

func lowerBound(hs []uint64, h uint64) int {
	return sort.Search(len(hs), func(i int) bool { return hs[i] >= h })
}

func (t htree[E]) len() int { return t.n }

func (t htree[E]) get(h uint64, match func(E) bool) (E, bool) {
	n := t.root
	if n == nil {
		var zero E
		return zero, false
	}
	for !n.leaf() {
		n = n.kids[n.child(h)]
	}
	for i := lowerBound(n.hashes, h); i < len(n.hashes) && n.hashes[i] == h; i++ {
		if match(n.items[i]) {
			return n.items[i], true
		}
	}
	var zero E
	return zero, false
}

// put inserts e, or replaces the entry match selects. It reports whether
// an entry was replaced.
func (t *htree[E]) put(ed *edit, h uint64, e E, match func(E) bool) (replaced bool) {
	if t.root == nil {
		t.root = &hnode[E]{owner: ed, hashes: []uint64{h}, items: []E{e}}
		t.n = 1
		return false
	}
	nn, right, replaced := t.root.put(ed, h, e, match)
	if right != nil {
		nn = &hnode[E]{owner: ed, hashes: []uint64{nn.hashes[0], right.hashes[0]}, kids: []*hnode[E]{nn, right}}
	}
	t.root = nn
	if !replaced {
		t.n++
	}
	return replaced
}

func (n *hnode[E]) put(ed *edit, h uint64, e E, match func(E) bool) (nn, right *hnode[E], replaced bool) {
	if n.leaf() {
		i := lowerBound(n.hashes, h)
		for j := i; j < len(n.hashes) && n.hashes[j] == h; j++ {
			if match(n.items[j]) {
				nn = n.own(ed)
				nn.items[j] = e
				return nn, nil, true
			}
		}
		nn = n.own(ed)
		nn.hashes = slices.Insert(nn.hashes, i, h)
		nn.items = slices.Insert(nn.items, i, e)
		if len(nn.hashes) > maxLeaf {
			if mid := splitPoint(nn.hashes); mid > 0 {
				right = &hnode[E]{owner: ed, hashes: slices.Clone(nn.hashes[mid:]), items: slices.Clone(nn.items[mid:])}
				nn.hashes = slices.Clone(nn.hashes[:mid])
				nn.items = slices.Clone(nn.items[:mid])
			}
		}
		return nn, right, false
	}
	i := n.child(h)
	c, r, replaced := n.kids[i].put(ed, h, e, match)
	nn = n.own(ed)
	nn.kids[i] = c
	if h < nn.hashes[i] {
		nn.hashes[i] = h
	}
	if r != nil {
		nn.hashes = slices.Insert(nn.hashes, i+1, r.hashes[0])
		nn.kids = slices.Insert(nn.kids, i+1, r)
		if len(nn.kids) > maxInner {
			mid := len(nn.kids) / 2
			right = &hnode[E]{owner: ed, hashes: slices.Clone(nn.hashes[mid:]), kids: slices.Clone(nn.kids[mid:])}
			nn.hashes = slices.Clone(nn.hashes[:mid])
			nn.kids = slices.Clone(nn.kids[:mid])
		}
	}
	return nn, right, replaced
}

// splitPoint picks where to split an overfull leaf: near the middle, but
// never inside a run of equal hashes. It returns 0 when the whole leaf is one
// run (only possible with 64-bit collisions), which then stays oversized.
func splitPoint(hs []uint64) int {
	mid := len(hs) / 2
	for m := mid; m < len(hs); m++ {
		if hs[m] != hs[m-1] {
			return m
		}
	}
	for m := mid - 1; m > 0; m-- {
		if hs[m] != hs[m-1] {
			return m
		}
	}
	return 0
}

// del removes the entry match selects and reports whether there was one.
func (t *htree[E]) del(ed *edit, h uint64, match func(E) bool) bool {
	if t.root == nil {
		return false
	}
	nn, removed := t.root.del(ed, h, match)
	if !removed {
		return false
	}
	for nn != nil && !nn.leaf() && len(nn.kids) == 1 {
		nn = nn.kids[0]
	}
	t.root = nn
	t.n--
	return true
}

func (n *hnode[E]) del(ed *edit, h uint64, match func(E) bool) (*hnode[E], bool) {
	if n.leaf() {
		for j := lowerBound(n.hashes, h); j < len(n.hashes) && n.hashes[j] == h; j++ {
			if match(n.items[j]) {
				if len(n.hashes) == 1 {
					return nil, true
				}
				nn := n.own(ed)
				nn.hashes = slices.Delete(nn.hashes, j, j+1)
				nn.items = slices.Delete(nn.items, j, j+1)
				return nn, true
			}
		}
		return n, false
	}
	i := n.child(h)
	c, removed := n.kids[i].del(ed, h, match)
	if !removed {
		return n, false
	}
	nn := n.own(ed)
	if c == nil {
		nn.hashes = slices.Delete(nn.hashes, i, i+1)
		nn.kids = slices.Delete(nn.kids, i, i+1)
		if len(nn.kids) == 0 {
			return nil, true
		}
		return nn, true
	}
	nn.kids[i] = c
	if c.size() < minFill {
		nn.mergeKid(ed, i)
	}
	return nn, true
}

// mergeKid merges kids[i] into a neighbour when the two fit in mergeMax.
// n must be owned by ed.
func (n *hnode[E]) mergeKid(ed *edit, i int) {
	j := i + 1 // merge kids[i] and kids[j] into kids[i]
	if j == len(n.kids) || (i > 0 && n.kids[i-1].size() < n.kids[j].size()) {
		i, j = i-1, i
	}
	if i < 0 || n.kids[i].size()+n.kids[j].size() > mergeMax {
		return
	}
	a, b := n.kids[i], n.kids[j]
	m := &hnode[E]{owner: ed, hashes: slices.Concat(a.hashes, b.hashes)}
	if a.leaf() {
		m.items = slices.Concat(a.items, b.items)
	} else {
		m.kids = slices.Concat(a.kids, b.kids)
		// b's first bound may be below our separator for b (it was kid 0
		// somewhere); ours is a valid bound that also lies above all of a.
		m.hashes[len(a.hashes)] = n.hashes[j]
	}
	n.kids[i] = m
	n.hashes = slices.Delete(n.hashes, j, j+1)
	n.kids = slices.Delete(n.kids, j, j+1)
}

// all yields every entry in hash order until yield returns false.
func (t htree[E]) all(yield func(E) bool) bool {
	if t.root == nil {
		return true
	}
	return t.root.all(yield)
}

func (n *hnode[E]) all(yield func(E) bool) bool {
	if n.leaf() {
		for _, e := range n.items {
			if !yield(e) {
				return false
			}
		}
		return true
	}
	for _, k := range n.kids {
		if !k.all(yield) {
			return false
		}
	}
	return true
}

// first returns the entry with the smallest hash.
func (t htree[E]) first() (E, bool) {
	n := t.root
	if n == nil {
		var zero E
		return zero, false
	}
	for !n.leaf() {
		n = n.kids[0]
	}
	return n.items[0], true
}

// buildHTree packs entries already sorted by hash into full leaves: the
// bulk load of the initial snapshot, with no copy-on-write slack.
func buildHTree[E any](hashes []uint64, items []E) htree[E] {
	if len(hashes) == 0 {
		return htree[E]{}
	}
	var level []*hnode[E]
	for lo := 0; lo < len(hashes); {
		hi := min(lo+maxLeaf, len(hashes))
		for hi < len(hashes) && hashes[hi] == hashes[hi-1] {
			hi++ // keep a run of equal hashes in one leaf
		}
		level = append(level, &hnode[E]{hashes: slices.Clone(hashes[lo:hi]), items: slices.Clone(items[lo:hi])})
		lo = hi
	}
	for len(level) > 1 {
		var up []*hnode[E]
		for lo := 0; lo < len(level); lo += maxInner {
			kids := slices.Clone(level[lo:min(lo+maxInner, len(level))])
			hs := make([]uint64, len(kids))
			for i, k := range kids {
				hs[i] = k.hashes[0]
			}
			up = append(up, &hnode[E]{hashes: hs, kids: kids})
		}
		level = up
	}
	return htree[E]{root: level[0], n: len(hashes)}
}
