package sessionindex

import (
	"slices"
	"unique"
)

// slots is the persistent array of entries, addressed by slot number: the
// routing table and the string indexes store slot numbers (4 bytes) rather
// than pointers. It is a two-level radix array: a small top slice of
// directories, each of 256 chunks of 64 entries (9.5 KiB, one size class).
// Changing an entry copies its chunk, its directory (4 KiB) and the top
// slice (62 pointers at 1M), each at most once per edit (what the running
// edit created it changes in place), so an update copies about 14 KiB
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

type slotDir struct {
	owner  *edit
	chunks [dirLen]*slotChunk
	owners [dirLen]*edit // owner of each chunk
}

// edit marks the nodes created by one Apply or by a Builder between two
// snapshots: nodes it owns are invisible to readers and may be changed in
// place. It must not be a zero-size type: distinct zero-size allocations may
// share an address.
type edit struct{ _ byte }

func (s *slots) get(slot uint32) *entry {
	c := s.dirs[slot>>(chunkBits+dirBits)].chunks[slot>>chunkBits&(dirLen-1)]
	if c == nil {
		// Never for a slot in use. The explicit test spares &c[…] the
		// compiler's nil check, a load from the chunk that would cost a
		// cache miss on a lookup that does not read the entry.
		return nil
	}
	return &c[slot&(chunkLen-1)]
}

// mut returns the entry at slot for writing, copying what ed does not own.
// slot may be s.n, which appends.
func (s *slots) mut(ed *edit, slot uint32) *entry {
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
	return &c[slot&(chunkLen-1)]
}

// each calls fn with every used slot until fn returns false.
func (s *slots) each(fn func(uint32, *entry) bool) {
	for di, d := range s.dirs {
		for ci, c := range d.chunks {
			if c == nil {
				continue
			}
			base := uint32(di)<<(chunkBits+dirBits) | uint32(ci)<<chunkBits
			for i := range c {
				if base+uint32(i) >= s.n {
					return
				}
				if e := &c[i]; e.used() {
					if !fn(base+uint32(i), e) {
						return
					}
				}
			}
		}
	}
}

func (e *entry) used() bool { return e.org != (unique.Handle[string]{}) }
