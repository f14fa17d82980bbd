package feeds

import (
	"slices"
	"strings"
	"unsafe"
)

// A shard is one immutable string (a "blob"), so that a lookup reaches
// everything of a shard through one pointer, returns Path as a substring
// without allocating, and the garbage collector never scans it (a string
// holds no pointers). It is a hash table of slots, each one 64-byte cache
// line holding two entries (two-choice cuckoo hashing with buckets of
// two), then the records of the names that do not fit in an entry, then
// the number of slots:
//
//	[0:64B)           B slots
//	[64B:64(B+S))     S stash slots, normally none (see finish)
//	[64(B+S):len-16)  records
//	[len-16:len)      B, S, the number of names, the bytes of records no
//	                  entry refers to any more (editBlob); uint32s,
//	                  little-endian
//
// An entry (32 bytes, at the start or the middle of its slot; the first
// of a slot is filled first) is empty (all zero) or holds one name:
//
//	[0:4)    fp, the name's fingerprint (shardFP, overlayFP), | 1 so
//	         that no name's is 0, an empty entry's
//	[4]      min(len(name), 255)
//	[5]      slotInline: the name and its one entry are in the entry;
//	         slotPacked: the same, the name packed (index_pack.go);
//	         slotRecord: they are in the record at [8:12)
//	[6:8)    inline, packed: the code set id + 1 of the name's own entry
//	[8:32)   inline: the name, zero-padded; packed: the name packed, 6
//	         bits a character; record: [8:12) its offset
//
// and a record is
//
//	uvarint len(name), name
//	uvarint bare       code set id + 1 of the name's own entry, 0 for none
//	uvarint np         number of path entries, then np times, longest first:
//	uvarint len(path), path, uvarint set id + 1
//
// A record with no entry at all (bare 0, np 0) is a tombstone: only the
// overlay has them, for a name it removes from the base (index_apply.go).
//
// A name is in one of two slots, both functions of its fingerprint:
// homeOf(fp, B), fp·B/2^32, and altOf, another slot. A lookup reads the
// four fingerprints of the two slots, two cache lines at independent
// places, which the processor fetches together, and the answer is in
// them: a name whose fingerprint is not among the four is not in the
// shard; the second line is read only when the first slot does not hold
// the name (probeSlots). A search never goes on to a third line, which
// is what the linear probing this index had before did for half its
// probes (their names displaced past the home line): on this machine a
// line adjacent to one being fetched costs ~40 ns more, a dependent one
// ~190 ns, an independent one ~10 ns (docs/feed-index.md). The slots
// are filled to about 4/5. Names of up to 24 bytes with no path entry,
// and those of up to 32 DNS characters packed (index_pack.go), 91 % of
// the synthetic feed's, are answered from the slot's line; the rest need
// their record too, a second wait for memory that depends on the first.
// Names are stored whole, so a fingerprint collision costs one more
// comparison, never a false match.
//
// The test of the format calls a slot a slot: slotSize is a slot's size,
// homes a shard's B, and findSlot returns an entry's offset.

const (
	slotSize   = 64
	entrySize  = 32
	inlineMax  = entrySize - 8
	slotInline = 0
	slotRecord = 1
	slotPacked = 2
	// stashFlag marks the homes of a blob that has a stash.
	stashFlag = 1 << 31
)

// shardFP is the fingerprint of hash h in a base shard of an index of
// 2^bits shards: the 32 bits after the shard's, so that the order of the
// hashes is the order of (shard, fingerprint) and a shard's names are a
// run of the hash order, which the Builder writes without merging.
func shardFP(h uint64, bits uint) uint32 { return uint32(h<<bits>>32) | 1 }

// overlayFP is the fingerprint of hash h in the overlay, which holds the
// names of every shard in one table: its top 32 bits, so that an overlay
// entry's shard is known without hashing its name again (fpShard).
func overlayFP(h uint64) uint32 { return uint32(h>>32) | 1 }

// fpShard is the shard of an overlay fingerprint in an index of 2^bits
// shards (bits < 32).
func fpShard(ofp uint32, bits uint) int { return int(uint64(ofp) >> (32 - bits)) }

// homeOf is fp's first slot among h & ^stashFlag: fingerprints are
// uniform, so names spread evenly over the slots.
func homeOf(fp uint32, h uint32) int { return int(uint64(fp) * uint64(h&^stashFlag) >> 32) }

