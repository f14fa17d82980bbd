package sessionindex

import (
	"slices"
	"sort"
)

// bset is a persistent (copy-on-write) B+tree of distinct uint64 keys: the
// secondary indexes (org, username, device id), whose keys are
// hash32(key)<<32 | slot. All sessions sharing a key are then one
// contiguous run, found with one descent and read in slot order, and a key
// shared by a million sessions still changes in O(log n). 8 bytes per
// session and index, plus about 1/64 for inner nodes.
//
// Invariants:
//   - leaves hold keys in ascending order;
//   - an inner node's keys[i] is a lower bound of every key under kids[i],
//     and keys[i] < every key under kids[i+1];
//   - a node owned by the current edit was created during this edit and is
//     invisible to readers, so it may be changed in place; any other node is
//     shared and is copied before a change.
type bset struct {
	root *bnode
	n    int
}

type bnode struct {
	owner *edit
	keys  []uint64
	kids  []*bnode // inner only; nil marks a leaf
}

const (
	bsetMax = 64
	// A node that falls below bsetMinFill after a delete is merged with a
	// neighbour when the two fit in bsetMergeMax, so a tree shrinking under
	// churn does not degrade into a chain of near-empty leaves.
	bsetMinFill  = 16
	bsetMergeMax = 48
)

func (n *bnode) leaf() bool { return n.kids == nil }

func (n *bnode) own(ed *edit) *bnode {
	if n.owner == ed {
		return n
	}
	c := &bnode{owner: ed, keys: slices.Clone(n.keys)}
	if !n.leaf() {
		c.kids = slices.Clone(n.kids)
	}
	return c
}

// child is the index of the subtree that holds k.
func (n *bnode) child(k uint64) int {
	i := sort.Search(len(n.keys), func(i int) bool { return n.keys[i] > k })
	return max(i-1, 0)
}

func lowerBound(ks []uint64, k uint64) int {
	return sort.Search(len(ks), func(i int) bool { return ks[i] >= k })
}

func (t *bset) len() int { return t.n }

// insert adds k and reports whether it was absent.
func (t *bset) insert(ed *edit, k uint64) bool {
	if t.root == nil {
		t.root = &bnode{owner: ed, keys: []uint64{k}}
		t.n = 1
		return true
	}
	nn, right, added := t.root.insert(ed, k)
	if !added {
		return false
	}
	if right != nil {
		nn = &bnode{owner: ed, keys: []uint64{nn.keys[0], right.keys[0]}, kids: []*bnode{nn, right}}
	}
	t.root = nn
	t.n++
	return true
}

func (n *bnode) insert(ed *edit, k uint64) (nn, right *bnode, added bool) {
	if n.leaf() {
		i := lowerBound(n.keys, k)
		if i < len(n.keys) && n.keys[i] == k {
			return n, nil, false
		}
		nn = n.own(ed)
		nn.keys = slices.Insert(nn.keys, i, k)
		if len(nn.keys) > bsetMax {
			mid := len(nn.keys) / 2
			right = &bnode{owner: ed, keys: slices.Clone(nn.keys[mid:])}
			nn.keys = slices.Clone(nn.keys[:mid])
		}
		return nn, right, true
	}
	i := n.child(k)
	c, r, added := n.kids[i].insert(ed, k)
	if !added {
		return n, nil, false
	}
	nn = n.own(ed)
	nn.kids[i] = c
	if k < nn.keys[i] {
		nn.keys[i] = k
	}
	if r != nil {
		nn.keys = slices.Insert(nn.keys, i+1, r.keys[0])
		nn.kids = slices.Insert(nn.kids, i+1, r)
		if len(nn.kids) > bsetMax {
			mid := len(nn.kids) / 2
			right = &bnode{owner: ed, keys: slices.Clone(nn.keys[mid:]), kids: slices.Clone(nn.kids[mid:])}
			nn.keys = slices.Clone(nn.keys[:mid])
			nn.kids = slices.Clone(nn.kids[:mid])
		}
	}
	return nn, right, true
}

