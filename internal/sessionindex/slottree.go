package sessionindex

import "github.com/google/btree"

// slotTree is one secondary index (org, username or device id): a B-tree
// (github.com/google/btree) of distinct keys hash32(key)<<32 | slot. All
// sessions sharing a key are then one contiguous run, found with one descent
// and read in slot order, and a key shared by a million sessions still
// changes in O(log n).
//
// google/btree does copy-on-write per tree value: a tree writes in place
// the nodes its own context created and copies any other before changing
// it; Clone gives the tree and its clone two new contexts, so that from then
// on both copy every node they share. Clone writes its receiver, though, and
// the library forbids concurrent Clones of one tree, while concurrent Apply
// calls on one snapshot must be safe and a published snapshot must never be
// written. So a published tree is never cloned, nor written: the first
// change of an edit clones a private copy of the tree's header (copying it
// only reads the snapshot), and the writes go to that clone, whose new
// context owns none of the snapshot's nodes and copies every one it
// changes. The snapshot's own context stays in its header, and no tree
// that has it is ever written again. Nodes a tree frees (in merges) go to a
// free list shared by all trees derived from one, guarded by a mutex; it
// only receives nodes owned by the freeing tree's context, created by the
// running edit and never seen by a reader.
type slotTree struct {
	t     *btree.BTreeG[uint64] // nil until the first insert
	owner *edit                 // the edit that may write t; any other clones it first
}

// slotTreeDegree gives nodes of 31 to 63 keys: at 1M keys a change copies
// about 4 nodes of up to 1 KiB, and a descent reads as many.
const slotTreeDegree = 32

// mut returns the tree for writing by ed.
func (s *slotTree) mut(ed *edit) *btree.BTreeG[uint64] {
	switch {
	case s.t == nil:
		s.t = btree.NewOrderedG[uint64](slotTreeDegree)
	case s.owner != ed:
		h := *s.t
		s.t = h.Clone()
	}
	s.owner = ed
	return s.t
}

// insert adds k and reports whether it was absent.
func (s *slotTree) insert(ed *edit, k uint64) bool {
	_, found := s.mut(ed).ReplaceOrInsert(k)
	return !found
}

// remove deletes k and reports whether it was present.
func (s *slotTree) remove(ed *edit, k uint64) bool {
	if s.t == nil {
		return false
	}
	_, found := s.mut(ed).Delete(k)
	return found
}

// run calls fn with the slot of every key tag<<32 | slot, in slot order,
// until fn returns false.
func (s *slotTree) run(tag uint32, fn func(slot uint32) bool) {
	if s.t == nil {
		return
	}
	s.t.AscendGreaterOrEqual(uint64(tag)<<32, func(k uint64) bool {
		return uint32(k>>32) == tag && fn(uint32(k))
	})
}

// buildSlotTree makes a tree of sorted, distinct keys, owned by no edit.
// They go in in descending order: google/btree splits a full node in the
// middle and goes on filling the left half, so the right halves it leaves
// behind are allocated at their size, about 10 bytes a key in all; in
// ascending order the halves left behind keep the full node's array, about
// 18 bytes a key (docs/subscriber-index.md, Builder; measured 2026-11-24).
func buildSlotTree(keys []uint64) slotTree {
	if len(keys) == 0 {
		return slotTree{}
	}
	t := btree.NewOrderedG[uint64](slotTreeDegree)
	for i := len(keys) - 1; i >= 0; i-- {
		t.ReplaceOrInsert(keys[i])
	}
	return slotTree{t: t}
}
