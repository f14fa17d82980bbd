// Package feeds is every node's feed index (docs/feed-index.md): the category
// feeds an operator publishes as versioned directories (internal/feed),
// polled into memory and swapped in atomically, so the decision engine
// turns a domain (and a URL path) into category codes without I/O or locks.
//
// Data flow: feed directory (HTTP or local path) → Client (poll, verify,
// apply snapshot or deltas) → one immutable Index per feed → a Set of all
// feeds behind an atomic pointer → policy (simulator, resolver).
package feeds

import (
	"hash/maphash"
	"iter"
	"strings"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Index is one feed's domain → codes index. It is immutable: Apply returns
// a new Index, and any number of goroutines read one without locks.
//
// The layout (docs/feed-index.md): names are spread by a hash over at
// most 128 shards; each shard is one immutable string, a two-choice cuckoo
// hash table of 64-byte slots (one cache line, two 32-byte entries that
// hold a name and its codes whole when they fit), then the records of the
// names that do not (long names, path entries). The shard table is small
// enough to stay in the processor's cache and the large shards are on huge
// pages where the system has them, so a lookup of a cold name waits for
// memory once: the two slots of the name and of each of its parents, read
// together. The names that deltas changed since their shard was written
// are in the overlay, one more table of the same form that shadows the
// shards and that a lookup reads in the same wait; Apply writes a new
// overlay, and rewrites the shards whose share of it has grown, folding
// it in. Code sets are interned: an entry holds a small number into sets.
type Index struct {
	shards []string // 1<<bits shards, each empty or a blob (index_shard.go)
	homes  []uint32 // each shard's number of slots, | stashFlag (index_shard.go)
	shift  uint     // 64 - bits: a hash's shard is h >> shift
	bits   uint
	seed   maphash.Seed
	key    nameHash // derived from seed (index_hash.go)
	n      int      // keys: name entries and name/path entries
	names  int      // names with an entry, in the shards or the overlay

	// over is the overlay (index_apply.go): a blob of the shards' format,
	// keyed by overlayFP, holding every name a delta changed since its
	// shard was last written, with its entries after the change, or a
	// tombstone when it has none left. overHomes is its homes (as a
	// shard's), 0 when it is empty. overNames counts its names. overFilter is a
	// bitset with a bit set for each of its names (overBit), so that a
	// lookup reads the overlay's lines only for the few suffixes that may
	// be in it.
	over       string
	overHomes  uint32
	overNames  int
	overFilter []uint64
	overShift  uint

	// sets[id] is an interned code set; setIDs finds a set's id. Both are
	// shared by every Index derived by Apply and never written once
	// shared: Apply clones them before adding a set.
	sets   [][]uint16
	setIDs map[string]uint32
}

// Match is the entry a lookup found: Name is the name or the parent that
// matched (a suffix of the name asked for), Path the entry's path ("" for a
// name entry), Codes its codes. Key is Name+Path. Codes is shared by the
// Index and every Match of the same code set: read it, never write it.
type Match struct {
	Name  string
	Path  string
	Codes []uint16
}

// Key is the matching feed key, name[/path].
func (m Match) Key() string { return m.Name + m.Path }

// Len is the number of keys (name and name/path entries).
func (ix *Index) Len() int { return ix.n }

// Lookup finds the entry for name (an A-label without trailing dot) and
// path ("" or starting with '/') by the feeds' lookup rule: the name,
// else each parent in turn, the most specific wins; among the entries of
// one name, the path entry whose path is the longest prefix of path, else
// the name's own entry. A name whose path entries do not apply and which
// has no entry of its own does not stop the walk: its parents are asked.
//
// Lookup does not allocate: Name is a suffix of name, Path and Codes point
// into the Index.
func (ix *Index) Lookup(name, path string) (Match, bool) {
	// The walk is in two passes over the name's suffixes. The first hashes
	// each from the right, extending its parent's hash, computes the two
	// slots of its probe in its shard and in the overlay, and asks for
	// all their lines at once with prefetches (index_prefetch_*): those do
	// not wait for the lines, unlike loads, which hold up everything after
	// them in the processor's window until their line arrives. With loads,
	// a lookup of a name of three or four labels filled that window before
	// its last probe's lines were asked for, and waited for memory more
	// than once (docs/feed-index.md). The second pass searches, most specific
	// first, in lines that have arrived or are on the way, each probe's
	// first slot before its second (probeSlots).
	var dots [maxDots]int
	nd := findDots(name, &dots)
	if nd > maxDots {
		return ix.lookupDeep(name, path)
	}
	var probes [lookupBatch]probe
	var lines lineBatch
	nl := 0
	h, end := ix.key.root, len(name)
	for k := nd; k >= 0; k-- {
		start := 0
		if k > 0 {
			start = dots[k-1] + 1
		}
		// ix.key.step and the shard's part of ix.probe, inlined by hand:
		// the compiler does not (they are over its budget), and the two
		// calls a label spilled and reloaded the loop's state around them
		// (docs/feed-index.md; up to 10 ns a lookup in the run of
		// 2026-11-24, kept in docs/performance.md's git history). The
		// property tests fail if this step and nameHash.step, by which
		// the index was built, ever differ.
		label := name[start:end]
		switch n := len(label); {
		case n > 16:
			h = ix.key.stepLong(h, label)
		default:
			var a, b uint64
			switch {
			case n >= 8:
				a, b = le64str(label, 0), le64str(label, n-8)
			case n >= 4:
				a, b = uint64(le32(label, 0)), uint64(le32(label, n-4))
			case n > 0:
				a = uint64(label[0])<<16 | uint64(label[n>>1])<<8 | uint64(label[n-1])
			}
			h = mix(ix.key.k1^uint64(n), mix(a^ix.key.k1, b^h^ix.key.k0))
		}
		p := &probes[k]
		p.from, p.shard, p.fp, p.over = uint32(start), uint32(h>>ix.shift), shardFP(h, ix.bits), false
		if homes := ix.homes[p.shard]; homes > 0 {
			first := homeOf(p.fp, homes)
			p.slot, p.slot2 = uint32(first*slotSize), uint32(altOf(p.fp, first, homes)*slotSize)
			base := uintptr(unsafe.Pointer(unsafe.StringData(ix.shards[p.shard])))
			lines[nl&lineMask], lines[(nl+1)&lineMask] = base+uintptr(p.slot), base+uintptr(p.slot2)
			nl += 2
		}
		if ix.overHomes > 0 {
			p.ofp = overlayFP(h)
			if i := overBit(p.ofp, ix.overShift); ix.overFilter[i>>6]&(1<<(i&63)) != 0 {
				nl = ix.probeOverlay(p, &lines, nl)
			}
		}
		end = start - 1
	}
	prefetchLines(&lines, nl)
	for k := 0; k <= nd; k++ {
		p := &probes[k]
		if !p.over {
			// The common case, without search's generality: a shard
			// without a stash, the overlay's filter clear. Most suffixes
			// are not in the index, which the four fingerprints of their
			// slots say; a hit is matched from the entry found, without
			// looking for it again, and a hit held in its entry (nine in
			// ten) builds its Match here, so that it is returned in
			// registers rather than copied through slotMatch's frame.
			homes := ix.homes[p.shard]
			if homes == 0 {
				continue
			}
			if homes&stashFlag == 0 {
				blob, suffix := ix.shards[p.shard], name[p.from:]
				if o, ok := probeSlots(blob, int(p.slot), int(p.slot2), p.fp, suffix); ok {
					if blob[o+5] != slotRecord {
						return Match{Name: suffix, Codes: ix.sets[le16(blob, o+6)-1]}, true
					}
					if m, ok := ix.recordMatch(blob, o, suffix, path); ok {
						return m, true
					}
				}
				continue
			}
		}
		if m, ok := ix.search(p, name, path); ok {
			return m, true
		}
	}
	return Match{}, false
}

// lookupBatch is how many suffixes a lookup probes at once: more labels
// than that are rare (tracker hosts have four or five). maxDots is the
// dots of a name of lookupBatch labels.
const (
	lookupBatch = 8
	maxDots     = lookupBatch - 1
)

// lineBatch is the addresses of the lines a batch of probes reads: two in
// the shard and two in the overlay for each of lookupBatch suffixes. They
// are addresses inside the Index's blobs, which the Index keeps alive;
// they are only handed to prefetchLines, never read through.
type lineBatch [4 * lookupBatch]uintptr

// lookupDeep is Lookup for names of more than lookupBatch labels. It walks
// from the right, lookupBatch suffixes at a time: a match in a batch is
// more specific than any in the batches to its right, so the last batch
// with one has the answer.
func (ix *Index) lookupDeep(name, path string) (Match, bool) {
	var probes [lookupBatch]probe
	var lines lineBatch
	var best Match
	found := false
	h, end := ix.key.root, len(name)
	for {
		k, start, nl := 0, 0, 0
		for k < lookupBatch {
			start = labelStart(name, end)
			h = ix.key.step(h, name[start:end])
			nl = ix.probe(&probes[k], h, start, &lines, nl)
			k++
			if start == 0 {
				break
			}
			end = start - 1
		}
		prefetchLines(&lines, nl)
		for j := k - 1; j >= 0; j-- {
			if m, ok := ix.search(&probes[j], name, path); ok {
				best, found = m, true
				break
			}
		}
		if start == 0 {
			return best, found
		}
	}
}

// probe fills p for the suffix at from, whose hash is h: its shard, its
// fingerprints and its two slots in the shard and in the overlay (when
// the overlay's filter lets it through). It appends the addresses of
// those slots' lines to lines from n on and returns the new count; it
// reads none of them, so that nothing here waits for memory.
func (ix *Index) probe(p *probe, h uint64, from int, lines *lineBatch, n int) int {
	p.from, p.shard, p.fp, p.over = uint32(from), uint32(h>>ix.shift), shardFP(h, ix.bits), false
	if homes := ix.homes[p.shard]; homes > 0 {
		first := homeOf(p.fp, homes)
		p.slot, p.slot2 = uint32(first*slotSize), uint32(altOf(p.fp, first, homes)*slotSize)
		base := uintptr(unsafe.Pointer(unsafe.StringData(ix.shards[p.shard])))
		lines[n&lineMask], lines[(n+1)&lineMask] = base+uintptr(p.slot), base+uintptr(p.slot2)
		n += 2
	}
	if ix.overHomes > 0 {
		p.ofp = overlayFP(h)
		if i := overBit(p.ofp, ix.overShift); ix.overFilter[i>>6]&(1<<(i&63)) != 0 {
			n = ix.probeOverlay(p, lines, n)
		}
	}
	return n
}

// probeOverlay is probe's part for a suffix that the overlay's filter
// lets through (p.ofp set): its two slots in the overlay, whose lines'
// addresses it appends to lines from n on. The filter's test stays in
// the callers, so that the suffixes it stops (all but about one in
// sixteen of those not in the overlay) cost no call.
func (ix *Index) probeOverlay(p *probe, lines *lineBatch, n int) int {
	p.over = true
	first := homeOf(p.ofp, ix.overHomes)
	p.oslot, p.oslot2 = uint32(first*slotSize), uint32(altOf(p.ofp, first, ix.overHomes)*slotSize)
	base := uintptr(unsafe.Pointer(unsafe.StringData(ix.over)))
	lines[n&lineMask], lines[(n+1)&lineMask] = base+uintptr(p.oslot), base+uintptr(p.oslot2)
	return n + 2
}

// lineMask masks an index into a lineBatch: a batch appends at most
// len(lineBatch{}) addresses, so the mask changes none, and spares the
// bounds checks.
const lineMask = len(lineBatch{}) - 1

// overBit is the bit of the overlay filter for the overlay fingerprint
// fp, in a filter of 2^(32-shift) bits.
func overBit(fp uint32, shift uint) uint32 { return fp * 0x9e3779b1 >> shift }

// search looks for the entry of one probe's suffix: in the overlay, which
// shadows the shard, else in the shard. It reads the fingerprints of the
// probe's slots, whose lines the lookup has prefetched.
func (ix *Index) search(p *probe, name, path string) (Match, bool) {
	suffix := name[p.from:]
	if p.over {
		o, ok := probeSlots(ix.over, int(p.oslot), int(p.oslot2), p.ofp, suffix)
		if !ok && ix.overHomes&stashFlag != 0 {
			b, stash := blobSlots(ix.over)
			o, ok = findStash(ix.over, b, stash, p.ofp, suffix)
		}
		if ok {
			return ix.slotMatch(ix.over, o, suffix, path)
		}
	}
	homes := ix.homes[p.shard]
	if homes == 0 {
		return Match{}, false
	}
	blob := ix.shards[p.shard]
	o, ok := probeSlots(blob, int(p.slot), int(p.slot2), p.fp, suffix)
	if !ok && homes&stashFlag != 0 {
		b, stash := blobSlots(blob)
		o, ok = findStash(blob, b, stash, p.fp, suffix)
	}
	if !ok {
		return Match{}, false
	}
	return ix.slotMatch(blob, o, suffix, path)
}

// slotMatch applies the lookup rule to the name in the entry at o of blob.
func (ix *Index) slotMatch(blob string, o int, name, path string) (Match, bool) {
	if blob[o+5] != slotRecord {
		return Match{Name: name, Codes: ix.sets[le16(blob, o+6)-1]}, true
	}
	return ix.recordMatch(blob, o, name, path)
}

// recordMatch is slotMatch for an entry whose name and entries are in a
// record.
func (ix *Index) recordMatch(blob string, o int, name, path string) (Match, bool) {
	r := recordReader{s: blob, i: int(le32(blob, o+8))}
	r.str()
	return ix.match(blob[r.i:], name, path)
}

// probe is one suffix of a lookup: where it starts in the name, its
// shard, its fingerprints, and its two slots in the shard and in the
// overlay (offsets in their blobs, which a blob's uint32 record offsets
// already bound). It holds no pointers, so that filling it costs no write
// barrier, and 32-bit fields, so that the lookup's array of them, which
// Go zeroes on every call, is 288 bytes rather than 448.
type probe struct {
	from, slot, slot2, oslot, oslot2 uint32
	shard, fp, ofp                   uint32
	over                             bool // the overlay may have it
}

// match applies the lookup rule to one name's record: the longest path entry
// that prefixes path (paths are stored longest first, so the first that
// does), else the name's own entry.
func (ix *Index) match(entries, name, path string) (Match, bool) {
	r := recordReader{s: entries}
	bare := r.uvarint()
	for np := r.uvarint(); np > 0; np-- {
		p := r.str()
		set := r.uvarint()
		if strings.HasPrefix(path, p) {
			return Match{Name: name, Path: p, Codes: ix.sets[set-1]}, true
		}
	}
	if bare == 0 {
		return Match{}, false
	}
	return Match{Name: name, Codes: ix.sets[bare-1]}, true
}

// All yields every key of the Index as the Match a lookup of exactly that
// key would find, in no particular order. It is for tests, tools and
// rebuilds, not for the query path.
func (ix *Index) All() iter.Seq[Match] {
	return func(yield func(Match) bool) {
		var e nameEntry
		for _, blob := range ix.shards {
			for o, end := 0, shardSlots(blob)*slotSize; o < end; o += entrySize {
				if le32(blob, o) == 0 {
					continue
				}
				decodeSlot(blob, o, &e)
				if ix.overHomes > 0 {
					// A name in the overlay is the overlay's to yield.
					fp := overlayFP(ix.key.name(e.name))
					if _, ok := findSlot(ix.over, homeOf(fp, ix.overHomes)*slotSize, fp, e.name); ok {
						continue
					}
				}
				if !yieldEntry(yield, ix.sets, &e) {
					return
				}
			}
		}
		for o, end := 0, shardSlots(ix.over)*slotSize; o < end; o += entrySize {
			if le32(ix.over, o) == 0 {
				continue
			}
			decodeSlot(ix.over, o, &e)
			if !yieldEntry(yield, ix.sets, &e) {
				return
			}
		}
	}
}

// yieldEntry yields each key of e (none for a tombstone) and reports
// whether to go on.
func yieldEntry(yield func(Match) bool, sets [][]uint16, e *nameEntry) bool {
	if e.bare != 0 && !yield(Match{Name: e.name, Codes: sets[e.bare-1]}) {
		return false
	}
	for _, p := range e.paths {
		if !yield(Match{Name: e.name, Path: p.path, Codes: sets[p.set-1]}) {
			return false
		}
	}
	return true
}

// SizeBytes estimates the memory the Index holds: its shard table, the
// shards, the overlay and the code sets (not the Go allocator's rounding,
// which adds a few per cent). Shards shared with an older or newer Index
// are counted in each.
func (ix *Index) SizeBytes() int {
	size := len(ix.shards)*(16+4) + len(ix.over) + 8*len(ix.overFilter)
	for _, blob := range ix.shards {
		size += len(blob)
	}
	for _, s := range ix.sets {
		size += 24 + 2*len(s)
	}
	return size + len(ix.setIDs)*48
}

// Builder collects a snapshot's lines into an Index.
type Builder struct{ b *builder }

// NewBuilder returns a Builder for about sizeHint entries.
func NewBuilder(sizeHint int) *Builder {
	return &Builder{b: newBuilder(maphash.MakeSeed(), sizeHint)}
}

// Set sets the codes of l's key; a later Set of the same key wins. Lines
// that remove (l.Remove) delete the key.
func (b *Builder) Set(l feed.Line) { b.b.set(l) }

// Index returns the built Index; the Builder must not be used after.
func (b *Builder) Index() *Index {
	ix := b.b.build()
	b.b = nil
	return ix
}
