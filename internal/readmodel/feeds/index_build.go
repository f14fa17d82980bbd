package feeds

import (
	"cmp"
	"hash/maphash"
	"maps"
	"slices"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Shard sizing. A shard holds about targetPerShard names after a build;
// Apply keeps the shards until they average maxPerShard (the index grew
// fourfold) or the keys fall under minPerShard a shard (it shrank to a
// tenth or less), then rebuilds the whole Index at the right size, which
// amortises to a constant per line. The numbers are a trade-off
// (docs/feed-index.md): a delta of d lines over S shards rebuilds about
// 1-e^(-d/S) of them, so S must be about ten times d for a delta to copy
// under a tenth of the index (10 000 lines over 2^18 shards: 3.7 %); each
// shard costs 20 bytes of table, which a lookup reads and Apply copies,
// and its allocation's rounding.
const (
	targetPerShard = 48
	maxPerShard    = 4 * targetPerShard
	minPerShard    = 3
	maxShardBits   = 24
)

// shardBits is the number of shard bits for names names: the fewest that
// keep a shard at targetPerShard names or fewer.
func shardBits(names int) uint {
	b := uint(0)
	for b < maxShardBits && names > targetPerShard<<b {
		b++
	}
	return b
}

// stageBits caps the number of buckets a Builder stages lines in: 4096
// buckets of a few thousand lines each keep every sort small and let the
// build release the staging memory bucket by bucket.
const stageBits = 12

// builder stages lines by hash, then sorts each bucket and writes its
// shards. A staged line is
//
//	8 bytes  the name's hash, little-endian
//	uvarint len(name), name, uvarint len(path), path
//	uvarint  code set id + 1, 0 for a removal
//
// so that the build neither hashes again nor keeps a string per line.
type builder struct {
	seed  maphash.Seed
	sb    uint // staging bits: a line goes to bucket h >> (64-sb)
	stage [][]byte
	lines int
	sets  setTable
}

func newBuilder(seed maphash.Seed, sizeHint int) *builder {
	sb := min(stageBits, max(4, shardBits(sizeHint)))
	return &builder{seed: seed, sb: sb, stage: make([][]byte, 1<<sb), sets: setTable{ids: map[string]uint32{}}}
}

func (b *builder) set(l feed.Line) {
	h := maphash.String(b.seed, l.Name)
	set := uint32(0)
	if !l.Remove {
		set = b.sets.intern(l.Codes) + 1
	}
	k := h >> (64 - b.sb)
	buf := b.stage[k]
	buf = append(buf, byte(h), byte(h>>8), byte(h>>16), byte(h>>24), byte(h>>32), byte(h>>40), byte(h>>48), byte(h>>56))
	buf = appendUvarint(buf, uint64(len(l.Name)))
	buf = append(buf, l.Name...)
	buf = appendUvarint(buf, uint64(len(l.Path)))
	buf = append(buf, l.Path...)
	buf = appendUvarint(buf, uint64(set))
	b.stage[k] = buf
	b.lines++
}

// staged is one staged line in a bucket being built: its sort key (shard
// and fingerprint, the order of a shard), its hash and where it is.
type staged struct {
	key uint64
	h   uint64
	off int
}

func (b *builder) build() *Index {
	bits := shardBits(b.lines)
	ix := &Index{
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
		refs []staged
		w    shardWriter
		e    nameEntry
		cur  = -1 // the shard w is writing
	)
	for k, buf := range b.stage {
		refs = refs[:0]
		for off := 0; off < len(buf); {
			h := le64(buf, off)
			refs = append(refs, staged{key: h>>ix.shift<<32 | h&0xffffffff, h: h, off: off})
			off = skipStaged(buf, off)
		}
		// Stable by position: a later line of the same key wins.
		slices.SortFunc(refs, func(a, b staged) int {
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
			// which buildName handles by taking one name at a time.
			group := refs[i:j]
			for len(group) > 0 {
				name, rest := buildName(buf, group, &e)
				group = rest
				ix.n += countKeys(&e)
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
				w.add(fingerprint(refs[i].h), &e)
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

func (ix *Index) setShard(s int, w *shardWriter) {
	ix.shards[s], ix.homes[s] = w.finish()
}

// buildName applies, in order, the lines of group that name the same name
// as the first, fills e with the result and returns the name and the lines
// of other names (left over by a hash collision). The strings in e point
// into buf, which the caller keeps unchanged while it uses them.
func buildName(buf []byte, group []staged, e *nameEntry) (string, []staged) {
	*e = nameEntry{paths: e.paths[:0]}
	var name string
	var rest []staged
	for _, r := range group {
		n, path, set := readStaged(buf, r.off)
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

func countKeys(e *nameEntry) int {
	n := len(e.paths)
	if e.bare != 0 {
		n++
	}
	return n
}

func le64(b []byte, i int) uint64 {
	_ = b[i+7]
	return uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
		uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56
}

func bytesUvarint(b []byte, i int) (uint64, int) {
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

// readStaged reads the staged line at off. The strings share buf's memory
// (unsafe.String): the build only reads buf, and copies what it keeps into
// the shard, so no string per line is allocated for 10 million lines.
func readStaged(buf []byte, off int) (name, path string, set uint32) {
	off += 8
	l, off := bytesUvarint(buf, off)
	name = unsafe.String(&buf[off], int(l))
	off += int(l)
	l, off = bytesUvarint(buf, off)
	if l > 0 {
		path = unsafe.String(&buf[off], int(l))
	}
	off += int(l)
	v, _ := bytesUvarint(buf, off)
	return name, path, uint32(v)
}

func skipStaged(buf []byte, off int) int {
	off += 8
	l, off := bytesUvarint(buf, off)
	off += int(l)
	l, off = bytesUvarint(buf, off)
	off += int(l)
	_, off = bytesUvarint(buf, off)
	return off
}

// setTable interns code sets: few distinct sets exist in a feed (one per
// category and the odd combination), so a record holds a small number
// instead of a slice. shared marks tables an Index already holds: the
// first new set clones them, since an Index is never written.
type setTable struct {
	sets   [][]uint16
	ids    map[string]uint32
	shared bool
	key    []byte
}

// intern returns the id of codes, adding a copy of them if new.
func (t *setTable) intern(codes []uint16) uint32 {
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
