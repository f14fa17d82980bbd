// Package sessionindex is the in-memory index of subscriber sessions that every
// filter node queries on the DNS path (DESIGN.md §1). The IP Mapper publishes
// sessions into the JetStream KV bucket "sessions"; the node's sessions read
// model (internal/readmodel/sessions) follows that bucket and keeps an *Index
// of it, which the resolver and the simulator read to turn a client IP, a
// username or a device id into a session. The IP Mapper uses the same type
// for its own authoritative table.
//
// An *Index is an immutable snapshot. Readers share it freely without locks;
// writers derive a new snapshot with Apply, which copies only the few small
// nodes a change touches, and publish it with one atomic pointer swap.
//
// Sessions are stored in a compact form (152 bytes for the usual session,
// strings included, against ~300 for a *session.Session) and read back
// through Entry, a pointer-sized view whose accessors do not allocate;
// Entry.Session rebuilds the full session, exactly as it was given. See
// docs/subscriber-index.md for the structures and their figures.
package sessionindex

import (
	"hash/maphash"
	"math/rand/v2"
	"slices"

	"github.com/svc-pf/svc-pf/internal/session"
)

// Index is an immutable snapshot: safe for any number of concurrent readers
// without locks. The zero value is not usable; start from Empty or a Builder.
type Index struct {
	seed     maphash.Seed // string keys
	rseed    [3]uint64    // routing keys
	tagMask  uint32       // all ones; tests narrow it to force tag collisions
	n        int
	slots    slots        // the entries
	free     uint32       // first free slot + 1, 0 when none; the list runs through entry.rev
	byID     htab[uint32] // hash of the id → slot, confirmed by the entry
	routes   routes
	byOrg    slotTree // hash32(key)<<32 | slot
	byUser   slotTree
	byDevice slotTree
}

func newIndex() *Index {
	return &Index{seed: maphash.MakeSeed(), rseed: [3]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64() | 1}, tagMask: ^uint32(0)}
}

// Empty returns an index with no sessions.
func Empty() *Index { return newIndex() }

func (ix *Index) strTag(s string) uint32 {
	return uint32(maphash.String(ix.seed, s)>>32) & ix.tagMask
}

// Len is the number of sessions.
func (ix *Index) Len() int { return ix.n }

// Get returns the session with the given id.
func (ix *Index) Get(id string) (Entry, bool) {
	s, ok := ix.findID(ix.strTag(id), id)
	if !ok {
		return Entry{}, false
	}
	return Entry{ix.slots.get(s)}, true
}

func (ix *Index) findID(tag uint32, id string) (uint32, bool) {
	return ix.byID.find(tag, tag, func(s uint32) bool { return ix.slots.get(s).id() == id })
}

// sameHash is the hash of a key that is a hash already.
func sameHash(h uint32) uint32 { return h }

// ByOrg returns the sessions of an organisation, in no particular order.
func (ix *Index) ByOrg(org string) []Entry {
	return ix.group(&ix.byOrg, org, func(e *entry) bool { return e.orgName() == org })
}

// ByUsername returns the sessions with this username, in no particular order.
func (ix *Index) ByUsername(u string) []Entry {
	return ix.group(&ix.byUser, u, func(e *entry) bool { return e.username() == u })
}

// ByDeviceID returns the sessions with this device id, in no particular order.
func (ix *Index) ByDeviceID(d string) []Entry {
	return ix.group(&ix.byDevice, d, func(e *entry) bool { return e.deviceID() == d })
}

func (ix *Index) group(t *slotTree, key string, match func(*entry) bool) []Entry {
	if key == "" {
		return nil
	}
	var out []Entry
	t.run(ix.strTag(key), func(slot uint32) bool {
		if e := ix.slots.get(slot); match(e) {
			out = append(out, Entry{e})
		}
		return true
	})
	return out
}

// All yields every session, in no particular order, until yield returns
// false. It works with range-over-func: `for e := range ix.All { … }`.
func (ix *Index) All(yield func(Entry) bool) {
	ix.slots.each(func(_ uint32, e *entry) bool { return yield(Entry{e}) })
}

// Apply returns a new snapshot with the upserts and then the deletes applied;
// ix itself is unchanged and stays valid. An upsert replaces the whole session
// with the same ID; a later upsert of one ID in the same call wins; an ID both
// upserted and deleted ends deleted; deleting an unknown ID does nothing; nil
// sessions are skipped. The index keeps no reference to the sessions given.
//
// Every upsert counts as the most recent application of each of its
// prefixes: where several sessions hold the exact same prefix, the one
// applied last answers LookupIP until it is removed, and then the previous
// holder answers again.
//
// Cost is proportional to the changes, not to the index: each change copies
// the few nodes on its paths (an entry chunk, a table leaf, tree paths),
// each at most once per call. Concurrent Apply calls on one snapshot are
// safe and produce independent snapshots.
func (ix *Index) Apply(upserts []*session.Session, deletes []string) *Index {
	if len(upserts) == 0 && len(deletes) == 0 {
		return ix
	}
	nx := *ix
	m := mutation{ix: &nx, ed: new(edit)}
	m.prepareRoutes(len(upserts) + len(deletes))
	for _, s := range upserts {
		if s != nil {
			m.upsert(s)
		}
	}
	for _, id := range deletes {
		m.delete(id)
	}
	return &nx
}

