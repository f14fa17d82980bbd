package sessionindex

import "slices"

// slots is the persistent array of entries, addressed by slot number: the
// routing table and the string indexes store slot numbers (4 bytes) rather
// than pointers. It is a two-level radix array: a small top slice of
// directories, each of 256 chunks of 64 entries (8 KiB, one size class,
// with no pointers: the garbage collector does not scan it). What an entry
// keeps out of line (its strings' record, its extra record) is in the
// chunk's side, beside the chunk in its directory, and follows the chunk's
// copy-on-write. Changing an entry copies its chunk, its directory (6 KiB)
// and the top slice (62 pointers at 1M), each at most once per edit (what
// the running edit created it changes in place), and the chunk's side when
// the entry has or had something there, so an update copies about 15 KiB
// whatever the size.
//
// A slot freed by a delete goes on a free list threaded through the free
// entries themselves and is reused by the next insert.
type slots struct {
	dirs  []*slotDir
	owner *edit // owner of the dirs slice
	n     uint32
}

const (
	chunkBits = 6
	chunkLen  = 1 << chunkBits
	dirBits   = 8
	dirLen    = 1 << dirBits
)

type slotChunk [chunkLen]entry

// slotDir's chunk pointers come first and alone: a lookup reads one of
// them before the entry it points to, and 2 KiB a directory (124 KiB at
// 1M) stay in the cache better than twice that would.
type slotDir struct {
	chunks [dirLen]*slotChunk
	sides  [dirLen]*chunkSide // each chunk's side; nil when no entry of it has anything out of line
	owner  *edit
	owners [dirLen]*edit // owner of each chunk (and of its place in sides)
}

// chunkRef is a chunk being changed and the place of its side in its
// directory, both owned by the edit changing them.
type chunkRef struct {
	c *slotChunk
	x **chunkSide
}

// chunkSide holds what the entries of one chunk keep out of line: their
// strings' records, in one pointer-free byte array, and their extra
// records. A side is written only by the edit that owns it (owner), and
// only past the end of rest and ext: the bytes of a record never change
// once written, so the strings viewed in them stay immutable. The records
// of a replaced or deleted entry are garbage: the owner counts them, and
// makes a new side holding only the records still in use (compact) when
// they pass half of the side, or when it runs out of room; an edit that
// does not own the side compacts it before its first write. A published
// side is thus at most half garbage.
type chunkSide struct {
	owner   *edit
	rest    []byte   // records: entry.rest, entry.rlen
	ext     []*extra // entry.ext - 1
	dead    int      // bytes of rest no entry uses
	deadExt int      // extra records no entry uses
}

// edit marks the nodes created by one Apply or by a Builder between two
// snapshots: nodes it owns are invisible to readers and may be changed in
// place. It must not be a zero-size type: distinct zero-size allocations may
// share an address.
type edit struct{ _ byte }

// get returns the entry at slot and the place of its chunk's side, which
// an Entry reads only when it needs the side.
func (s *slots) get(slot uint32) (*entry, **chunkSide) {
	d, ci := s.dirs[slot>>(chunkBits+dirBits)], slot>>chunkBits&(dirLen-1)
	c := d.chunks[ci]
	if c == nil {
		// Never for a slot in use. The explicit test spares &c[…] the
		// compiler's nil check, a load from the chunk that would cost a
		// cache miss on a lookup that does not read the entry.
		return nil, nil
	}
	return &c[slot&(chunkLen-1)], &d.sides[ci]
}

// mut returns the entry at slot for writing, copying what ed does not own,
// and its chunk's reference (in a directory ed owns). slot may be s.n,
// which appends.
func (s *slots) mut(ed *edit, slot uint32) (*entry, chunkRef) {
	if s.owner != ed {
		s.dirs = slices.Clone(s.dirs)
		s.owner = ed
	}
	di := int(slot >> (chunkBits + dirBits))
	if di == len(s.dirs) {
		s.dirs = append(s.dirs, &slotDir{owner: ed})
	}
	d := s.dirs[di]
	if d.owner != ed {
		c := *d
		c.owner = ed
		d = &c
		s.dirs[di] = d
	}
	ci := slot >> chunkBits & (dirLen - 1)
	c := d.chunks[ci]
	if d.owners[ci] != ed {
		nc := new(slotChunk)
		if c != nil {
			*nc = *c
		}
		c = nc
		d.chunks[ci], d.owners[ci] = c, ed
	}
	if slot == s.n {
		s.n++
	}
	return &c[slot&(chunkLen-1)], chunkRef{c, &d.sides[ci]}
}

// sideFor makes r's side writable by ed with room for a record of n bytes
// and, if ext, one more extra record, compacting it if ed does not own it,
// if it has no room, or if it is over half garbage. The caller has just
// overwritten an entry of r's chunk (and counted its records as garbage,
// if ed owns the side), so a new side leaves out that entry's old records.
func (r chunkRef) sideFor(ed *edit, n int, ext bool) *chunkSide {
	x := *r.x
	if x != nil && x.owner == ed && len(x.rest)+n <= cap(x.rest) && (!ext || len(x.ext) < cap(x.ext)) &&
		2*x.dead <= len(x.rest) && 2*x.deadExt <= len(x.ext) {
		return x
	}
	r.compact(ed, n, ext)
	return *r.x
}

// compact gives r a new side owned by ed, holding the records the chunk's
// entries use, with room for n more bytes of records and, if ext, one more
// extra record; or none at all when nothing is left and nothing is to
// come. The chunk is ed's: its entries' offsets are rewritten.
func (r chunkRef) compact(ed *edit, n int, ext bool) {
	var live, liveExt, used int
	for i := range r.c {
		e := &r.c[i]
		if e.used() {
			used++
			live += int(e.rlen)
			if e.ext != 0 {
				liveExt++
			}
		}
	}
	if live+n == 0 && liveExt == 0 && !ext {
		*r.x = nil
		return
	}
	// Room for the chunk's free slots at the average record size so far,
	// so that a Builder filling a chunk makes its side about once, and an
	// eighth more for later changes by the same edit.
	want := live + n
	if used > 0 && used < chunkLen {
		want += want / used * (chunkLen - used)
	}
	want += want / 8
	old, x := *r.x, &chunkSide{owner: ed, rest: make([]byte, 0, want)}
	if liveExt > 0 || ext {
		// The same for extra records, counted by entry.
		x.ext = make([]*extra, 0, min(liveExt+1+(liveExt+1)*(chunkLen-used)/max(used, 1), chunkLen)+2) // ≤ maxSideExt
	}
	for i := range r.c {
		e := &r.c[i]
		if !e.used() {
			continue
		}
		if e.rlen != 0 {
			off := len(x.rest)
			x.rest = append(x.rest, old.rest[e.rest:e.rest+uint32(e.rlen)]...)
			e.rest = uint32(off)
		}
		if e.ext != 0 {
			x.ext = append(x.ext, old.ext[e.ext-1])
			e.ext = uint8(len(x.ext))
		}
	}
	*r.x = x
}

// each calls fn with every used slot until fn returns false.
func (s *slots) each(fn func(uint32, *entry, **chunkSide) bool) {
	for di, d := range s.dirs {
		for ci, c := range &d.chunks {
			if c == nil {
				continue
			}
			base := uint32(di)<<(chunkBits+dirBits) | uint32(ci)<<chunkBits
			for i := range c {
				if base+uint32(i) >= s.n {
					return
				}
				if e := &c[i]; e.used() {
					if !fn(base+uint32(i), e, &d.sides[ci]) {
						return
					}
				}
			}
		}
	}
}

func (e *entry) used() bool { return e.org != 0 }
