package feeds

import (
	"slices"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// A replacement loads a new snapshot over an Index that is being served,
// a group of shards at a time, so that the node never holds two whole
// indexes (docs/feed-index.md, "Replacement"). Each step reads the
// snapshot again, stages only the lines of its group's shards, builds those
// shards in the held Index's hash space (its seed and shard bits) and
// returns an Index with them in place of the old ones: shards before the
// group's end are the new version's, the others still the old one's. The
// caller publishes each step, and the old shards it replaced become
// garbage, so memory at any time is the index plus one group's staging and
// shards, whatever the share of the feed that changes.
//
// Between steps a lookup is answered by the shard of the name it probes:
// every key has the old version's entry or the new one's, never none when
// both versions have it. A lookup that walks to a parent may take the name
// from one version and the parent from the other.

// maxReplaceSets is the code sets past which a snapshot is loaded anew
// instead of replacing the held Index: a replacement interns the new
// snapshot's sets into the held table (the old shards' ids must stay
// valid while they are served), which therefore only grows; a fresh
// build starts a new table.
const maxReplaceSets = 1 << 15

// canReplace reports whether a snapshot of entries keys can replace ix
// shard by shard: ix has the shard count a build of that many keys would
// have (the shards are sized for it), and room in its code set table.
func canReplace(ix *Index, entries int) bool {
	return ix != nil && ix.bits > 0 && ix.bits == shardBits(entries) && len(ix.sets) < maxReplaceSets
}

// replacer carries a replacement from step to step.
type replacer struct {
	cur       *Index // the last step's Index (the held one before the first)
	sets      setTable
	next      int // the first shard not yet replaced
	n, names  int // keys and names of the replaced shards
	oldN      int // the held Index's keys, reported until the last step
	oldNames  int
	stageSize []int // by shard: bytes the snapshot's lines stage (from count)
}

func newReplacer(ix *Index) *replacer {
	return &replacer{
		cur:       ix,
		sets:      setTable{sets: ix.sets, ids: ix.setIDs, shared: true},
		oldN:      ix.n,
		oldNames:  ix.names,
		stageSize: make([]int, len(ix.shards)),
	}
}

// shardOf is the shard of name in the held Index's hash space.
func (r *replacer) shardOf(name string) int { return int(r.cur.key.name(name) >> r.cur.shift) }

// count notes a line of the snapshot, in a first pass that checks the
// whole file before any shard is replaced: the bytes it will stage in its
// shard, by which groups are sized.
func (r *replacer) count(l feed.Line) {
	r.stageSize[r.shardOf(l.Name)] += 8 + 2*3 + len(l.Name) + len(l.Path)
}

// groups splits the shards into runs whose staging stays under budget
// bytes (at least one shard a run) and returns each run's end.
func (r *replacer) groups(budget int) []int {
	var ends []int
	acc := 0
	for s, n := range r.stageSize {
		if acc > 0 && acc+n > budget {
			ends = append(ends, s)
			acc = 0
		}
		acc += n
	}
	return append(ends, len(r.stageSize))
}

// step builds the shards [r.next, end) from the lines scan gives (the
// whole snapshot; other shards' lines are skipped) and returns the Index
// with those shards replaced, the held Index's overlay names in them
// dropped. The Index of the last step (end = every shard) is the new
// version alone, with its own counts; before it, Len reports the held
// Index's. Nothing of r.cur is written.
func (r *replacer) step(end int, scan func(func(feed.Line) error) error) (*Index, error) {
	ix := r.cur
	lo, hi := r.next, end
	b := &builder{seed: ix.seed, key: ix.key, sb: stageBits, stage: make([][]byte, 1<<stageBits), sets: r.sets}
	err := scan(func(l feed.Line) error {
		h := b.key.name(l.Name)
		if s := int(h >> ix.shift); s >= lo && s < hi {
			b.setHashed(h, l)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	next := *ix
	next.shards = slices.Clone(ix.shards)
	next.homes = slices.Clone(ix.homes)
	for s := lo; s < hi; s++ {
		next.shards[s], next.homes[s] = "", 0
	}
	// A shard is a run of 2^(stageBits-bits) buckets.
	per := stageBits - ix.bits
	counts := b.buildRange(&next, lo<<per, hi<<per)
	r.n += counts[0]
	r.names += counts[1]
	r.sets = b.sets
	next.sets, next.setIDs = b.sets.sets, b.sets.ids
	for s := lo; s < hi; s++ {
		if blob := next.shards[s]; len(blob) >= hugePageSize {
			collapseEdges(blob)
		}
	}
	r.next = hi
	if hi < len(ix.shards) {
		r.dropOverlay(&next, lo, hi)
	} else {
		next.n, next.names = r.n, r.names
		next.over, next.overHomes, next.overNames, next.overFilter = "", 0, 0, nil
		if next.n < minPerShard<<next.bits {
			// The new version is far smaller than the shards: size them
			// for it (cheap, since it is small).
			r.cur = next.rebuild(nil)
			return r.cur, nil
		}
	}
	if hi < len(ix.shards) {
		next.n, next.names = r.oldN, r.oldNames
	}
	r.cur = &next
	return r.cur, nil
}

// dropOverlay removes from next's overlay (shared with the Index before)
// the names of the shards [lo, hi), which the new version replaced: the
// overlay holds the old version's changes to them.
func (r *replacer) dropOverlay(next *Index, lo, hi int) {
	if next.overHomes == 0 {
		return
	}
	var remove []int
	for o, end := 0, shardSlots(next.over)*slotSize; o < end; o += entrySize {
		if fp := le32(next.over, o); fp != 0 {
			if s := fpShard(fp, next.bits); s >= lo && s < hi {
				remove = append(remove, o)
			}
		}
	}
	if len(remove) == 0 {
		return
	}
	names := next.overNames - len(remove)
	if names == 0 {
		next.over, next.overHomes, next.overNames, next.overFilter = "", 0, 0, nil
		return
	}
	var a applier
	next.over, next.overHomes = a.edit(next.over, remove, nil, names+names/4)
	next.overNames = names
	next.overFilter, next.overShift = overlayFilter(next.over, names)
}

// applyShards is Apply for one step of a large delta applied shard group
// by shard group (the client's applyDeltasStepwise): lines are the
// delta's lines of the shards [lo, hi) and only those, in order; every
// shard of the group that they touch or that has names in the overlay is
// rewritten with them and its overlay names folded in, so that the
// returned Index holds the group's shards at the delta's version, outside
// the overlay, and the others as ix has them. Its counts are exact. ix is
// unchanged.
func (ix *Index) applyShards(lines []feed.Line, lo, hi int) *Index {
	next := *ix
	a := ix.applyNames(&next, lines)
	next.sets, next.setIDs = a.sets.sets, a.sets.ids
	a.rewrite = make([]bool, len(ix.shards))
	for i := range a.changed {
		a.rewrite[a.changed[i].h>>ix.shift] = true
	}
	for o, end := 0, shardSlots(ix.over)*slotSize; o < end; o += entrySize {
		if fp := le32(ix.over, o); fp != 0 {
			if s := fpShard(fp, ix.bits); s >= lo && s < hi {
				a.rewrite[s] = true
			}
		}
	}
	a.write()
	a.collapse()
	return &next
}
