package feeds

import (
	"slices"
	"strings"
)

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
//	[0:4)    fp, the name's fingerprint: the low 32 bits of its hash, | 1
//	         so that no name's is 0, the empty slot's
//	[4]      min(len(name), 255)
//	[5]      slotInline: the name and its one entry are in the slot;
//	         slotRecord: they are in the record at [8:12)
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
// (Index.homes holds it beside the shard table). The names are in
// fingerprint order, each in its home slot or, when that is taken, the
// next free one (linear probing in Robin Hood order), and one empty slot
// ends the table, so a search starts at the home slot and stops at the
// name, at an empty slot, or at a greater fingerprint: 1.5 slots on
// average, mostly within the home slot's cache line. Names of up to 24
// bytes with no path entry, four in five of a real feed's, are answered
// from that one line; the rest need their record too. Names are stored
// whole, so a fingerprint collision costs one more comparison, never a
// false match.

const (
	slotSize   = 32
	inlineMax  = slotSize - 8
	slotInline = 0
	slotRecord = 1
)

// fingerprint is the part of a name's hash a slot holds.
func fingerprint(h uint64) uint32 { return uint32(h) | 1 }

// homeOf is fp's home slot among h homes: fingerprints are uniform, so
// names spread evenly over the homes.
func homeOf(fp uint32, h uint32) int { return int(uint64(fp) * uint64(h) >> 32) }

// homesFor is H for n names: a load of at most 3/4, and 0 for none.
func homesFor(n int) uint32 {
	if n == 0 {
		return 0
	}
	return uint32(n + n/3 + 1)
}

// shardSlots is the number of slots of blob.
func shardSlots(blob string) int {
	if blob == "" {
		return 0
	}
	return int(le32(blob, len(blob)-4))
}

// findSlot returns the offset of name's slot in blob, searching from the
// slot at offset o (its home).
func findSlot(blob string, o int, fp uint32, name string) (int, bool) {
	for ; ; o += slotSize {
		f := le32(blob, o)
		if f == 0 || f > fp {
			return 0, false
		}
		if f == fp && slotHolds(blob, o, name) {
			return o, true
		}
	}
}

// slotHolds reports whether the full slot at o holds name.
func slotHolds(blob string, o int, name string) bool {
	if l := int(blob[o+4]); l != len(name) && (l < 255 || len(name) < 255) {
		return false
	}
	if blob[o+5] == slotInline {
		return blob[o+8:o+8+len(name)] == name
	}
	r := recordReader{s: blob, i: int(le32(blob, o+8))}
	return r.str() == name
}

// decodeSlot fills e from the full slot at o; the strings point into blob.
func decodeSlot(blob string, o int, e *nameEntry) {
	if blob[o+5] == slotInline {
		e.name = blob[o+8 : o+8+int(blob[o+4])]
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

// inline reports whether e fits in a slot.
func (e *nameEntry) inline() bool {
	return len(e.name) <= inlineMax && len(e.paths) == 0 && e.bare != 0 && e.bare <= 0xffff
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

// shardWriter assembles one shard from names given in fingerprint order;
// its buffers are reused from shard to shard.
type shardWriter struct {
	slots []byte // the names' slots, dense; record offsets relative to recs
	recs  []byte
	buf   []byte
}

func (w *shardWriter) names() int { return len(w.slots) / slotSize }

// add adds e, whose fingerprint is fp.
func (w *shardWriter) add(fp uint32, e *nameEntry) {
	var s [slotSize]byte
	putLE32(s[:], fp)
	s[4] = byte(min(len(e.name), 255))
	if e.inline() {
		s[5] = slotInline
		s[6], s[7] = byte(e.bare), byte(e.bare>>8)
		copy(s[8:], e.name)
	} else {
		s[5] = slotRecord
		putLE32(s[8:], uint32(len(w.recs)))
		w.recs = appendRecord(w.recs, e)
	}
	w.slots = append(w.slots, s[:]...)
}

// addSlot adds the full slot at o of another shard, as it is.
func (w *shardWriter) addSlot(blob string, o int) {
	start := len(w.slots)
	w.slots = append(w.slots, blob[o:o+slotSize]...)
	if blob[o+5] == slotRecord {
		rec := blob[le32(blob, o+8):]
		putLE32(w.slots[start+8:], uint32(len(w.recs)))
		w.recs = append(w.recs, rec[:recordLen(rec)]...)
	}
}

// finish returns the shard and its number of homes, and resets w.
func (w *shardWriter) finish() (string, uint32) {
	n := w.names()
	if n == 0 {
		return "", 0
	}
	h := homesFor(n)
	// Place each name at its home or after the one before. Every home is
	// a slot, and one empty slot follows the last name, so that every
	// search ends inside the table.
	last := -1
	for i := range n {
		last = max(homeOf(le32s(w.slots, i*slotSize), h), last+1)
	}
	t := max(last+2, int(h))
	size := t*slotSize + len(w.recs) + 4
	buf := slices.Grow(w.buf[:0], size)[:t*slotSize]
	clear(buf)
	p := -1
	for i := range n {
		s := w.slots[i*slotSize : (i+1)*slotSize]
		p = max(homeOf(le32s(s, 0), h), p+1)
		copy(buf[p*slotSize:], s)
		if s[5] == slotRecord {
			putLE32(buf[p*slotSize+8:], le32s(s, 8)+uint32(t*slotSize))
		}
	}
	buf = append(buf, w.recs...)
	buf = append(buf, 0, 0, 0, 0)
	putLE32(buf[len(buf)-4:], uint32(t))
	// strings.Builder hands its buffer over as the string: the shard is
	// allocated once, at its exact size.
	var sb strings.Builder
	sb.Grow(size)
	sb.Write(buf)
	w.buf = buf
	w.slots, w.recs = w.slots[:0], w.recs[:0]
	return sb.String(), h
}

func le32s(b []byte, i int) uint32 {
	_ = b[i+3]
	return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
}
