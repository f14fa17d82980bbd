// Package sessionindex is the in-memory index of subscriber sessions that
// every filter node queries on the DNS path (docs/architecture.md). The IP
// Mapper publishes sessions into the JetStream KV bucket "sessions"; the
// node's sessions read model (internal/readmodel/sessions) follows that
// bucket and keeps an *Index of it, which the resolver and the simulator read
// to turn a client IP, a username or a device id into a session. The IP
// Mapper uses the same type for its own authoritative table.
//
// An *Index is an immutable snapshot. Readers share it freely without locks;
// writers derive a new snapshot with Apply, which copies only the few small
// nodes a change touches, and publish it with one atomic pointer swap.
//
// Sessions are stored in a compact form (128 bytes for the usual session,
// strings included, against ~300 for a *session.Session, in chunks without
// pointers that the garbage collector does not scan) and read back
// through Entry, a three-word view whose accessors do not allocate;
// Entry.Session rebuilds the full session, exactly as it was given. See
// docs/subscriber-index.md for the structures and their figures.
package sessionindex

import (
	"hash/maphash"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

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
	names    *names       // the intern table of org and location names
	free     uint32       // first free slot + 1, 0 when none; the list runs through entry.rev
	byID     htab[uint32] // hash of the id → slot, confirmed by the entry
	routes   routes
	byOrg    slotTree // hash32(key)<<32 | slot
	byUser   slotTree
	byDevice slotTree
}

func newIndex() *Index {
	return &Index{seed: maphash.MakeSeed(), rseed: [3]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64() | 1}, tagMask: ^uint32(0), names: newNames()}
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
	return ix.at(s), true
}

// at is the Entry at slot.
func (ix *Index) at(slot uint32) Entry {
	e, xs := ix.slots.get(slot)
	return Entry{e, xs, ix.names, slot}
}

func (ix *Index) findID(tag uint32, id string) (uint32, bool) {
	return ix.byID.find(tag, tag, func(s uint32) bool { return ix.at(s).ID() == id })
}

// sameHash is the hash of a key that is a hash already.
func sameHash(h uint32) uint32 { return h }

// ByOrg returns the sessions of an organisation, in no particular order.
func (ix *Index) ByOrg(org string) []Entry {
	id, ok := ix.nameID(org)
	if !ok {
		return nil
	}
	return ix.group(&ix.byOrg, org, func(v Entry) bool { return v.e.org == id })
}

// ByUsername returns the sessions with this username, in no particular order.
func (ix *Index) ByUsername(u string) []Entry {
	return ix.group(&ix.byUser, u, func(v Entry) bool { return v.Username() == u })
}

// ByDeviceID returns the sessions with this device id, in no particular order.
func (ix *Index) ByDeviceID(d string) []Entry {
	return ix.group(&ix.byDevice, d, func(v Entry) bool { return v.DeviceID() == d })
}

func (ix *Index) group(t *slotTree, key string, match func(Entry) bool) []Entry {
	if key == "" {
		return nil
	}
	var out []Entry
	t.run(ix.strTag(key), func(slot uint32) bool {
		if v := ix.at(slot); match(v) {
			out = append(out, v)
		}
		return true
	})
	return out
}

// All yields every session, in no particular order, until yield returns
// false. It works with range-over-func: `for e := range ix.All { … }`.
func (ix *Index) All(yield func(Entry) bool) {
	ix.slots.each(func(slot uint32, e *entry, xs **chunkSide) bool { return yield(Entry{e, xs, ix.names, slot}) })
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
	more           []netip.Prefix
}

func (m *mutation) upsert(s *session.Session) {
	ix := m.ix
	e, out := makeEntry(s, m.intern, m.producer)
	m.nkeys = keys(m.nkeys[:0], &e, out.more())
	tag := ix.strTag(s.ID)
	slot, found := ix.findID(tag, s.ID)
	keys3 := [3]string{s.Org, s.Username, s.DeviceID}
	if found {
		old := ix.at(slot)
		m.more = old.moreAllocs(m.more[:0])
		m.oldKeys = keys(m.oldKeys[:0], old.e, m.more)
		kept := newKeySet(m.nkeys)
		for _, k := range m.oldKeys {
			if !kept.has(k) {
				m.dropRoute(k, slot)
			}
		}
		if !m.bulk {
			m.reindex([3]string{old.Org(), old.Username(), old.DeviceID()}, keys3, slot)
		}
	} else {
		slot = m.alloc()
		ix.byID.insert(m.ed, tag, slot, sameHash)
		ix.n++
		if !m.bulk {
			m.reindex([3]string{}, keys3, slot)
		}
	}
	m.store(slot, e, &out)
	for _, k := range m.nkeys {
		m.pushRoute(k, slot)
	}
}

// store writes e at slot, with what it keeps out of line in its chunk's
// side.
func (m *mutation) store(slot uint32, e entry, out *outOfLine) {
	p, r := m.ix.slots.mut(m.ed, slot)
	oldLen, oldExt := p.rlen, p.ext
	rlen := e.rlen
	e.rlen = 0 // no record until it is written
	*p = e
	if oldLen == 0 && oldExt == 0 && rlen == 0 && out.x == nil {
		return
	}
	if x := *r.x; x != nil && x.owner == m.ed {
		x.dead += int(oldLen)
		if oldExt != 0 {
			x.deadExt++
		}
	}
	x := r.sideFor(m.ed, int(rlen), out.x != nil)
	if rlen != 0 {
		p.rest, p.rlen = uint32(len(x.rest)), rlen
		for _, s := range out.strs[:out.n] {
			x.rest = append(x.rest, s...)
		}
		for _, p := range out.allocs {
			x.rest = appendPrefix(x.rest, p)
		}
	}
	if out.x != nil {
		x.ext = append(x.ext, out.x)
		p.ext = uint8(len(x.ext))
	}
}

