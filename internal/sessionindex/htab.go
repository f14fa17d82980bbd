package sessionindex

import (
	"math/bits"
	"slices"
)

// htab is a persistent hash table from keys of type K to slot numbers: the
// id index (K is a 32-bit hash of the id, confirmed against the entry) and
// the routing tables (K is the masked address itself, so a route is
// confirmed without reading the entry). It is a hash trie on the top bits
// of the key's 32-bit hash, 16 ways per level, whose leaves are
// open-addressing tables (linear probing from the hash's low half scaled
// to the table size) of up to splitAt cells, kept between 60 % and 75 %
// full. A leaf's table hangs directly off its parent's slot, so a
// lookup walks two or three small inner nodes, which stay in cache, and
// reads one cell.
//
// A change copies the root-to-leaf path (inner nodes of 16 slots and one
// leaf of at most 512 cells) once per edit. A leaf grows by a third at a
// time until it holds splitAt cells, then splits into 16 leaves one level
// down; there is never a whole-table rehash, so no single change costs more
// than one leaf. Several cells may carry one key (the id index, where
// distinct ids share a hash).

type htab[K comparable] struct {
	root hkid[K]
}

// hcell is one cell; slot+1 is stored, so the zero cell is empty.
type hcell[K comparable] struct {
	key  K
	slot uint32
}

// hkid is one slot of an inner node (or the root): a subtree or a leaf.
type hkid[K comparable] struct {
	inner *hnode[K]  // a subtree; nil for a leaf
	cells []hcell[K] // leaf: power-of-two length, nil when empty
	owner *edit      // owner of cells
	used  int        // cells in use in this subtree
}

type hnode[K comparable] struct {
	owner *edit
	kids  [fan]hkid[K]
}

// hashFn returns the 32-bit hash of a key; the tables call it to rehash
// when a leaf grows or splits.
type hashFn[K comparable] func(K) uint32

const (
	fanBits  = 4
	fan      = 1 << fanBits
	topShift = 32 - fanBits
	leafMin  = 8
	splitAt  = 384 // cells in a leaf that splits rather than grows
)

// home is where the probe for hash h starts in a leaf of n cells: the
// hash's low half scaled to n (its top bits chose the leaf).
func home(h uint32, n int) int { return int(uint64(bits.RotateLeft32(h, 16)) * uint64(n) >> 32) }

// dist is how far b lies after a in a probe run of a leaf of n cells.
func dist(a, b, n int) int {
	if d := b - a; d >= 0 {
		return d
	}
	return b - a + n
}

// newCells returns a table for about n cells at 60 % load, as large as its
// allocation's size class allows.
func newCells[K comparable](n int) []hcell[K] {
	c := slices.Grow([]hcell[K](nil), max(leafMin, n*5/3+1))
	return c[:cap(c)]
}

func kidIndex(h uint32, shift int) int { return int(h >> uint(shift) & (fan - 1)) }

func (t *htab[K]) len() int { return t.root.used }

// leaf returns the cells of the leaf that holds hash h.
func (t *htab[K]) leaf(h uint32) []hcell[K] {
	k := &t.root
	for shift := topShift; k.inner != nil; shift -= fanBits {
		k = &k.inner.kids[h>>uint(shift)&(fan-1)]
	}
	return k.cells
}

// get returns the slot of the first cell with key (hash h).
func (t *htab[K]) get(h uint32, key K) (uint32, bool) {
	cells := t.leaf(h)
	if len(cells) == 0 {
		return 0, false
	}
	i := home(h, len(cells))
	return probeRun(cells, i, cells[i], key)
}

// probeRun finishes a lookup of key whose probe run starts at cell i,
// already read as c.
func probeRun[K comparable](cells []hcell[K], i int, c hcell[K], key K) (uint32, bool) {
	for {
		if c.slot == 0 {
			return 0, false
		}
		if c.key == key {
			return c.slot - 1, true
		}
		if i++; i == len(cells) {
			i = 0
		}
		c = cells[i]
	}
}

// find returns the slot of the first cell with key (hash h) that match
// accepts.
func (t *htab[K]) find(h uint32, key K, match func(uint32) bool) (uint32, bool) {
	cells := t.leaf(h)
	if len(cells) == 0 {
		return 0, false
	}
	for i, n := home(h, len(cells)), len(cells); ; {
		c := &cells[i]
		if c.slot == 0 {
			return 0, false
		}
		if c.key == key && match(c.slot-1) {
			return c.slot - 1, true
		}
		if i++; i == n {
			i = 0
		}
	}
}

