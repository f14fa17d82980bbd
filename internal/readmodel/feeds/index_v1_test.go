package feeds

// The index as it was before the direct-addressed layout (docs/feed-index.md,
// "Before and after"): kept in a test file only, so that one benchmark binary
// measures both side by side on the same machine at the same moment. Its
// identifiers carry the prefix v1.

import (
	"cmp"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// v1Index is one feed's domain → codes index. It is immutable: Apply returns
// a new v1Index, and any number of goroutines read one without locks.
//
// The layout (docs/feed-index.md): names are spread by a hash over 2^bits
// shards of about 48 names; each shard is one immutable string, a small
// hash table of 32-byte slots that hold a name and its codes whole when
// they fit, and the records of the names that do not (long names, path
// entries). A lookup of a cold name waits for memory about once: the home
// slots of the name and of its parents are read together. Apply copies
// the shard table and rebuilds only the shards its lines hash to; the old
// v1Index keeps the old shards. Code sets are interned: a slot holds a
// small number into sets.
type v1Index struct {
	shards []string // 1<<bits shards, each empty or a blob (index_shard.go)
	homes  []uint32 // each shard's number of home slots (index_shard.go)
	shift  uint     // 64 - bits: a hash's shard is h >> shift
	seed   maphash.Seed
	n      int // keys: name entries and name/path entries
	names  int // names (records), which the shard sizing follows

	// sets[id] is an interned code set; setIDs finds a set's id. Both are
	// shared by every v1Index derived by Apply and never written once
	// shared: Apply clones them before adding a set.
	sets   [][]uint16
	setIDs map[string]uint32
}

// Len is the number of keys (name and name/path entries).
func (ix *v1Index) Len() int { return ix.n }

// Lookup finds the entry for name (an A-label without trailing dot) and
// path ("" or starting with '/') by the rule of DESIGN.md §6.2: the name,
// else each parent in turn, the most specific wins; among the entries of
// one name, the path entry whose path is the longest prefix of path, else
// the name's own entry. A name whose path entries do not apply and which
// has no entry of its own does not stop the walk: its parents are asked.
//
// Lookup does not allocate: Name is a suffix of name, Path and Codes point
// into the v1Index.
func (ix *v1Index) Lookup(name, path string) (Match, bool) {
	// The walk is in two passes over up to v1lookupBatch suffixes. The first
	// hashes each and reads its home slot, the one memory access a v1probe
	// waits for; these reads do not depend on one another, so the
	// processor has them in flight together, and the probes of a name's
	// parents wait for memory once, not once each. The second pass
	// searches, most specific first, in lines that have arrived.
	var probes [v1lookupBatch]v1probe
	for from := 0; ; {
		k, more := 0, true
		for k < v1lookupBatch {
			s := name[from:]
			h := maphash.String(ix.seed, s)
			p := &probes[k]
			p.from, p.shard, p.fp = from, uint32(h>>ix.shift), v1fingerprint(h)
			p.at = 0 // an empty shard: no name, as an empty slot says
			if homes := ix.homes[p.shard]; homes > 0 {
				p.slot = v1homeOf(p.fp, homes) * v1slotSize
				p.at = v1le32(ix.shards[p.shard], p.slot)
			}
			k++
			dot := strings.IndexByte(s, '.')
			if dot < 0 {
				more = false
				break
			}
			from += dot + 1
		}
		for j := range k {
			p := &probes[j]
			if p.at == 0 || p.at > p.fp { // an empty home or a greater v1fingerprint: no such name
				continue
			}
			blob, suffix := ix.shards[p.shard], name[p.from:]
			o, ok := v1findSlot(blob, p.slot, p.fp, suffix)
			if !ok {
				continue
			}
			if blob[o+5] == v1slotInline {
				return Match{Name: suffix, Codes: ix.sets[v1le16(blob, o+6)-1]}, true
			}
			r := v1recordReader{s: blob, i: int(v1le32(blob, o+8))}
			r.str()
			if m, ok := ix.match(blob[r.i:], suffix, path); ok {
				return m, true
			}
		}
		if !more {
			return Match{}, false
		}
	}
}

// v1lookupBatch is how many suffixes a lookup probes at once: more labels
// than that are rare (tracker hosts have four or five).
const v1lookupBatch = 8

// v1probe is one suffix of a lookup: where it starts in the name, its
// shard, its v1fingerprint, its home slot and the v1fingerprint there. It
// holds no pointers, so that filling it costs no write barrier.
type v1probe struct {
	from, slot int
	shard      uint32
	fp, at     uint32
}

// match applies the §6.2 rule to one name's record: the longest path entry
// that prefixes path (paths are stored longest first, so the first that
// does), else the name's own entry.
func (ix *v1Index) match(entries, name, path string) (Match, bool) {
	r := v1recordReader{s: entries}
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

// All yields every key of the v1Index as the Match a lookup of exactly that
// key would find, in no particular order. It is for tests, tools and
// rebuilds, not for the query path.
func (ix *v1Index) All() iter.Seq[Match] {
	return func(yield func(Match) bool) {
		var e v1nameEntry
		for _, blob := range ix.shards {
			for o, end := 0, v1shardSlots(blob)*v1slotSize; o < end; o += v1slotSize {
				if v1le32(blob, o) == 0 {
					continue
				}
				v1decodeSlot(blob, o, &e)
				if e.bare != 0 && !yield(Match{Name: e.name, Codes: ix.sets[e.bare-1]}) {
					return
				}
				for _, p := range e.paths {
					if !yield(Match{Name: e.name, Path: p.path, Codes: ix.sets[p.set-1]}) {
						return
					}
				}
			}
		}
	}
}

// SizeBytes estimates the memory the v1Index holds: its shard table, the
// shards, and the code sets (not the Go allocator's rounding, which adds a
// few per cent). Shards shared with an older or newer v1Index are counted in
// each.
func (ix *v1Index) SizeBytes() int {
	size := len(ix.shards) * (16 + 4)
	for _, blob := range ix.shards {
		size += len(blob)
	}
	for _, s := range ix.sets {
		size += 24 + 2*len(s)
	}
	return size + len(ix.setIDs)*48
}

// v1Builder collects a snapshot's lines into a v1Index.
type v1Builder struct{ b *v1builder }

// v1NewBuilder returns a v1Builder for about sizeHint entries.
func v1NewBuilder(sizeHint int) *v1Builder {
	return &v1Builder{b: v1newBuilder(maphash.MakeSeed(), sizeHint)}
}

// Set sets the codes of l's key; a later Set of the same key wins. Lines
// that remove (l.Remove) delete the key.
func (b *v1Builder) Set(l feed.Line) { b.b.set(l) }

// v1Index returns the built v1Index; the v1Builder must not be used after.
func (b *v1Builder) Index() *v1Index {
	ix := b.b.build()
	b.b = nil
	return ix
}

// Apply returns a new v1Index with lines applied in order (a delta); ix is
// unchanged.
//
// The new v1Index shares every shard the delta does not touch: Apply copies
// the shard table (20 bytes a shard) and rebuilds each touched shard from
// the old one, copying the slots and records it does not change as they
// are. Its
// cost is the delta's lines plus the touched shards, not the feed, except
// when the feed has grown fourfold (or shrunk to a tenth) since its shards
// were sized: then Apply builds the whole v1Index anew, once per such
// change in size.
func (ix *v1Index) Apply(lines []feed.Line) *v1Index {
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
	if bits < v1maxShardBits && ix.names+adds > v1maxPerShard<<bits {
		return ix.rebuild(lines)
	}

	// The lines in shard order, and within a shard in v1fingerprint order,
	// the order of its records; the lines of one name stay in the order
	// given, so that the last wins.
	refs := make([]v1applyRef, len(lines))
	for i := range lines {
		h := maphash.String(ix.seed, lines[i].Name)
		refs[i] = v1applyRef{key: h>>ix.shift<<32 | h&0xffffffff, h: h, i: i}
	}
	slices.SortFunc(refs, func(a, b v1applyRef) int {
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
	a := v1applier{next: &next, lines: lines, sets: v1setTable{sets: ix.sets, ids: ix.setIDs, shared: true}}
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

	if bits > 0 && next.n < v1minPerShard<<bits {
		return next.rebuild(nil)
	}
	return &next
}

type v1applyRef struct {
	key uint64 // shard << 32 | v1fingerprint
	h   uint64
	i   int // the line's position in the delta
}

// v1applier holds the scratch space Apply reuses from shard to shard.
type v1applier struct {
	next    *v1Index
	lines   []feed.Line
	sets    v1setTable
	w       v1shardWriter
	changed []v1changedName
	dropped []int
}

// v1changedName is a name the delta touches in the shard being rebuilt: its
// old slot (or -1) and its entries after the delta (none left: empty).
type v1changedName struct {
	fp  uint32
	old int
	e   v1nameEntry
}

// shard returns old, which has homes homes, with the lines of refs
// applied, and the new shard's homes.
func (a *v1applier) shard(old string, homes uint32, refs []v1applyRef) (string, uint32) {
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
	// names: both are in v1fingerprint order.
	c, d := 0, 0
	for o, end := 0, v1shardSlots(old)*v1slotSize; o < end; o += v1slotSize {
		fp := v1le32(old, o)
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

func (a *v1applier) addChanged(c int) {
	if ch := &a.changed[c]; !ch.e.empty() {
		a.w.add(ch.fp, &ch.e)
	}
}

// name applies the lines of group (one 64-bit hash) that name the same
// name as the first, and returns the others (a hash collision).
func (a *v1applier) name(old string, homes uint32, group []v1applyRef) []v1applyRef {
	name := a.lines[group[0].i].Name
	fp := v1fingerprint(group[0].h)
	ch := v1changedName{fp: fp, old: -1}
	if homes > 0 {
		if o, ok := v1findSlot(old, v1homeOf(fp, homes)*v1slotSize, fp, name); ok {
			ch.old = o
			a.dropped = append(a.dropped, o)
			v1decodeSlot(old, o, &ch.e)
			// The paths point into old, which stays; the slice is this
			// entry's own.
			ch.e.paths = slices.Clone(ch.e.paths)
			a.next.n -= v1countKeys(&ch.e)
			a.next.names--
		}
	}
	if ch.old < 0 {
		ch.e.name = name
	}
	var rest []v1applyRef
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
		a.next.n += v1countKeys(&ch.e)
		a.next.names++
	}
	a.changed = append(a.changed, ch)
	return rest
}

// rebuild builds ix with lines applied into a v1Index whose shards are
// sized for it.
func (ix *v1Index) rebuild(lines []feed.Line) *v1Index {
	b := v1newBuilder(ix.seed, ix.n+len(lines))
	for m := range ix.All() {
		b.set(feed.Line{Name: m.Name, Path: m.Path, Codes: m.Codes})
	}
	for _, l := range lines {
		b.set(l)
	}
	return b.build()
}

// Shard sizing. A shard holds about v1targetPerShard names after a build;
// Apply keeps the shards until they average v1maxPerShard (the index grew
// fourfold) or the keys fall under v1minPerShard a shard (it shrank to a
// tenth or less), then rebuilds the whole v1Index at the right size, which
// amortises to a constant per line. The numbers are a trade-off
// (docs/feed-index.md): a delta of d lines over S shards rebuilds about
// 1-e^(-d/S) of them, so S must be about ten times d for a delta to copy
// under a tenth of the index (10 000 lines over 2^18 shards: 3.7 %); each
// shard costs 20 bytes of table, which a lookup reads and Apply copies,
// and its allocation's rounding.
const (
	v1targetPerShard = 48
	v1maxPerShard    = 4 * v1targetPerShard
	v1minPerShard    = 3
	v1maxShardBits   = 24
)

// v1shardBits is the number of shard bits for names names: the fewest that
// keep a shard at v1targetPerShard names or fewer.
func v1shardBits(names int) uint {
	b := uint(0)
	for b < v1maxShardBits && names > v1targetPerShard<<b {
		b++
	}
	return b
}

// v1stageBits caps the number of buckets a v1Builder stages lines in: 4096
// buckets of a few thousand lines each keep every sort small and let the
// build release the staging memory bucket by bucket.
const v1stageBits = 12

// v1builder stages lines by hash, then sorts each bucket and writes its
// shards. A v1staged line is
//
//	8 bytes  the name's hash, little-endian
//	uvarint len(name), name, uvarint len(path), path
//	uvarint  code set id + 1, 0 for a removal
//
// so that the build neither hashes again nor keeps a string per line.
type v1builder struct {
	seed  maphash.Seed
	sb    uint // staging bits: a line goes to bucket h >> (64-sb)
	stage [][]byte
	lines int
	sets  v1setTable
}

func v1newBuilder(seed maphash.Seed, sizeHint int) *v1builder {
	sb := min(v1stageBits, max(4, v1shardBits(sizeHint)))
	return &v1builder{seed: seed, sb: sb, stage: make([][]byte, 1<<sb), sets: v1setTable{ids: map[string]uint32{}}}
}

func (b *v1builder) set(l feed.Line) {
	h := maphash.String(b.seed, l.Name)
	set := uint32(0)
	if !l.Remove {
		set = b.sets.intern(l.Codes) + 1
	}
	k := h >> (64 - b.sb)
	buf := b.stage[k]
	buf = append(buf, byte(h), byte(h>>8), byte(h>>16), byte(h>>24), byte(h>>32), byte(h>>40), byte(h>>48), byte(h>>56))
	buf = v1appendUvarint(buf, uint64(len(l.Name)))
	buf = append(buf, l.Name...)
	buf = v1appendUvarint(buf, uint64(len(l.Path)))
	buf = append(buf, l.Path...)
	buf = v1appendUvarint(buf, uint64(set))
	b.stage[k] = buf
	b.lines++
}

// v1staged is one v1staged line in a bucket being built: its sort key (shard
// and v1fingerprint, the order of a shard), its hash and where it is.
type v1staged struct {
	key uint64
	h   uint64
	off int
}

func (b *v1builder) build() *v1Index {
	bits := v1shardBits(b.lines)
	ix := &v1Index{
		shards: make([]string, 1<<bits),
		homes:  make([]uint32, 1<<bits),
		shift:  64 - bits,
		seed:   b.seed,
		sets:   b.sets.sets,
		setIDs: b.sets.ids,
	}
	// Fewer shards than buckets: merge buckets so that each maps to whole
	// shards (a bucket's lines are those whose top sb hash bits are its
	// number, and a shard's those whose top bits are its).
	if bits < b.sb {
		merged := make([][]byte, 1<<bits)
		for k, buf := range b.stage {
			merged[k>>(b.sb-bits)] = append(merged[k>>(b.sb-bits)], buf...)
		}
		b.stage, b.sb = merged, bits
	}
	var (
		refs []v1staged
		w    v1shardWriter
		e    v1nameEntry
		cur  = -1 // the shard w is writing
	)
	for k, buf := range b.stage {
		refs = refs[:0]
		for off := 0; off < len(buf); {
			h := v1le64(buf, off)
			refs = append(refs, v1staged{key: h>>ix.shift<<32 | h&0xffffffff, h: h, off: off})
			off = v1skipStaged(buf, off)
		}
		// Stable by position: a later line of the same key wins.
		slices.SortFunc(refs, func(a, b v1staged) int {
			if c := cmp.Compare(a.key, b.key); c != 0 {
				return c
			}
			if c := cmp.Compare(a.h, b.h); c != 0 {
				return c
			}
			return cmp.Compare(a.off, b.off)
		})
		for i := 0; i < len(refs); {
			j := i + 1
			for j < len(refs) && refs[j].h == refs[i].h {
				j++
			}
			// refs[i:j] share a 64-bit hash: one name, but for a collision,
			// which v1buildName handles by taking one name at a time.
			group := refs[i:j]
			for len(group) > 0 {
				name, rest := v1buildName(buf, group, &e)
				group = rest
				ix.n += v1countKeys(&e)
				if e.empty() {
					continue
				}
				if s := int(refs[i].h >> ix.shift); s != cur {
					if cur >= 0 {
						ix.setShard(cur, &w)
					}
					cur = s
				}
				e.name = name
				w.add(v1fingerprint(refs[i].h), &e)
				ix.names++
			}
			i = j
		}
		// The bucket's lines are in shards now; let the collector have
		// them while the next bucket is built.
		b.stage[k] = nil
	}
	if cur >= 0 {
		ix.setShard(cur, &w)
	}
	return ix
}

func (ix *v1Index) setShard(s int, w *v1shardWriter) {
	ix.shards[s], ix.homes[s] = w.finish()
}

// v1buildName applies, in order, the lines of group that name the same name
// as the first, fills e with the result and returns the name and the lines
// of other names (left over by a hash collision). The strings in e point
// into buf, which the caller keeps unchanged while it uses them.
func v1buildName(buf []byte, group []v1staged, e *v1nameEntry) (string, []v1staged) {
	*e = v1nameEntry{paths: e.paths[:0]}
	var name string
	var rest []v1staged
	for _, r := range group {
		n, path, set := v1readStaged(buf, r.off)
		if name == "" {
			name = n
		} else if n != name {
			rest = append(rest, r)
			continue
		}
		e.apply(path, set)
	}
	return name, rest
}

func v1countKeys(e *v1nameEntry) int {
	n := len(e.paths)
	if e.bare != 0 {
		n++
	}
	return n
}

func v1le64(b []byte, i int) uint64 {
	_ = b[i+7]
	return uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
		uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56
}

func v1bytesUvarint(b []byte, i int) (uint64, int) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := b[i]
		i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, i
		}
	}
}

// v1readStaged reads the v1staged line at off. The strings share buf's memory
// (unsafe.String): the build only reads buf, and copies what it keeps into
// the shard, so no string per line is allocated for 10 million lines.
func v1readStaged(buf []byte, off int) (name, path string, set uint32) {
	off += 8
	l, off := v1bytesUvarint(buf, off)
	name = unsafe.String(&buf[off], int(l))
	off += int(l)
	l, off = v1bytesUvarint(buf, off)
	if l > 0 {
		path = unsafe.String(&buf[off], int(l))
	}
	off += int(l)
	v, _ := v1bytesUvarint(buf, off)
	return name, path, uint32(v)
}

func v1skipStaged(buf []byte, off int) int {
	off += 8
	l, off := v1bytesUvarint(buf, off)
	off += int(l)
	l, off = v1bytesUvarint(buf, off)
	off += int(l)
	_, off = v1bytesUvarint(buf, off)
	return off
}

// v1setTable interns code sets: few distinct sets exist in a feed (one per
// category and the odd combination), so a record holds a small number
// instead of a slice. shared marks tables a v1Index already holds: the
// first new set clones them, since a v1Index is never written.
type v1setTable struct {
	sets   [][]uint16
	ids    map[string]uint32
	shared bool
	key    []byte
}

// intern returns the id of codes, adding a copy of them if new.
func (t *v1setTable) intern(codes []uint16) uint32 {
	k := t.key[:0]
	for _, c := range codes {
		k = append(k, byte(c), byte(c>>8))
	}
	t.key = k
	if id, ok := t.ids[string(k)]; ok {
		return id
	}
	if t.shared {
		t.sets = slices.Clone(t.sets)
		t.ids = maps.Clone(t.ids)
		t.shared = false
	}
	id := uint32(len(t.sets))
	// Clipped, so that a caller appending to a Match's Codes copies
	// instead of writing over the next set.
	t.sets = append(t.sets, slices.Clip(slices.Clone(codes)))
	t.ids[string(k)] = id
	return id
}

// A shard is one immutable string (a "blob"), so that a lookup reaches
// everything of a shard through one pointer, returns Path as a substring
// without allocating, and the garbage collector never scans it (a string
// holds no pointers). It is a small hash table of fixed 32-byte slots,
// then the records of the names that do not fit in a slot, then the
// number of slots:
//
//	[0:32T)        T slots
//	[32T:len-4)    records
//	[len-4:len)    T, uint32 little-endian
//
// A slot is empty (all zero) or holds one name:
//
//	[0:4)    fp, the name's v1fingerprint: the low 32 bits of its hash, | 1
//	         so that no name's is 0, the empty slot's
//	[4]      min(len(name), 255)
//	[5]      v1slotInline: the name and its one entry are in the slot;
//	         v1slotRecord: they are in the record at [8:12)
//	[6:8)    inline: the code set id + 1 of the name's own entry
//	[8:32)   inline: the name, zero-padded; record: [8:12) its offset
//
// and a record is
//
//	uvarint len(name), name
//	uvarint bare       code set id + 1 of the name's own entry, 0 for none
//	uvarint np         number of path entries, then np times, longest first:
//	uvarint len(path), path, uvarint set id + 1
//
// A name's home slot is fp·H/2^32, H being about 4/3 of the shard's names
// (v1Index.homes holds it beside the shard table). The names are in
// v1fingerprint order, each in its home slot or, when that is taken, the
// next free one (linear probing in Robin Hood order), and one empty slot
// ends the table, so a search starts at the home slot and stops at the
// name, at an empty slot, or at a greater v1fingerprint: 1.5 slots on
// average, mostly within the home slot's cache line. Names of up to 24
// bytes with no path entry, four in five of a real feed's, are answered
// from that one line; the rest need their record too. Names are stored
// whole, so a v1fingerprint collision costs one more comparison, never a
// false match.

const (
	v1slotSize   = 32
	v1inlineMax  = v1slotSize - 8
	v1slotInline = 0
	v1slotRecord = 1
)

// v1fingerprint is the part of a name's hash a slot holds.
func v1fingerprint(h uint64) uint32 { return uint32(h) | 1 }

// v1homeOf is fp's home slot among h homes: fingerprints are uniform, so
// names spread evenly over the homes.
func v1homeOf(fp uint32, h uint32) int { return int(uint64(fp) * uint64(h) >> 32) }

// v1homesFor is H for n names: a load of at most 3/4, and 0 for none.
func v1homesFor(n int) uint32 {
	if n == 0 {
		return 0
	}
	return uint32(n + n/3 + 1)
}

// v1shardSlots is the number of slots of blob.
func v1shardSlots(blob string) int {
	if blob == "" {
		return 0
	}
	return int(v1le32(blob, len(blob)-4))
}

// v1findSlot returns the offset of name's slot in blob, searching from the
// slot at offset o (its home).
func v1findSlot(blob string, o int, fp uint32, name string) (int, bool) {
	for ; ; o += v1slotSize {
		f := v1le32(blob, o)
		if f == 0 || f > fp {
			return 0, false
		}
		if f == fp && v1slotHolds(blob, o, name) {
			return o, true
		}
	}
}

// v1slotHolds reports whether the full slot at o holds name.
func v1slotHolds(blob string, o int, name string) bool {
	if l := int(blob[o+4]); l != len(name) && (l < 255 || len(name) < 255) {
		return false
	}
	if blob[o+5] == v1slotInline {
		return blob[o+8:o+8+len(name)] == name
	}
	r := v1recordReader{s: blob, i: int(v1le32(blob, o+8))}
	return r.str() == name
}

// v1decodeSlot fills e from the full slot at o; the strings point into blob.
func v1decodeSlot(blob string, o int, e *v1nameEntry) {
	if blob[o+5] == v1slotInline {
		e.name = blob[o+8 : o+8+int(blob[o+4])]
		e.bare = uint32(v1le16(blob, o+6))
		e.paths = e.paths[:0]
		return
	}
	v1decodeRecord(blob[v1le32(blob, o+8):], e)
}

func v1le16(s string, i int) uint16 {
	_ = s[i+1]
	return uint16(s[i]) | uint16(s[i+1])<<8
}

func v1le32(s string, i int) uint32 {
	_ = s[i+3]
	return uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
}

func v1putLE32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// v1recordReader reads a record's fields in order.
type v1recordReader struct {
	s string
	i int
}

func (r *v1recordReader) uvarint() uint32 {
	b := r.s[r.i]
	r.i++
	if b < 0x80 {
		return uint32(b)
	}
	v, shift := uint32(b&0x7f), uint(7)
	for {
		b = r.s[r.i]
		r.i++
		v |= uint32(b&0x7f) << shift
		if b < 0x80 {
			return v
		}
		shift += 7
	}
}

func (r *v1recordReader) str() string {
	l := int(r.uvarint())
	s := r.s[r.i : r.i+l]
	r.i += l
	return s
}

// v1recordLen is the length of the record at the start of rec.
func v1recordLen(rec string) int {
	r := v1recordReader{s: rec}
	r.str()
	r.uvarint()
	for np := r.uvarint(); np > 0; np-- {
		r.str()
		r.uvarint()
	}
	return r.i
}

// v1nameEntry is one name's entries while they are built or changed.
type v1nameEntry struct {
	name  string
	bare  uint32        // code set id + 1 of the name's own entry, 0 for none
	paths []v1pathEntry // longest first
}

type v1pathEntry struct {
	path string
	set  uint32 // code set id + 1
}

func (e *v1nameEntry) empty() bool { return e.bare == 0 && len(e.paths) == 0 }

// inline reports whether e fits in a slot.
func (e *v1nameEntry) inline() bool {
	return len(e.name) <= v1inlineMax && len(e.paths) == 0 && e.bare != 0 && e.bare <= 0xffff
}

// apply sets the codes of the key name+path to set (a code set id + 1),
// or removes the key when set is 0, and returns the change in the number
// of keys.
func (e *v1nameEntry) apply(path string, set uint32) int {
	if path == "" {
		had := e.bare != 0
		e.bare = set
		switch {
		case had && set == 0:
			return -1
		case !had && set != 0:
			return 1
		}
		return 0
	}
	for i := range e.paths {
		if e.paths[i].path == path {
			if set == 0 {
				e.paths = append(e.paths[:i], e.paths[i+1:]...)
				return -1
			}
			e.paths[i].set = set
			return 0
		}
	}
	if set == 0 {
		return 0
	}
	// Longest first, so that a lookup takes the first path that prefixes
	// the request's: that is the longest.
	i := 0
	for i < len(e.paths) && len(e.paths[i].path) >= len(path) {
		i++
	}
	e.paths = append(e.paths, v1pathEntry{})
	copy(e.paths[i+1:], e.paths[i:])
	e.paths[i] = v1pathEntry{path: path, set: set}
	return 1
}

// v1decodeRecord fills e from rec, reusing e.paths; the strings point into
// rec.
func v1decodeRecord(rec string, e *v1nameEntry) {
	r := v1recordReader{s: rec}
	e.name = r.str()
	e.bare = r.uvarint()
	e.paths = e.paths[:0]
	for np := r.uvarint(); np > 0; np-- {
		p := r.str()
		e.paths = append(e.paths, v1pathEntry{path: p, set: r.uvarint()})
	}
}

func v1appendUvarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func v1appendRecord(dst []byte, e *v1nameEntry) []byte {
	dst = v1appendUvarint(dst, uint64(len(e.name)))
	dst = append(dst, e.name...)
	dst = v1appendUvarint(dst, uint64(e.bare))
	dst = v1appendUvarint(dst, uint64(len(e.paths)))
	for _, p := range e.paths {
		dst = v1appendUvarint(dst, uint64(len(p.path)))
		dst = append(dst, p.path...)
		dst = v1appendUvarint(dst, uint64(p.set))
	}
	return dst
}

// v1shardWriter assembles one shard from names given in v1fingerprint order;
// its buffers are reused from shard to shard.
type v1shardWriter struct {
	slots []byte // the names' slots, dense; record offsets relative to recs
	recs  []byte
	buf   []byte
}

func (w *v1shardWriter) names() int { return len(w.slots) / v1slotSize }

// add adds e, whose v1fingerprint is fp.
func (w *v1shardWriter) add(fp uint32, e *v1nameEntry) {
	var s [v1slotSize]byte
	v1putLE32(s[:], fp)
	s[4] = byte(min(len(e.name), 255))
	if e.inline() {
		s[5] = v1slotInline
		s[6], s[7] = byte(e.bare), byte(e.bare>>8)
		copy(s[8:], e.name)
	} else {
		s[5] = v1slotRecord
		v1putLE32(s[8:], uint32(len(w.recs)))
		w.recs = v1appendRecord(w.recs, e)
	}
	w.slots = append(w.slots, s[:]...)
}

// addSlot adds the full slot at o of another shard, as it is.
func (w *v1shardWriter) addSlot(blob string, o int) {
	start := len(w.slots)
	w.slots = append(w.slots, blob[o:o+v1slotSize]...)
	if blob[o+5] == v1slotRecord {
		rec := blob[v1le32(blob, o+8):]
		v1putLE32(w.slots[start+8:], uint32(len(w.recs)))
		w.recs = append(w.recs, rec[:v1recordLen(rec)]...)
	}
}

// finish returns the shard and its number of homes, and resets w.
func (w *v1shardWriter) finish() (string, uint32) {
	n := w.names()
	if n == 0 {
		return "", 0
	}
	h := v1homesFor(n)
	// Place each name at its home or after the one before. Every home is
	// a slot, and one empty slot follows the last name, so that every
	// search ends inside the table.
	last := -1
	for i := range n {
		last = max(v1homeOf(v1le32s(w.slots, i*v1slotSize), h), last+1)
	}
	t := max(last+2, int(h))
	size := t*v1slotSize + len(w.recs) + 4
	buf := slices.Grow(w.buf[:0], size)[:t*v1slotSize]
	clear(buf)
	p := -1
	for i := range n {
		s := w.slots[i*v1slotSize : (i+1)*v1slotSize]
		p = max(v1homeOf(v1le32s(s, 0), h), p+1)
		copy(buf[p*v1slotSize:], s)
		if s[5] == v1slotRecord {
			v1putLE32(buf[p*v1slotSize+8:], v1le32s(s, 8)+uint32(t*v1slotSize))
		}
	}
	buf = append(buf, w.recs...)
	buf = append(buf, 0, 0, 0, 0)
	v1putLE32(buf[len(buf)-4:], uint32(t))
	// strings.Builder hands its buffer over as the string: the shard is
	// allocated once, at its exact size.
	var sb strings.Builder
	sb.Grow(size)
	sb.Write(buf)
	w.buf = buf
	w.slots, w.recs = w.slots[:0], w.recs[:0]
	return sb.String(), h
}

func v1le32s(b []byte, i int) uint32 {
	_ = b[i+3]
	return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
}