// altOf is fp's second slot among h & ^stashFlag, first being its first:
// another, by a second cut of the fingerprint, when there are two or more.
func altOf(fp uint32, first int, h uint32) int {
	n := int(h &^ stashFlag)
	if n < 2 {
		return first
	}
	a := first + 1 + int(uint64(fp*0x9e3779b1)*uint64(n-1)>>32)
	if a >= n {
		a -= n
	}
	return a
}

// slotsFor is B for n names: a load of about 4/5, and 0 for none.
// Two-choice cuckoo hashing with two entries a slot places names up to a
// load of 0.89; 4/5 keeps the placement quick.
func slotsFor(n int) int {
	if n == 0 {
		return 0
	}
	return (n*5 + 7) / 8
}

// shardSlots is the number of slots of blob, stash slots included.
func shardSlots(blob string) int {
	if blob == "" {
		return 0
	}
	b, stash := blobSlots(blob)
	return int(b + stash)
}

// trailerSize is the size of a blob's trailer.
const trailerSize = 16

// probeSlots returns the offset of name's entry among the slots at o1
// (its first) and o2 (its second) of blob, whose fingerprint is fp; the
// stash, if any, is not searched. It reads the second slot's line only
// when the first does not hold the name: a load is only done when its
// line has arrived, so reading both lines' fingerprints up front, as
// before, made every hit wait for the later of two lines from memory
// (prefetched together, but each with its own latency), while most names
// are in their first slot (cuckooInsert tries it first).
func probeSlots(blob string, o1, o2 int, fp uint32, name string) (int, bool) {
	if le32(blob, o1) == fp && slotHolds(blob, o1, name) {
		return o1, true
	}
	if o := o1 + entrySize; le32(blob, o) == fp && slotHolds(blob, o, name) {
		return o, true
	}
	if le32(blob, o2) == fp && slotHolds(blob, o2, name) {
		return o2, true
	}
	if o := o2 + entrySize; le32(blob, o) == fp && slotHolds(blob, o, name) {
		return o, true
	}
	return 0, false
}

// findSlot returns the offset of name's entry in blob, whose fingerprint
// is fp; o is the offset of fp's first slot, homeOf(fp, homes)·slotSize.
func findSlot(blob string, o int, fp uint32, name string) (int, bool) {
	b, stash := blobSlots(blob)
	if o, ok := probeSlots(blob, o, altOf(fp, o/slotSize, b)*slotSize, fp, name); ok {
		return o, true
	}
	return findStash(blob, b, stash, fp, name)
}

// findStash looks for name in the stash slots of blob, which has b slots
// and stash stash slots.
func findStash(blob string, b, stash uint32, fp uint32, name string) (int, bool) {
	for o, end := int(b)*slotSize, int(b+stash)*slotSize; o < end; o += entrySize {
		if le32(blob, o) == fp && slotHolds(blob, o, name) {
			return o, true
		}
	}
	return 0, false
}

// blobNames is the number of names in blob.
func blobNames(blob string) int {
	if blob == "" {
		return 0
	}
	return int(le32(blob, len(blob)-8))
}

// blobSlots is blob's B, and its S.
func blobSlots(blob string) (uint32, uint32) {
	return le32(blob, len(blob)-16), le32(blob, len(blob)-12)
}

// slotHolds reports whether the full entry at o holds name.
func slotHolds(blob string, o int, name string) bool {
	if l := int(blob[o+4]); l != len(name) && (l < 255 || len(name) < 255) {
		return false
	}
	switch blob[o+5] {
	case slotInline:
		return blob[o+8:o+8+len(name)] == name
	case slotPacked:
		return packedEqual(blob[o+8:o+entrySize], int(blob[o+4]), name)
	}
	r := recordReader{s: blob, i: int(le32(blob, o+8))}
	return r.str() == name
}

// decodeSlot fills e from the full entry at o; the strings point into
// blob, but for a packed name, which is unpacked into a string of its own.
func decodeSlot(blob string, o int, e *nameEntry) {
	if k := blob[o+5]; k != slotRecord {
		if k == slotPacked {
			e.name = unpackName(blob[o+8:o+entrySize], int(blob[o+4]))
		} else {
			e.name = blob[o+8 : o+8+int(blob[o+4])]
		}
		e.bare = uint32(le16(blob, o+6))
		e.paths = e.paths[:0]
		return
	}
	decodeRecord(blob[le32(blob, o+8):], e)
}