// index is the position of the cell (key, slot) in the leaf cells, or -1.
func index[K comparable](cells []hcell[K], h uint32, c hcell[K]) int {
	if len(cells) == 0 {
		return -1
	}
	for i, n := home(h, len(cells)), len(cells); ; {
		switch cells[i] {
		case c:
			return i
		case hcell[K]{}:
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

func (n *hnode[K]) own(ed *edit) *hnode[K] {
	if n.owner == ed {
		return n
	}
	c := *n
	c.owner = ed
	return &c
}

// insert adds the cell (key, slot); hf is the key's hash function.
func (t *htab[K]) insert(ed *edit, key K, slot uint32, hf hashFn[K]) {
	t.root.insert(ed, hf(key), hcell[K]{key, slot + 1}, hf, topShift)
}

func (k *hkid[K]) insert(ed *edit, h uint32, c hcell[K], hf hashFn[K], shift int) {
	if k.inner != nil {
		k.inner = k.inner.own(ed)
		k.inner.kids[kidIndex(h, shift)].insert(ed, h, c, hf, shift-fanBits)
		k.used++
		return
	}
	switch {
	case (k.used+1)*4 <= len(k.cells)*3:
		k.ownCells(ed)
	case k.used+1 > splitAt && shift >= 0:
		k.split(ed, hf, shift)
		k.insert(ed, h, c, hf, shift)
		return
	default:
		k.resize(ed, k.used+1, hf)
	}
	place(k.cells, h, c)
	k.used++
}

func (k *hkid[K]) ownCells(ed *edit) {
	if k.owner != ed {
		k.cells, k.owner = slices.Clone(k.cells), ed
	}
}

// place puts c in the first free cell of its probe run.
func place[K comparable](cells []hcell[K], h uint32, c hcell[K]) {
	i := home(h, len(cells))
	for cells[i].slot != 0 {
		if i++; i == len(cells) {
			i = 0
		}
	}
	cells[i] = c
}

// resize rebuilds the leaf for n cells.
func (k *hkid[K]) resize(ed *edit, n int, hf hashFn[K]) {
	old := k.cells
	k.cells, k.owner = newCells[K](n), ed
	for _, c := range old {
		if c.slot != 0 {
			place(k.cells, hf(c.key), c)
		}
	}
}

// split turns the leaf k into a subtree whose leaves partition its cells by
// the hash bits at shift.
func (k *hkid[K]) split(ed *edit, hf hashFn[K], shift int) {
	n := &hnode[K]{owner: ed}
	for _, c := range k.cells {
		if c.slot != 0 {
			n.kids[kidIndex(hf(c.key), shift)].used++
		}
	}
	for i := range n.kids {
		if kid := &n.kids[i]; kid.used > 0 {
			kid.cells, kid.owner = newCells[K](kid.used), ed
		}
	}
	for _, c := range k.cells {
		if c.slot != 0 {
			h := hf(c.key)
			place(n.kids[kidIndex(h, shift)].cells, h, c)
		}
	}
	k.inner, k.cells, k.owner = n, nil, nil
}

// remove deletes the cell (key, slot) and reports whether it was there.
func (t *htab[K]) remove(ed *edit, key K, slot uint32, hf hashFn[K]) bool {
	h, c := hf(key), hcell[K]{key, slot + 1}
	if index(t.leaf(h), h, c) < 0 {
		return false
	}
	t.root.remove(ed, h, c, hf, topShift)
	return true
}

func (k *hkid[K]) remove(ed *edit, h uint32, c hcell[K], hf hashFn[K], shift int) {
	k.used--
	if k.inner != nil {
		k.inner = k.inner.own(ed)
		k.inner.kids[kidIndex(h, shift)].remove(ed, h, c, hf, shift-fanBits)
		switch {
		case k.used == 0:
			k.inner = nil
		case k.used <= splitAt/3:
			k.merge(ed, hf)
		}
		return
	}
	if k.used == 0 {
		k.cells, k.owner = nil, nil
		return
	}
	k.ownCells(ed)
	removeAt(k.cells, index(k.cells, h, c), hf)
	if len(k.cells) > leafMin && k.used*10 < len(k.cells)*3 {
		k.resize(ed, k.used, hf)
	}
}

// removeAt empties cell i and shifts later cells of the probe run back, so
// that lookups need no tombstones.
func removeAt[K comparable](cells []hcell[K], i int, hf hashFn[K]) {
	n := len(cells)
	for {
		cells[i] = hcell[K]{}
		j := i
		for {
			if j++; j == n {
				j = 0
			}
			c := cells[j]
			if c.slot == 0 {
				return
			}
			// c may fill the hole if the hole lies between c's home and j.
			if h := home(hf(c.key), n); dist(h, j, n) >= dist(i, j, n) {
				cells[i] = c
				i = j
				break
			}
		}
	}
}

// merge turns the subtree k, once it holds few cells and only leaves, back
// into one leaf, so a shrinking table does not keep a scattering of
// near-empty leaves.
func (k *hkid[K]) merge(ed *edit, hf hashFn[K]) {
	for _, kid := range k.inner.kids {
		if kid.inner != nil {
			return
		}
	}
	cells := newCells[K](k.used)
	for _, kid := range k.inner.kids {
		for _, c := range kid.cells {
			if c.slot != 0 {
				place(cells, hf(c.key), c)
			}
		}
	}
	k.inner, k.cells, k.owner = nil, cells, ed
}

// replace changes the slot of the cell (key, from) to to.
func (t *htab[K]) replace(ed *edit, key K, from, to uint32, hf hashFn[K]) bool {
	h, c := hf(key), hcell[K]{key, from + 1}
	if index(t.leaf(h), h, c) < 0 {
		return false
	}
	k := &t.root
	for shift := topShift; k.inner != nil; shift -= fanBits {
		k.inner = k.inner.own(ed)
		k = &k.inner.kids[kidIndex(h, shift)]
	}
	k.ownCells(ed)
	k.cells[index(k.cells, h, c)].slot = to + 1
	return true
}
