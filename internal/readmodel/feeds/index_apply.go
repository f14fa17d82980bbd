package feeds

import (
	"cmp"
	"math"
	"slices"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Apply returns a new Index with lines applied in order (a delta); ix is
// unchanged.
//
// The shards stay as they are: the names the delta changes go to the
// overlay, with their entries after the change (or a tombstone, for a name
// of a shard that has no entry left), and a lookup reads the overlay
// before the shard. Apply writes a new overlay, the old one's names and
// the changed ones, and rewrites the few shards whose overlay share has
// grown past a share of their names (dueShare), folding those in, so
// that the overlay stays a few per cent of the index. The new Index
// shares every shard it does not rewrite. The cost is the delta, the
// overlay and the rewritten shards, a few per cent of the index
// (docs/feed-index.md), not the feed; but when a small index has grown
// fourfold (or shrunk to a tenth) since its shards were sized, Apply
// builds the whole Index anew, once per such change in size.
func (ix *Index) Apply(lines []feed.Line) *Index {
	next := *ix
	if len(lines) == 0 {
		return &next
	}
	adds := 0
	for i := range lines {
		if !lines[i].Remove {
			adds++
		}
	}
	if ix.bits < maxShardBits && ix.names+adds > maxPerShard<<ix.bits {
		return ix.rebuild(lines)
	}

	a := ix.applyNames(&next, lines)
	next.sets, next.setIDs = a.sets.sets, a.sets.ids
	a.plan(len(lines))
	a.write()
	a.collapse()

	if next.bits > 0 && next.n < minPerShard<<next.bits {
		return next.rebuild(nil)
	}
	if next.overNames > overlayMin && next.overNames > next.names/overlayMax {
		// Should the rewrites ever fall behind so far that the overlay holds
		// a quarter of the names (the policy above keeps it to a few per
		// cent), build the index anew rather than let every Apply copy an
		// overlay the size of the index.
		return next.rebuild(nil)
	}
	return &next
}

// The overlay's bounds. A shard is rewritten when its names in the
// overlay reach a share of its names (dueShare; between half and one and a
// half times that, by shard, so that shards filled at the same rate do not
// all come due in the same Apply). An Apply rewrites no more shards than
// keep what it writes under maxApplyShare per cent of the index, unless it
// takes more to keep the overlay from growing. overlayMax is a safety net.
const (
	maxApplyShare = 6
	overlayMax    = 4
	overlayMin    = 1024
)

// dueShare is the overlay share at which a shard is rewritten, for deltas
// of lines lines to an index of names names. Every Apply copies the
// overlay, about share/2 of the index by names but more by bytes (it is
// kept two thirds full), and rewrites enough shards to take back as many
// names as the delta adds, lines/(share·names) of the index: the sum is
// least near share = √(lines/names) (docs/feed-index.md: 3.2 % for 10 000
// lines at 10 million; 10 % at a million, where such a delta is ten times
// as large a part of the feed). It is kept between 1/30 and 1/5.
func dueShare(lines, names int) float64 {
	return min(max(math.Sqrt(float64(lines)/float64(names+1)), 1.0/30), 1.0/5)
}

type applyRef struct {
	h uint64
	i int // the line's position in the delta
}

// applier holds the state of one Apply.
// applyNames is the applier of lines to ix, building next, with every
// name's lines applied: the lines go in hash order, so that the lines of
// one name are together (and those of one shard), and keep the order given
// within a name, so that the last wins.
func (ix *Index) applyNames(next *Index, lines []feed.Line) *applier {
	refs := make([]applyRef, len(lines))
	for i := range lines {
		refs[i] = applyRef{h: ix.key.name(lines[i].Name), i: i}
	}
	slices.SortFunc(refs, func(a, b applyRef) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	a := &applier{ix: ix, next: next, lines: lines, sets: setTable{sets: ix.sets, ids: ix.setIDs, shared: true}}
	a.changed = make([]changedName, 0, len(lines))
	for i := 0; i < len(refs); {
		j := i + 1
		for j < len(refs) && refs[j].h == refs[i].h {
			j++
		}
		group := refs[i:j]
		for len(group) > 0 {
			group = a.name(group)
		}
		i = j
	}
	return a
}

type applier struct {
	ix, next *Index
	lines    []feed.Line
	sets     setTable
	changed  []changedName // in hash order
	rewrite  []bool        // by shard: rewritten by this Apply
	w        shardWriter
}

// changedName is a name the delta touches: where it was, and its entries
// after the delta.
type changedName struct {
	h    uint64
	e    nameEntry // after the delta; empty: none left
	base int       // its entry's offset in its shard, or -1
	over int       // its entry's offset in the old overlay, or -1
}

// kept reports whether the overlay (or the shard it is folded into) keeps
// an entry for c: its entries, or a tombstone that hides the shard's.
func (c *changedName) kept() bool { return !c.e.empty() || c.base >= 0 }

// name applies the lines of group (one 64-bit hash) that name the same
// name as the first, and returns the others (a hash collision).
func (a *applier) name(group []applyRef) []applyRef {
	ix := a.ix
	name := a.lines[group[0].i].Name
	h := group[0].h
	ch := changedName{h: h, base: -1, over: -1}
	if ix.overHomes > 0 {
		fp := overlayFP(h)
		if o, ok := findSlot(ix.over, homeOf(fp, ix.overHomes)*slotSize, fp, name); ok {
			ch.over = o
		}
	}
	s := h >> ix.shift
	if homes := ix.homes[s]; homes > 0 {
		fp := shardFP(h, ix.bits)
		if o, ok := findSlot(ix.shards[s], homeOf(fp, homes)*slotSize, fp, name); ok {
			ch.base = o
		}
	}
	// The name's entries now: the overlay's, which shadow the shard's.
	// decodeSlot gives ch.e its own paths slice (ch.e starts without one);
	// the strings point into ix's blobs, which stay.
	switch {
	case ch.over >= 0:
		decodeSlot(ix.over, ch.over, &ch.e)
	case ch.base >= 0:
		decodeSlot(ix.shards[s], ch.base, &ch.e)
	default:
		ch.e.name = name
	}
	a.count(&ch.e, -1)
	var rest []applyRef
	for _, r := range group {
		l := &a.lines[r.i]
		if l.Name != name {
			rest = append(rest, r)
			continue
		}
		set := uint32(0)
		if !l.Remove {
			set = a.sets.intern(l.Codes) + 1
		}
		ch.e.apply(l.Path, set)
	}
	a.count(&ch.e, +1)
	a.changed = append(a.changed, ch)
	return rest
}

// count adds (sign +1) or removes (-1) e's keys and name to next's counts.
func (a *applier) count(e *nameEntry, sign int) {
	a.next.n += sign * countKeys(e)
	if !e.empty() {
		a.next.names += sign
	}
}

// plan chooses the shards to rewrite: those the delta touched whose
// overlay share is due, the fullest first, within the budget.
func (a *applier) plan(lines int) {
	ix := a.ix
	nshards := len(ix.shards)
	over := make([]int, nshards) // overlay names by shard, after the delta
	touched := make([]bool, nshards)
	for o, end := 0, shardSlots(ix.over)*slotSize; o < end; o += entrySize {
		if fp := le32(ix.over, o); fp != 0 {
			over[fpShard(fp, ix.bits)]++
		}
	}
	for i := range a.changed {
		c := &a.changed[i]
		s := c.h >> ix.shift
		touched[s] = true
		if c.over >= 0 {
			over[s]--
		}
		if c.kept() {
			over[s]++
		}
	}
	type due struct {
		s           int
		over, names int
	}
	var dues []due
	share := dueShare(lines, ix.names)
	for s := range nshards {
		names := blobNames(ix.shards[s])
		// Due when over ≥ names·share·(0.5 + jitter), jitter in [0, 1)
		// fixed by shard.
		jitter := float64(uint32(s)*0x9e3779b1>>22)/1024 + 0.5
		if touched[s] && over[s] > 0 && float64(over[s]) >= float64(names)*share*jitter {
			dues = append(dues, due{s, over[s], names})
		}
	}
	slices.SortFunc(dues, func(x, y due) int {
		// The largest share first: x.over/x.names against y.over/y.names.
		return cmp.Compare(y.over*(x.names+1), x.over*(y.names+1))
	})
	// The budget: what this Apply writes (a copy of the overlay, the
	// rewritten shards) stays under maxApplyShare of the index, but for
	// the rewrites that take back from the overlay as many names as the
	// delta adds to it, so that it cannot only grow (which deltas larger
	// than the budget keeps up with would make it do).
	size, growth := len(ix.over), -ix.overNames
	for _, blob := range ix.shards {
		size += len(blob)
	}
	for _, n := range over {
		growth += n
	}
	budget := size*maxApplyShare/100 - len(ix.over)
	a.rewrite = make([]bool, nshards)
	for _, d := range dues {
		n := len(ix.shards[d.s])
		if n > budget && growth <= 0 {
			break
		}
		budget -= n
		growth -= d.over
		a.rewrite[d.s] = true
	}
}

// folded is an overlay name on its way into the shard being rewritten:
// its hash, its entries and its entry's offset in the shard, or -1.
type folded struct {
	h    uint64
	e    nameEntry
	base int
}

// write writes the new overlay and the rewritten shards: the old overlay's
// entries that the delta does not replace and the changed names go to the
// new overlay, or, those of a shard being rewritten, into that shard.
// Both are edits of a copy where they can be (editBlob), so that their
// cost is the copy and the names that change, not a placement of every
// name.
func (a *applier) write() {
	ix, next := a.ix, a.next
	next.shards = slices.Clone(ix.shards)
	next.homes = slices.Clone(ix.homes)
	// The old overlay's entries that leave it: those the delta replaces,
	// and those of the shards being rewritten, which go into them.
	replaced := make([]int, 0, len(a.changed))
	for i := range a.changed {
		if o := a.changed[i].over; o >= 0 {
			replaced = append(replaced, o)
		}
	}
	slices.Sort(replaced)
	var remove []int
	fold := make([][]folded, len(ix.shards)) // by shard being rewritten
	for o, end := 0, shardSlots(ix.over)*slotSize; o < end; o += entrySize {
		fp := le32(ix.over, o)
		if len(replaced) > 0 && replaced[0] == o {
			replaced = replaced[1:]
			remove = append(remove, o)
			continue
		}
		if fp == 0 || !a.rewrite[fpShard(fp, ix.bits)] {
			continue
		}
		s := fpShard(fp, ix.bits)
		remove = append(remove, o)
		f := folded{base: -1}
		decodeSlot(ix.over, o, &f.e)
		// The overlay keeps no hash: the shard's fingerprint and entry
		// need it again.
		f.h = ix.key.name(f.e.name)
		if homes := ix.homes[s]; homes > 0 {
			sfp := shardFP(f.h, ix.bits)
			if bo, ok := findSlot(ix.shards[s], homeOf(sfp, homes)*slotSize, sfp, f.e.name); ok {
				f.base = bo
			}
		}
		fold[s] = append(fold[s], f)
	}
	var adds []added
	for i := range a.changed {
		ch := &a.changed[i]
		if !ch.kept() {
			continue
		}
		if s := int(ch.h >> ix.shift); a.rewrite[s] {
			fold[s] = append(fold[s], folded{h: ch.h, e: ch.e, base: ch.base})
		} else {
			adds = append(adds, added{fp: overlayFP(ch.h), e: &ch.e})
		}
	}
	for s, f := range fold {
		if a.rewrite[s] {
			a.rewriteShard(s, f)
		}
	}

	next.overNames = ix.overNames - len(remove) + len(adds)
	next.over, next.overHomes, next.overFilter = "", 0, nil
	if next.overNames > 0 {
		next.over, next.overHomes = a.edit(ix.over, remove, adds, next.overNames+next.overNames/4)
		next.overFilter, next.overShift = overlayFilter(next.over, next.overNames)
	}
}

// collapse asks for huge pages at the edges of the blobs this Apply wrote
// (the rewritten shards, the overlay), as a build does for all of them
// (collapseEdges). Left to the kernel's background collapsing, those
// edges may stay on 4 KB pages for long: a shard of 3.7 MB at a place of
// the heap that huge pages do not divide has about 2 MB of it in its edges
// on average, and after 60 Applies every shard has been rewritten about
// twice (docs/feed-index.md, "Steady state", for what that measured). A
// collapse copies at most 2 MB an edge, a fraction of a millisecond.
func (a *applier) collapse() {
	if len(a.next.over) >= hugePageSize {
		collapseEdges(a.next.over)
	}
	for s, r := range a.rewrite {
		if blob := a.next.shards[s]; r && len(blob) >= hugePageSize {
			collapseEdges(blob)
		}
	}
}

// overlayFilter is the filter of the overlay over of names names: 16 to 32
// bits a name, a power of two of them, one set a name, so that one
// suffix in 16 or fewer that is not in the overlay finds its bit set. At
// 200 000 names it is 400 KB, which stays in the processor's cache.
func overlayFilter(over string, names int) ([]uint64, uint) {
	lg := uint(6)
	for 1<<lg < 16*names {
		lg++
	}
	f := make([]uint64, 1<<(lg-6))
	shift := 32 - lg
	for o, end := 0, shardSlots(over)*slotSize; o < end; o += entrySize {
		if fp := le32(over, o); fp != 0 {
			i := overBit(fp, shift)
			f[i>>6] |= 1 << (i & 63)
		}
	}
	return f, shift
}

// edit returns blob with the entries at the offsets remove (sorted)
// removed and the names of add added: an edit of a copy where it fits
// (editBlob), else a new blob of room for names names, or more if the
// placement needs it (rebuildBlob), else, in the rare case that does not
// place every name either (five names of one fingerprint), one written
// whole by a shardWriter, which has a stash.
func (a *applier) edit(blob string, remove []int, add []added, names int) (string, uint32) {
	if b, homes, ok := editBlob(blob, remove, add); ok {
		return b, homes
	}
	slots := slotsFor(names)
	for range 3 {
		if b, homes, ok := rebuildBlob(blob, remove, add, slots); ok {
			return b, homes
		}
		slots += slots/8 + 1
	}
	w := &a.w
	for o, end := 0, shardSlots(blob)*slotSize; o < end; o += entrySize {
		if len(remove) > 0 && remove[0] == o {
			remove = remove[1:]
			continue
		}
		if le32(blob, o) != 0 {
			w.addEntry(blob, o)
		}
	}
	for _, ad := range add {
		w.add(ad.fp, ad.e)
	}
	return w.finish()
}

// rewriteShard writes shard s anew with fold, its overlay names, folded
// in: their entries replace the shard's, tombstones remove them.
func (a *applier) rewriteShard(s int, fold []folded) {
	ix := a.ix
	var dropped []int // the shard's entries the overlay replaces
	var adds []added
	for i := range fold {
		f := &fold[i]
		if f.base >= 0 {
			dropped = append(dropped, f.base)
		}
		if !f.e.empty() {
			adds = append(adds, added{fp: shardFP(f.h, ix.bits), e: &f.e})
		}
	}
	slices.Sort(dropped)
	names := blobNames(ix.shards[s]) - len(dropped) + len(adds)
	a.next.shards[s], a.next.homes[s] = a.edit(ix.shards[s], dropped, adds, names)
}

// rebuild builds ix with lines applied into an Index whose shards are
// sized for it, and no overlay.
func (ix *Index) rebuild(lines []feed.Line) *Index {
	b := newBuilder(ix.seed, ix.n+len(lines))
	for m := range ix.All() {
		b.set(feed.Line{Name: m.Name, Path: m.Path, Codes: m.Codes})
	}
	for _, l := range lines {
		b.set(l)
	}
	return b.build()
}
