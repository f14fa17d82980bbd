package feeds

import (
	"cmp"
	"hash/maphash"
	"slices"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Apply returns a new Index with lines applied in order (a delta); ix is
// unchanged.
//
// The new Index shares every shard the delta does not touch: Apply copies
// the shard table (20 bytes a shard) and rebuilds each touched shard from
// the old one, copying the slots and records it does not change as they
// are. Its
// cost is the delta's lines plus the touched shards, not the feed, except
// when the feed has grown fourfold (or shrunk to a tenth) since its shards
// were sized: then Apply builds the whole Index anew, once per such
// change in size.
func (ix *Index) Apply(lines []feed.Line) *Index {
	next := *ix
	if len(lines) == 0 {
		return &next
	}
	bits := 64 - ix.shift
	adds := 0
	for i := range lines {
		if !lines[i].Remove {
			adds++
		}
	}
	if bits < maxShardBits && ix.names+adds > maxPerShard<<bits {
		return ix.rebuild(lines)
	}

	// The lines in shard order, and within a shard in fingerprint order,
	// the order of its records; the lines of one name stay in the order
	// given, so that the last wins.
	refs := make([]applyRef, len(lines))
	for i := range lines {
		h := maphash.String(ix.seed, lines[i].Name)
		refs[i] = applyRef{key: h>>ix.shift<<32 | h&0xffffffff, h: h, i: i}
	}
	slices.SortFunc(refs, func(a, b applyRef) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})

	next.shards = slices.Clone(ix.shards)
	next.homes = slices.Clone(ix.homes)
	a := applier{next: &next, lines: lines, sets: setTable{sets: ix.sets, ids: ix.setIDs, shared: true}}
	for i := 0; i < len(refs); {
		s := refs[i].key >> 32
		j := i + 1
		for j < len(refs) && refs[j].key>>32 == s {
			j++
		}
		next.shards[s], next.homes[s] = a.shard(ix.shards[s], ix.homes[s], refs[i:j])
		i = j
	}
	next.sets, next.setIDs = a.sets.sets, a.sets.ids

	if bits > 0 && next.n < minPerShard<<bits {
		return next.rebuild(nil)
	}
	return &next
}

type applyRef struct {
	key uint64 // shard << 32 | fingerprint
	h   uint64
	i   int // the line's position in the delta
}

// applier holds the scratch space Apply reuses from shard to shard.
type applier struct {
	next    *Index
	lines   []feed.Line
	sets    setTable
	w       shardWriter
	changed []changedName
	dropped []int
}

// changedName is a name the delta touches in the shard being rebuilt: its
// old slot (or -1) and its entries after the delta (none left: empty).
type changedName struct {
	fp  uint32
	old int
	e   nameEntry
}

// shard returns old, which has homes homes, with the lines of refs
// applied, and the new shard's homes.
func (a *applier) shard(old string, homes uint32, refs []applyRef) (string, uint32) {
	a.changed, a.dropped = a.changed[:0], a.dropped[:0]
	for i := 0; i < len(refs); {
		j := i + 1
		for j < len(refs) && refs[j].h == refs[i].h {
			j++
		}
		group := refs[i:j]
		for len(group) > 0 {
			group = a.name(old, homes, group)
		}
		i = j
	}
	slices.Sort(a.dropped)

	// Merge the untouched slots, copied as they are, with the changed
	// names: both are in fingerprint order.
	c, d := 0, 0
	for o, end := 0, shardSlots(old)*slotSize; o < end; o += slotSize {
		fp := le32(old, o)
		if fp == 0 {
			continue
		}
		for ; c < len(a.changed) && a.changed[c].fp < fp; c++ {
			a.addChanged(c)
		}
		if d < len(a.dropped) && a.dropped[d] == o {
			d++
			continue
		}
		a.w.addSlot(old, o)
	}
	for ; c < len(a.changed); c++ {
		a.addChanged(c)
	}
	return a.w.finish()
}

func (a *applier) addChanged(c int) {
	if ch := &a.changed[c]; !ch.e.empty() {
		a.w.add(ch.fp, &ch.e)
	}
}

// name applies the lines of group (one 64-bit hash) that name the same
// name as the first, and returns the others (a hash collision).
func (a *applier) name(old string, homes uint32, group []applyRef) []applyRef {
	name := a.lines[group[0].i].Name
	fp := fingerprint(group[0].h)
	ch := changedName{fp: fp, old: -1}
	if homes > 0 {
		if o, ok := findSlot(old, homeOf(fp, homes)*slotSize, fp, name); ok {
			ch.old = o
			a.dropped = append(a.dropped, o)
			decodeSlot(old, o, &ch.e)
			// The paths point into old, which stays; the slice is this
			// entry's own.
			ch.e.paths = slices.Clone(ch.e.paths)
			a.next.n -= countKeys(&ch.e)
			a.next.names--
		}
	}
	if ch.old < 0 {
		ch.e.name = name
	}
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
	if !ch.e.empty() {
		a.next.n += countKeys(&ch.e)
		a.next.names++
	}
	a.changed = append(a.changed, ch)
	return rest
}

// rebuild builds ix with lines applied into an Index whose shards are
// sized for it.
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
