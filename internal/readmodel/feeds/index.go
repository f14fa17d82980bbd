// Package feeds is every node's feed index (DESIGN.md §6.2): the category
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

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Index is one feed's domain → codes index. It is immutable: Apply returns
// a new Index, and any number of goroutines read one without locks.
//
// The layout (docs/feed-index.md): names are spread by a hash over 2^bits
// shards of about 48 names; each shard is one immutable string, a small
// hash table of 32-byte slots that hold a name and its codes whole when
// they fit, and the records of the names that do not (long names, path
// entries). A lookup of a cold name waits for memory about once: the home
// slots of the name and of its parents are read together. Apply copies
// the shard table and rebuilds only the shards its lines hash to; the old
// Index keeps the old shards. Code sets are interned: a slot holds a
// small number into sets.
type Index struct {
	shards []string // 1<<bits shards, each empty or a blob (index_shard.go)
	homes  []uint32 // each shard's number of home slots (index_shard.go)
	shift  uint     // 64 - bits: a hash's shard is h >> shift
	seed   maphash.Seed
	n      int // keys: name entries and name/path entries
	names  int // names (records), which the shard sizing follows

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

// Empty is an Index with no entry.
func Empty() *Index {
	return &Index{shards: []string{""}, homes: []uint32{0}, shift: 64, seed: maphash.MakeSeed(), setIDs: map[string]uint32{}}
}

// Len is the number of keys (name and name/path entries).
func (ix *Index) Len() int { return ix.n }

// Lookup finds the entry for name (an A-label without trailing dot) and
// path ("" or starting with '/') by the rule of DESIGN.md §6.2: the name,
// else each parent in turn, the most specific wins; among the entries of
// one name, the path entry whose path is the longest prefix of path, else
// the name's own entry. A name whose path entries do not apply and which
// has no entry of its own does not stop the walk: its parents are asked.
//
// Lookup does not allocate: Name is a suffix of name, Path and Codes point
// into the Index.
func (ix *Index) Lookup(name, path string) (Match, bool) {
	// The walk is in two passes over up to lookupBatch suffixes. The first
	// hashes each and reads its home slot, the one memory access a probe
	// waits for; these reads do not depend on one another, so the
	// processor has them in flight together, and the probes of a name's
	// parents wait for memory once, not once each. The second pass
	// searches, most specific first, in lines that have arrived.
	var probes [lookupBatch]probe
	for from := 0; ; {
		k, more := 0, true
		for k < lookupBatch {
			s := name[from:]
			h := maphash.String(ix.seed, s)
			p := &probes[k]
			p.from, p.shard, p.fp = from, uint32(h>>ix.shift), fingerprint(h)
			p.at = 0 // an empty shard: no name, as an empty slot says
			if homes := ix.homes[p.shard]; homes > 0 {
				p.slot = homeOf(p.fp, homes) * slotSize
				p.at = le32(ix.shards[p.shard], p.slot)
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
			if p.at == 0 || p.at > p.fp { // an empty home or a greater fingerprint: no such name
				continue
			}
			blob, suffix := ix.shards[p.shard], name[p.from:]
			o, ok := findSlot(blob, p.slot, p.fp, suffix)
			if !ok {
				continue
			}
			if blob[o+5] == slotInline {
				return Match{Name: suffix, Codes: ix.sets[le16(blob, o+6)-1]}, true
			}
			r := recordReader{s: blob, i: int(le32(blob, o+8))}
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

// lookupBatch is how many suffixes a lookup probes at once: more labels
// than that are rare (tracker hosts have four or five).
const lookupBatch = 8

// probe is one suffix of a lookup: where it starts in the name, its
// shard, its fingerprint, its home slot and the fingerprint there. It
// holds no pointers, so that filling it costs no write barrier.
type probe struct {
	from, slot int
	shard      uint32
	fp, at     uint32
}

// match applies the §6.2 rule to one name's record: the longest path entry
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
			for o, end := 0, shardSlots(blob)*slotSize; o < end; o += slotSize {
				if le32(blob, o) == 0 {
					continue
				}
				decodeSlot(blob, o, &e)
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

// SizeBytes estimates the memory the Index holds: its shard table, the
// shards, and the code sets (not the Go allocator's rounding, which adds a
// few per cent). Shards shared with an older or newer Index are counted in
// each.
func (ix *Index) SizeBytes() int {
	size := len(ix.shards) * (16 + 4)
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