// remove deletes k and reports whether it was present.
func (t *bset) remove(ed *edit, k uint64) bool {
	if t.root == nil {
		return false
	}
	nn, removed := t.root.remove(ed, k)
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

func (n *bnode) remove(ed *edit, k uint64) (*bnode, bool) {
	if n.leaf() {
		i := lowerBound(n.keys, k)
		if i == len(n.keys) || n.keys[i] != k {
			return n, false
		}
		if len(n.keys) == 1 {
			return nil, true
		}
		nn := n.own(ed)
		nn.keys = slices.Delete(nn.keys, i, i+1)
		return nn, true
	}
	i := n.child(k)
	c, removed := n.kids[i].remove(ed, k)
	if !removed {
		return n, false
	}
	nn := n.own(ed)
	if c == nil {
		nn.keys = slices.Delete(nn.keys, i, i+1)
		nn.kids = slices.Delete(nn.kids, i, i+1)
		if len(nn.kids) == 0 {
			return nil, true
		}
		return nn, true
	}
	nn.kids[i] = c
	if len(c.keys) < bsetMinFill {
		nn.mergeKid(ed, i)
	}
	return nn, true
}

// mergeKid merges kids[i] into a neighbour when the two fit in
// bsetMergeMax. n must be owned by ed.
func (n *bnode) mergeKid(ed *edit, i int) {
	j := i + 1 // merge kids[i] and kids[j] into kids[i]
	if j == len(n.kids) || (i > 0 && len(n.kids[i-1].keys) < len(n.kids[j].keys)) {
		i, j = i-1, i
	}
	if i < 0 || len(n.kids[i].keys)+len(n.kids[j].keys) > bsetMergeMax {
		return
	}
	a, b := n.kids[i], n.kids[j]
	m := &bnode{owner: ed, keys: slices.Concat(a.keys, b.keys)}
	if !a.leaf() {
		m.kids = slices.Concat(a.kids, b.kids)
		// b's first bound may be below our separator for b (it was kid 0
		// somewhere); ours is a valid bound that also lies above all of a.
		m.keys[len(a.keys)] = n.keys[j]
	}
	n.kids[i] = m
	n.keys = slices.Delete(n.keys, j, j+1)
	n.kids = slices.Delete(n.kids, j, j+1)
}

// ascend calls fn with every key ≥ from, in order, until fn returns false.
func (t *bset) ascend(from uint64, fn func(uint64) bool) {
	if t.root != nil {
		t.root.ascend(from, fn)
	}
}

func (n *bnode) ascend(from uint64, fn func(uint64) bool) bool {
	if n.leaf() {
		for _, k := range n.keys[lowerBound(n.keys, from):] {
			if !fn(k) {
				return false
			}
		}
		return true
	}
	for _, c := range n.kids[n.child(from):] {
		if !c.ascend(from, fn) {
			return false
		}
	}
	return true
}

// buildBset packs sorted, distinct keys into full leaves: the bulk load,
// with no copy-on-write slack.
func buildBset(keys []uint64) bset {
	if len(keys) == 0 {
		return bset{}
	}
	var level []*bnode
	for lo := 0; lo < len(keys); lo += bsetMax {
		level = append(level, &bnode{keys: slices.Clone(keys[lo:min(lo+bsetMax, len(keys))])})
	}
	for len(level) > 1 {
		var up []*bnode
		for lo := 0; lo < len(level); lo += bsetMax {
			kids := slices.Clone(level[lo:min(lo+bsetMax, len(level))])
			ks := make([]uint64, len(kids))
			for i, k := range kids {
				ks[i] = k.keys[0]
			}
			up = append(up, &bnode{keys: ks, kids: kids})
		}
		level = up
	}
	return bset{root: level[0], n: len(keys)}
}