func le16(s string, i int) uint16 {
	_ = s[i+1]
	return uint16(s[i]) | uint16(s[i+1])<<8
}

func le32(s string, i int) uint32 {
	_ = s[i+3]
	return uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
}

func putLE32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// recordReader reads a record's fields in order.
type recordReader struct {
	s string
	i int
}

func (r *recordReader) uvarint() uint32 {
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

func (r *recordReader) str() string {
	l := int(r.uvarint())
	s := r.s[r.i : r.i+l]
	r.i += l
	return s
}

// recordLen is the length of the record at the start of rec.
func recordLen(rec string) int {
	r := recordReader{s: rec}
	r.str()
	r.uvarint()
	for np := r.uvarint(); np > 0; np-- {
		r.str()
		r.uvarint()
	}
	return r.i
}

// nameEntry is one name's entries while they are built or changed.
type nameEntry struct {
	name  string
	bare  uint32      // code set id + 1 of the name's own entry, 0 for none
	paths []pathEntry // longest first
}

type pathEntry struct {
	path string
	set  uint32 // code set id + 1
}

func (e *nameEntry) empty() bool { return e.bare == 0 && len(e.paths) == 0 }

// inline reports whether e fits in an entry, its name as it is or packed.
func (e *nameEntry) inline() bool {
	return len(e.paths) == 0 && e.bare != 0 && e.bare <= 0xffff && (len(e.name) <= inlineMax || packable(e.name))
}

// putInline writes the kind and the name of e, inline, into the entry s.
func putInline(s []byte, e *nameEntry) {
	if len(e.name) <= inlineMax {
		s[5] = slotInline
		copy(s[8:entrySize], e.name)
	} else {
		s[5] = slotPacked
		packName(s[8:entrySize], e.name)
	}
	s[6], s[7] = byte(e.bare), byte(e.bare>>8)
}

// apply sets the codes of the key name+path to set (a code set id + 1),
// or removes the key when set is 0, and returns the change in the number
// of keys.
func (e *nameEntry) apply(path string, set uint32) int {
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
	e.paths = append(e.paths, pathEntry{})
	copy(e.paths[i+1:], e.paths[i:])
	e.paths[i] = pathEntry{path: path, set: set}
	return 1
}

// decodeRecord fills e from rec, reusing e.paths; the strings point into
// rec.
func decodeRecord(rec string, e *nameEntry) {
	r := recordReader{s: rec}
	e.name = r.str()
	e.bare = r.uvarint()
	e.paths = e.paths[:0]
	for np := r.uvarint(); np > 0; np-- {
		p := r.str()
		e.paths = append(e.paths, pathEntry{path: p, set: r.uvarint()})
	}
}

func appendUvarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func appendRecord(dst []byte, e *nameEntry) []byte {
	dst = appendUvarint(dst, uint64(len(e.name)))
	dst = append(dst, e.name...)
	dst = appendUvarint(dst, uint64(e.bare))
	dst = appendUvarint(dst, uint64(len(e.paths)))
	for _, p := range e.paths {
		dst = appendUvarint(dst, uint64(len(p.path)))
		dst = append(dst, p.path...)
		dst = appendUvarint(dst, uint64(p.set))
	}
	return dst
}

// shardWriter assembles one shard from names given in any order; its
// buffers are reused from shard to shard.
type shardWriter struct {
	entries []byte // the names' entries, dense; record offsets relative to recs
	recs    []byte
	order   []int32 // scratch of finish
	keys    []uint64
	recAt   []uint32 // by entry
}

func (w *shardWriter) names() int { return len(w.entries) / entrySize }

// add adds e, whose fingerprint is fp.
func (w *shardWriter) add(fp uint32, e *nameEntry) {
	var s [entrySize]byte
	putLE32(s[:], fp)
	s[4] = byte(min(len(e.name), 255))
	if e.inline() {
		putInline(s[:], e)
	} else {
		s[5] = slotRecord
		putLE32(s[8:], uint32(len(w.recs)))
		w.recs = appendRecord(w.recs, e)
	}
	w.entries = append(w.entries, s[:]...)
}

// addEntry adds the full entry at o of another shard, as it is.
func (w *shardWriter) addEntry(blob string, o int) {
	start := len(w.entries)
	w.entries = append(w.entries, blob[o:o+entrySize]...)
	if blob[o+5] == slotRecord {
		rec := blob[le32(blob, o+8):]
		putLE32(w.entries[start+8:], uint32(len(w.recs)))
		w.recs = append(w.recs, rec[:recordLen(rec)]...)
	}
}

// finish returns the shard and its homes (its B, | stashFlag if it has a
// stash), and resets w.
//
// The names are placed in the order of their fingerprints (then of the
// names), and the records laid out in that order, so that the shard is a
// function of its names alone, whatever the order they were added in.
// Each goes to a free entry of its first slot or its second; when both are
// full it takes one of the four entries' place, and the name it displaces
// goes to its own other slot, and so on (cuckoo hashing's random walk).
// At a load of 4/5 that ends within a few steps; a name still without a
// place after maxKicks steps has the table grow by 1/16 and start over,
// and past three such tries (five names of one fingerprint, which two
// slots cannot hold, are the one case a 32-bit fingerprint makes
// possible), it goes to the stash, which lookups of a blob whose homes
// carry stashFlag search too.
func (w *shardWriter) finish() (string, uint32) {
	n := w.names()
	if n == 0 {
		return "", 0
	}
	w.sortEntries()
	// Where each record goes in the record area, in the order of the names.
	recs := unsafe.String(unsafe.SliceData(w.recs), len(w.recs))
	w.recAt = slices.Grow(w.recAt[:0], n)[:n]
	recBytes := 0
	for _, x := range w.order {
		if e := w.entries[int(x)*entrySize:]; e[5] == slotRecord {
			w.recAt[x] = uint32(recBytes)
			recBytes += recordLen(recs[le32s(e, 8):])
		}
	}
	b := slotsFor(n)
	var buf []byte
	for try := 0; ; try++ {
		if buf = w.place(b, recBytes, try == 3); buf != nil {
			break
		}
		b += b/16 + 1
	}
	rec := len(buf) - trailerSize - recBytes
	for _, x := range w.order {
		if e := w.entries[int(x)*entrySize:]; e[5] == slotRecord {
			r := recs[le32s(e, 8):]
			copy(buf[rec+int(w.recAt[x]):], r[:recordLen(r)])
		}
	}
	stash := (rec - b*slotSize) / slotSize
	putLE32(buf[len(buf)-16:], uint32(b))
	putLE32(buf[len(buf)-12:], uint32(stash))
	putLE32(buf[len(buf)-8:], uint32(n))
	w.entries, w.recs = w.entries[:0], w.recs[:0]
	homes := uint32(b)
	if stash > 0 {
		homes |= stashFlag
	}
	return unsafe.String(&buf[0], len(buf)), homes
}

// sortEntries sets w.order to the entries in the order of their
// fingerprints, then of their names. It sorts fingerprint and index
// packed in one word, which needs no look at the entries but for the
// rare runs of one fingerprint.
func (w *shardWriter) sortEntries() {
	n := w.names()
	keys := slices.Grow(w.keys[:0], n)[:n]
	for i := range n {
		keys[i] = uint64(w.fp(int32(i)))<<32 | uint64(i)
	}
	slices.Sort(keys)
	w.order = slices.Grow(w.order[:0], n)[:n]
	for i, k := range keys {
		w.order[i] = int32(uint32(k))
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && keys[j]>>32 == keys[i]>>32 {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(w.order[i:j], func(x, y int32) int { return strings.Compare(w.name(x), w.name(y)) })
		}
		i = j
	}
	w.keys = keys
}

// maxKicks bounds a placement's random walk.
const maxKicks = 500

// place writes the entries, in w.order, into a new blob of b slots and
// recBytes of records (whose offsets it sets, w.recAt being where each
// record goes in the record area), and returns it, without the records
// and the trailer. It places each entry as an edit does (cuckooInsert),
// straight into the blob, so that the entries are read in their order
// and written where they land. An entry left without a place makes it
// return nil, unless stash, when it goes to the stash, after the slots.
func (w *shardWriter) place(b, recBytes int, stash bool) []byte {
	recStart := b * slotSize
	buf := allocBlob(recStart + recBytes + trailerSize)
	var homeless [][entrySize]byte
	for _, x := range w.order {
		e := *(*[entrySize]byte)(w.entries[int(x)*entrySize:])
		if e[5] == slotRecord {
			putLE32(e[8:], uint32(recStart)+w.recAt[x])
		}
		if !cuckooInsert(buf, uint32(b), &e) {
			if !stash {
				return nil
			}
			homeless = append(homeless, e)
		}
	}
	if len(homeless) == 0 {
		return buf
	}
	// The stash slots go between the slots and the records, which move up
	// by as much, and so does every record offset.
	slots := (len(homeless) + 1) / 2
	shift := slots * slotSize
	out := allocBlob(len(buf) + shift)
	copy(out, buf[:recStart])
	for i, e := range homeless {
		*(*[entrySize]byte)(out[recStart+i*entrySize:]) = e
	}
	for o := 0; o < recStart+len(homeless)*entrySize; o += entrySize {
		if le32s(out, o) != 0 && out[o+5] == slotRecord {
			putLE32(out[o+8:], le32s(out, o+8)+uint32(shift))
		}
	}
	return out
}

// fp is the fingerprint of entry x.
func (w *shardWriter) fp(x int32) uint32 { return le32s(w.entries, int(x)*entrySize) }

// name is the name of entry x, for ordering entries of one fingerprint.
func (w *shardWriter) name(x int32) string {
	e := w.entries[int(x)*entrySize:][:entrySize]
	switch e[5] {
	case slotInline:
		return string(e[8 : 8+int(e[4])])
	case slotPacked:
		return unpackName(string(e[8:]), int(e[4]))
	}
	r := recordReader{s: unsafe.String(unsafe.SliceData(w.recs), len(w.recs)), i: int(le32s(e, 8))}
	return r.str()
}

func le32s(b []byte, i int) uint32 {
	_ = b[i+3]
	return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
}

// added is a name editBlob adds: its fingerprint and entries.
type added struct {
	fp uint32
	e  *nameEntry
}

// The loads between which editBlob edits a blob in place, in per cent of
// its entries: past maxEditLoad an added name may find no place, or only
// after a long walk (two-choice cuckoo hashing with buckets of two fills
// to 89 %); under minEditLoad the blob has emptied out and is worth
// writing again at its size.
const (
	maxEditLoad = 86
	minEditLoad = 40
)

// editBlob returns a copy of old with the entries at the offsets remove
// emptied and the names of add placed among the others, and its homes.
// Every other entry stays where it is, and the records stay as they are,
// those of removed entries included, with the new ones after them: the
// cost is a copy of the blob and the changed names, not a placement of
// all of its names (finish), which is what makes Apply's cost follow the
// delta. ok is false when old is better written whole: when it has a
// stash, when the names would fill it past maxEditLoad or leave it under
// minEditLoad, when the records no entry refers to would be more than
// half its records, or when an added name finds no place; old is never
// written.
func editBlob(old string, remove []int, add []added) (blob string, homes uint32, ok bool) {
	if old == "" {
		return "", 0, false
	}
	b, stash := blobSlots(old)
	slots := int(b)
	names := int(le32(old, len(old)-8)) - len(remove) + len(add)
	if stash > 0 || names*100 > 2*slots*maxEditLoad || names*100 < 2*slots*minEditLoad && slots > 64 {
		return "", 0, false
	}
	dead := int(le32(old, len(old)-4))
	for _, o := range remove {
		if old[o+5] == slotRecord {
			dead += recordLen(old[le32(old, o+8):])
		}
	}
	recStart := slots * slotSize
	oldRecs := len(old) - trailerSize - recStart
	var recs []byte
	for _, a := range add {
		if !a.e.inline() {
			recs = appendRecord(recs, a.e)
		}
	}
	if 2*dead > oldRecs+len(recs) && dead > 4096 {
		return "", 0, false
	}
	size := recStart + oldRecs + len(recs) + trailerSize
	buf := allocBlob(size)
	copy(buf, old[:len(old)-trailerSize])
	for _, o := range remove {
		clear(buf[o : o+entrySize])
	}
	// Keep the first entry of a slot the filled one.
	for _, o := range remove {
		s := o &^ (slotSize - 1)
		if le32s(buf, s) == 0 && le32s(buf, s+entrySize) != 0 {
			copy(buf[s:s+entrySize], buf[s+entrySize:s+slotSize])
			clear(buf[s+entrySize : s+slotSize])
		}
	}
	rec := recStart + oldRecs
	copy(buf[rec:], recs)
	if !insertAdded(buf, b, add, rec, recs) {
		return "", 0, false
	}
	putLE32(buf[size-16:], b)
	putLE32(buf[size-12:], 0)
	putLE32(buf[size-8:], uint32(names))
	putLE32(buf[size-4:], uint32(dead))
	return unsafe.String(&buf[0], size), b, true
}

// insertAdded places the names of add in buf, a blob of b slots being
// written whose records for them, recs, start at rec.
func insertAdded(buf []byte, b uint32, add []added, rec int, recs []byte) bool {
	for _, a := range add {
		var e [entrySize]byte
		putLE32(e[:], a.fp)
		e[4] = byte(min(len(a.e.name), 255))
		if a.e.inline() {
			putInline(e[:], a.e)
		} else {
			e[5] = slotRecord
			putLE32(e[8:], uint32(rec))
			rec += len(appendRecord(recs[:0], a.e))
		}
		if !cuckooInsert(buf, b, &e) {
			return false
		}
	}
	return true
}

// rebuildBlob is editBlob for a blob that edits do not fit: a new blob of
// b slots, into which the entries of old but those at the offsets remove
// (sorted) and the names of add are placed, with the records of those
// only. It allocates the new blob and nothing else, unlike a shardWriter,
// whose scratch for a large overlay would be as large again. ok is false
// if a name finds no place (then a larger b, or a shardWriter, which has
// a stash, will do).
func rebuildBlob(old string, remove []int, add []added, b int) (blob string, homes uint32, ok bool) {
	end := shardSlots(old) * slotSize
	names, recBytes := len(add), 0
	r := remove
	for o := 0; o < end; o += entrySize {
		if len(r) > 0 && r[0] == o {
			r = r[1:]
			continue
		}
		if le32(old, o) != 0 {
			names++
			if old[o+5] == slotRecord {
				recBytes += recordLen(old[le32(old, o+8):])
			}
		}
	}
	var recs []byte
	for _, a := range add {
		if !a.e.inline() {
			recs = appendRecord(recs, a.e)
		}
	}
	size := b*slotSize + recBytes + len(recs) + trailerSize
	buf := allocBlob(size)
	rec := b * slotSize
	for o := 0; o < end; o += entrySize {
		if len(remove) > 0 && remove[0] == o {
			remove = remove[1:]
			continue
		}
		if le32(old, o) == 0 {
			continue
		}
		var e [entrySize]byte
		copy(e[:], old[o:o+entrySize])
		if e[5] == slotRecord {
			r := old[le32(old, o+8):]
			putLE32(e[8:], uint32(rec))
			rec += copy(buf[rec:], r[:recordLen(r)])
		}
		if !cuckooInsert(buf, uint32(b), &e) {
			return "", 0, false
		}
	}
	copy(buf[rec:], recs)
	if !insertAdded(buf, uint32(b), add, rec, recs) {
		return "", 0, false
	}
	putLE32(buf[size-16:], uint32(b))
	putLE32(buf[size-8:], uint32(names))
	return unsafe.String(&buf[0], size), uint32(b), true
}

// cuckooInsert places the entry e in buf, a blob of b slots being edited:
// in a free entry of one of its slots, or in the place of one whose name
// then goes to its other slot, and so on (as finish places names). It
// reports false if the walk found no free entry within maxKicks steps.
func cuckooInsert(buf []byte, b uint32, e *[entrySize]byte) bool {
	free := func(s int) int {
		switch o := s * slotSize; {
		case le32s(buf, o) == 0:
			return o
		case le32s(buf, o+entrySize) == 0:
			return o + entrySize
		}
		return -1
	}
	fp := le32s(e[:], 0)
	at := homeOf(fp, b)
	if o := free(at); o >= 0 {
		copy(buf[o:], e[:])
		return true
	}
	alt := altOf(fp, at, b)
	if o := free(alt); o >= 0 {
		copy(buf[o:], e[:])
		return true
	}
	rnd := fp | 1
	for range maxKicks {
		rnd ^= rnd << 13
		rnd ^= rnd >> 17
		rnd ^= rnd << 5
		if rnd&2 != 0 {
			at = alt
		}
		o := at*slotSize + int(rnd&1)*entrySize
		var out [entrySize]byte
		copy(out[:], buf[o:o+entrySize])
		copy(buf[o:], e[:])
		*e = out
		// The displaced name goes to its other slot.
		f := le32s(e[:], 0)
		first := homeOf(f, b)
		other := first
		if at == first {
			other = altOf(f, first, b)
		}
		if o := free(other); o >= 0 {
			copy(buf[o:], e[:])
			return true
		}
		at, alt = other, other
	}
	return false
}
