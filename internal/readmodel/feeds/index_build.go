package feeds

import (
	"cmp"
	"hash/maphash"
	"maps"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Shard sizing. A small index has shards of about targetPerShard names,
// as many as that takes up to 2^maxShardBits; a large one has 2^maxShardBits
// shards, which grow with it (78 000 names, 3.7 MB each, at 10 million).
//
// Few shards keep the shard table (20 bytes a shard) in the processor's
// first-level cache, so that a lookup computes a slot's address without
// waiting for memory: the table of 2^18 small shards this index
// had before (5 MB) was a wait of its own before the slot's
// (docs/feed-index.md). Apply does not copy shards any more to change a
// few names of them (it writes them to the overlay, index_apply.go), so
// large shards cost it nothing per line. A shard is still the unit Apply
// rewrites to take names back from the overlay, and the unit of an
// allocation, which stays under ~5 MB so that such a rewrite is a small
// part of the index.
//
// Below 2^maxShardBits shards, Apply keeps the shards until they average
// maxPerShard names (the index grew fourfold), or the keys fall under
// minPerShard a shard (it shrank to a tenth or less), then rebuilds the
// whole Index at the right size, which amortises to a constant per line.
const (
	targetPerShard = 48
	maxPerShard    = 4 * targetPerShard
	minPerShard    = 3
	maxShardBits   = 7
)

// shardBits is the number of shard bits for names names: the fewest that
// keep a shard at targetPerShard names or fewer, at most maxShardBits.
func shardBits(names int) uint { return min(sizeBits(names), maxShardBits) }

// sizeBits is the fewest bits b such that names ≤ targetPerShard·2^b.
func sizeBits(names int) uint {
	b := uint(0)
	for b < 24 && names > targetPerShard<<b {
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
	key   nameHash
	sb    uint // staging bits: a line goes to bucket h >> (64-sb)
	stage [][]byte
	lines int
	sets  setTable
}

func newBuilder(seed maphash.Seed, sizeHint int) *builder {
	sb := min(stageBits, max(4, sizeBits(sizeHint)))
	return &builder{seed: seed, key: newNameHash(seed), sb: sb, stage: make([][]byte, 1<<sb), sets: setTable{ids: map[string]uint32{}}}
}

func (b *builder) set(l feed.Line) { b.setHashed(b.key.name(l.Name), l) }

// setHashed stages l, whose name hashes to h.
func (b *builder) setHashed(h uint64, l feed.Line) {
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

// staged is one staged line in a bucket being built: its hash, whose
// order is the order of (shard, fingerprint), and where it is.
type staged struct {
	h   uint64
	off int
}

func (b *builder) build() *Index {
	bits := shardBits(b.lines)
	ix := &Index{
		shards: make([]string, 1<<bits),
		homes:  make([]uint32, 1<<bits),
		shift:  64 - bits,
		bits:   bits,
		seed:   b.seed,
		key:    b.key,
		sets:   b.sets.sets,
		setIDs: b.sets.ids,
	}
	// A bucket holds the lines whose top sb hash bits are its number, a
	// shard those whose top bits are its: both are runs of the hash order,
	// so the buckets, each sorted by hash, give the shards one after the
	// other, a shard spanning one bucket, part of one or several. Runs of
	// buckets that hold whole shards are built in parallel, one by
	// processor (building the shards is a third of a cold load, 3 s at 10
	// million names, and placing names by cuckoo hashing is most of that).
	parts := 1
	if b.lines >= parallelBuild {
		parts = min(runtime.GOMAXPROCS(0), maxBuildParts)
	}
	per := max(1, 1<<b.sb>>bits) // buckets a shard spans, at least one
	step := (len(b.stage)/parts + per - 1) / per * per
	var wg sync.WaitGroup
	counts := make([][2]int, parts)
	for p := range parts {
		lo, hi := min(p*step, len(b.stage)), min((p+1)*step, len(b.stage))
		wg.Go(func() { counts[p] = b.buildRange(ix, lo, hi) })
	}
	wg.Wait()
	for _, c := range counts {
		ix.n += c[0]
		ix.names += c[1]
	}
	// The huge pages each large shard shares with its neighbours
	// (index_mem_linux.go); after the build, once every shard is written.
	for _, blob := range ix.shards {
		if len(blob) >= hugePageSize {
			collapseEdges(blob)
		}
	}
	return ix
}

// Parallel builds: from parallelBuild lines on, in up to maxBuildParts
// goroutines.
const (
	parallelBuild = 4096
	maxBuildParts = 4
)

// buildRange writes the shards of the buckets [lo, hi), which hold whole
// shards, into ix, and returns the keys and the names it wrote.
func (b *builder) buildRange(ix *Index, lo, hi int) (counts [2]int) {
	var (
		refs []staged
		w    shardWriter
		e    nameEntry
		cur  = -1 // the shard w is writing
	)
	for k := lo; k < hi; k++ {
		buf := b.stage[k]
		refs = refs[:0]
		for off := 0; off < len(buf); {
			refs = append(refs, staged{h: le64(buf, off), off: off})
			off = skipStaged(buf, off)
		}
		// Stable by position: a later line of the same key wins.
		slices.SortFunc(refs, func(a, b staged) int {
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
				counts[0] += countKeys(&e)
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
				w.add(shardFP(refs[i].h, ix.bits), &e)
				counts[1]++
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
	return counts
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