func (m *mutation) delete(id string) {
	ix := m.ix
	tag := ix.strTag(id)
	slot, found := ix.findID(tag, id)
	if !found {
		return
	}
	old := ix.at(slot)
	m.more = old.moreAllocs(m.more[:0])
	m.oldKeys = keys(m.oldKeys[:0], old.e, m.more)
	for _, k := range m.oldKeys {
		m.dropRoute(k, slot)
	}
	if !m.bulk {
		m.reindex([3]string{old.Org(), old.Username(), old.DeviceID()}, [3]string{}, slot)
	}
	ix.byID.remove(m.ed, tag, slot, sameHash)
	m.store(slot, entry{rev: int64(ix.free)}, &outOfLine{})
	ix.free = slot + 1
	ix.n--
}

func (m *mutation) alloc() uint32 {
	ix := m.ix
	if ix.free == 0 {
		return ix.slots.n
	}
	slot := ix.free - 1
	e, _ := ix.slots.get(slot)
	ix.free = uint32(e.rev)
	return slot
}

// reindex moves slot in the secondary indexes from the keys o to the keys
// n (org, username, device id; "" for none).
func (m *mutation) reindex(o, n [3]string, slot uint32) {
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
	type orgTag struct {
		tag      uint64
		done, ok bool // computed; the org is not ""
	}
	orgTags := make([]orgTag, len(ix.names.strs)) // by org id
	ix.slots.each(func(slot uint32, e *entry, xs **chunkSide) bool {
		v := Entry{e, xs, ix.names, slot}
		t := &orgTags[e.org]
		if !t.done {
			name := ix.names.name(e.org)
			t.tag, t.done, t.ok = uint64(ix.strTag(name))<<32, true, name != ""
		}
		if t.ok {
			org = append(org, t.tag|uint64(slot))
		}
		if u := v.Username(); u != "" {
			user = append(user, uint64(ix.strTag(u))<<32|uint64(slot))
		}
		if d := v.DeviceID(); d != "" {
			dev = append(dev, uint64(ix.strTag(d))<<32|uint64(slot))
		}
		return true
	})
	// The three trees are independent: sorted and built on as many cores
	// (at 10M sessions each takes about a second, on a cold start's
	// critical path).
	var wg sync.WaitGroup
	for _, t := range []struct {
		keys []uint64
		tree *slotTree
	}{{org, &ix.byOrg}, {user, &ix.byUser}, {dev, &ix.byDevice}} {
		wg.Go(func() {
			slices.Sort(t.keys)
			*t.tree = buildSlotTree(t.keys)
		})
	}
	wg.Wait()
	// From now on the builder copies what the snapshot shares with it.
	b.m.ed = new(edit)
	return &ix
}

// InOrder yields every session in an order in which putting them into an
// empty Builder gives an index with the same answers: every session comes
// after the older holders of each of its prefixes, so the one that answers
// for a prefix is put last and the others wait in the same order. (All has
// no order; a replay of the bucket applies sessions in the order of their
// last writes, which InOrder keeps only where it matters.) The IP Mapper's
// snapshot is written in this order. It returns false, yielding nothing,
// when the holders of the prefixes cannot be ordered (a cycle, which
// applications in one order never leave).
func (ix *Index) InOrder(yield func(Entry) bool) bool {
	r := &ix.routes
	if r.nOlder == 0 {
		ix.All(yield)
		return true
	}
	// The holders of shared prefixes: each prefix's older ones, oldest
	// first, then the one that answers; an edge from each to the next.
	next := map[uint32][]uint32{}
	indeg := map[uint32]int{}
	for p, older := range r.older.All() {
		k, ok := normKey(p)
		if !ok || len(older) == 0 {
			continue
		}
		top, found := ix.route(k)
		if !found {
			continue
		}
		chain := append(slices.Clone(older), top)
		for _, s := range chain {
			if _, ok := indeg[s]; !ok {
				indeg[s] = 0
			}
		}
		for i := 1; i < len(chain); i++ {
			next[chain[i-1]] = append(next[chain[i-1]], chain[i])
			indeg[chain[i]]++
		}
	}
	// Kahn's algorithm, smallest slot first so that the order is stable.
	var ready, order []uint32
	for s, d := range indeg {
		if d == 0 {
			ready = append(ready, s)
		}
	}
	slices.Sort(ready)
	for len(ready) > 0 {
		s := ready[0]
		ready = ready[1:]
		order = append(order, s)
		for _, t := range next[s] {
			if indeg[t]--; indeg[t] == 0 {
				ready = append(ready, t)
			}
		}
	}
	if len(order) != len(indeg) {
		return false
	}
	stop := false
	ix.slots.each(func(slot uint32, e *entry, xs **chunkSide) bool {
		if _, shared := indeg[slot]; shared {
			return true
		}
		if !yield(Entry{e, xs, ix.names, slot}) {
			stop = true
			return false
		}
		return true
	})
	for _, s := range order {
		if stop || !yield(ix.at(s)) {
			break
		}
	}
	return true
}