// mutation edits an index that no reader has seen yet.
type mutation struct {
	ix *Index
	ed *edit
	// bulk: a Builder's; the secondary indexes are built in one pass by
	// Builder.Index instead of being kept up to date.
	bulk           bool
	oldKeys, nkeys []pkey // scratch
}

func (m *mutation) upsert(s *session.Session) {
	ix := m.ix
	e := makeEntry(s)
	m.nkeys = e.keys(m.nkeys[:0])
	tag := ix.strTag(s.ID)
	slot, found := ix.findID(tag, s.ID)
	if found {
		old := *ix.slots.get(slot)
		m.oldKeys = old.keys(m.oldKeys[:0])
		kept := newKeySet(m.nkeys)
		for _, k := range m.oldKeys {
			if !kept.has(k) {
				m.dropRoute(k, slot)
			}
		}
		if !m.bulk {
			m.reindex(&old, &e, slot)
		}
	} else {
		slot = m.alloc()
		ix.byID.insert(m.ed, tag, slot, sameHash)
		ix.n++
		if !m.bulk {
			m.reindex(nil, &e, slot)
		}
	}
	*ix.slots.mut(m.ed, slot) = e
	for _, k := range m.nkeys {
		m.pushRoute(k, slot)
	}
}

func (m *mutation) delete(id string) {
	ix := m.ix
	tag := ix.strTag(id)
	slot, found := ix.findID(tag, id)
	if !found {
		return
	}
	old := *ix.slots.get(slot)
	m.oldKeys = old.keys(m.oldKeys[:0])
	for _, k := range m.oldKeys {
		m.dropRoute(k, slot)
	}
	if !m.bulk {
		m.reindex(&old, nil, slot)
	}
	ix.byID.remove(m.ed, tag, slot, sameHash)
	*ix.slots.mut(m.ed, slot) = entry{rev: int64(ix.free)}
	ix.free = slot + 1
	ix.n--
}

func (m *mutation) alloc() uint32 {
	ix := m.ix
	if ix.free == 0 {
		return ix.slots.n
	}
	slot := ix.free - 1
	ix.free = uint32(ix.slots.get(slot).rev)
	return slot
}

// reindex moves slot in the secondary indexes from the keys of old to those
// of e; either may be nil.
func (m *mutation) reindex(old, e *entry, slot uint32) {
	var o, n [3]string
	if old != nil {
		o = [3]string{old.orgName(), old.username(), old.deviceID()}
	}
	if e != nil {
		n = [3]string{e.orgName(), e.username(), e.deviceID()}
	}
	for i, t := range [3]*slotTree{&m.ix.byOrg, &m.ix.byUser, &m.ix.byDevice} {
		if o[i] == n[i] {
			continue
		}
		if o[i] != "" {
			t.remove(m.ed, uint64(m.ix.strTag(o[i]))<<32|uint64(slot))
		}
		if n[i] != "" {
			t.insert(m.ed, uint64(m.ix.strTag(n[i]))<<32|uint64(slot))
		}
	}
}

// Builder collects sessions for a bulk initial load, which is much cheaper
// than repeated Apply: sessions go straight into private structures changed
// in place, and Index builds the secondary indexes by sorting. A Builder is
// not safe for concurrent use.
type Builder struct {
	m mutation
}

// NewBuilder returns a builder sized for about sizeHint sessions.
func NewBuilder(sizeHint int) *Builder {
	ix := newIndex()
	ed := new(edit)
	ix.slots.dirs, ix.slots.owner = make([]*slotDir, 0, max(sizeHint, 0)/(chunkLen*dirLen)+1), ed
	return &Builder{m: mutation{ix: ix, ed: ed, bulk: true}}
}

// Put adds s, replacing a session with the same ID; like Apply, it is the
// most recent application of its prefixes. nil is ignored. The builder
// keeps no reference to s.
func (b *Builder) Put(s *session.Session) {
	if s != nil {
		b.m.upsert(s)
	}
}

// Delete removes the session with this id, if any.
func (b *Builder) Delete(id string) { b.m.delete(id) }

// Index returns a snapshot of the sessions put so far. The builder stays
// usable; later changes do not affect the returned snapshot.
func (b *Builder) Index() *Index {
	ix := *b.m.ix
	var org, user, dev []uint64
	orgTags := make(map[string]uint64)
	ix.slots.each(func(slot uint32, e *entry) bool {
		if name := e.orgName(); name != "" {
			t, ok := orgTags[name]
			if !ok {
				t = uint64(ix.strTag(name)) << 32
				orgTags[name] = t
			}
			org = append(org, t|uint64(slot))
		}
		if u := e.username(); u != "" {
			user = append(user, uint64(ix.strTag(u))<<32|uint64(slot))
		}
		if d := e.deviceID(); d != "" {
			dev = append(dev, uint64(ix.strTag(d))<<32|uint64(slot))
		}
		return true
	})
	for _, ks := range [][]uint64{org, user, dev} {
		slices.Sort(ks)
	}
	ix.byOrg, ix.byUser, ix.byDevice = buildSlotTree(org), buildSlotTree(user), buildSlotTree(dev)
	// From now on the builder copies what the snapshot shares with it.
	b.m.ed = new(edit)
	return &ix
}
