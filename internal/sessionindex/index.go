// Package sessionindex is the in-memory index of subscriber sessions that every
// filter node queries on the DNS path (DESIGN.md §1). The IP Mapper publishes
// sessions into the JetStream KV bucket "sessions"; the node's subscriber
// index (internal/subscriber) watches that bucket and keeps an *Index of it,
// which the resolver and the simulator read to turn a client IP, a username or
// a device id into a session. The IP Mapper uses the same type for its own
// authoritative table.
//
// An *Index is an immutable snapshot. Readers share it freely without locks;
// writers derive a new snapshot with Apply, which copies only the few small
// nodes a change touches (persistent data structures: the bart routing table's
// copy-on-write operations for IP lookups, hash-ordered persistent B+trees for
// the string keys), and publish it with one atomic pointer swap.
//
// Sessions handed to an Index (Apply, Builder.Put) are shared with every
// snapshot that contains them and must never be modified afterwards; build a
// new *session.Session for every change.
package sessionindex

import (
	"cmp"
	"hash/maphash"
	"net/netip"
	"slices"

	"github.com/gaissmai/bart"

	"github.com/svc-pf/svc-pf/internal/session"
)

// Index is an immutable snapshot: safe for any number of concurrent readers
// without locks. The zero value is not usable; start from Empty or a Builder.
type Index struct {
	seed     maphash.Seed
	lpm      *lpmTable
	byID     htree[*session.Session]
	byOrg    htree[group]
	byUser   htree[group]
	byDevice htree[group]
}

// lpmTable is the routing table variant: Fast trades some memory for fewer
// cache misses per lookup.
type lpmTable = bart.Fast[holder]

// holder is what the routing table stores for one prefix. Sessions holding
// the exact same prefix happen transiently (the producer sets a new session
// before it cleans the old one): the most recently applied one answers, the
// others wait underneath in apply order, so removing either side leaves the
// right one visible.
type holder struct {
	top   *session.Session
	older *[]*session.Session // nil in the common case; oldest first, never modified
}

// group is the entry of a secondary index (org, username, device id): all
// sessions that share one key. rep is always one of the members and supplies
// the key; many holds every member, keyed by session id, once there are two
// or more, so a group of any size changes in O(log n).
type group struct {
	rep  *session.Session
	many *htree[*session.Session]
}

func orgOf(s *session.Session) string    { return s.Org }
func userOf(s *session.Session) string   { return s.Username }
func deviceOf(s *session.Session) string { return s.DeviceID }

// Empty returns an index with no sessions.
func Empty() *Index {
	return &Index{seed: maphash.MakeSeed(), lpm: new(lpmTable)}
}

func (ix *Index) hash(s string) uint64 { return maphash.String(ix.seed, s) }

// Len is the number of sessions.
func (ix *Index) Len() int { return ix.byID.len() }

// Get returns the session with the given id.
func (ix *Index) Get(id string) (*session.Session, bool) {
	return ix.byID.get(ix.hash(id), func(s *session.Session) bool { return s.ID == id })
}

// LookupIP returns the session whose allocation is the longest prefix
// containing a. An IPv4-mapped IPv6 address matches as the IPv4 address it
// maps, and a zone is ignored, so callers can pass what a dual-stack socket
// reports.
func (ix *Index) LookupIP(a netip.Addr) (*session.Session, bool) {
	if a.Is4In6() {
		a = a.Unmap()
	}
	h, ok := ix.lpm.Lookup(a)
	return h.top, ok
}

// ByOrg returns the sessions of an organisation, in no particular order.
// The slice is the caller's; the sessions are shared and read-only.
func (ix *Index) ByOrg(org string) []*session.Session { return ix.members(ix.byOrg, orgOf, org) }

// ByUsername returns the sessions with this username, in no particular order.
func (ix *Index) ByUsername(u string) []*session.Session {
	return ix.members(ix.byUser, userOf, u)
}

// ByDeviceID returns the sessions with this device id, in no particular order.
func (ix *Index) ByDeviceID(d string) []*session.Session {
	return ix.members(ix.byDevice, deviceOf, d)
}

func (ix *Index) members(t htree[group], field func(*session.Session) string, key string) []*session.Session {
	if key == "" {
		return nil
	}
	g, ok := t.get(ix.hash(key), func(g group) bool { return field(g.rep) == key })
	if !ok {
		return nil
	}
	if g.many == nil {
		return []*session.Session{g.rep}
	}
	out := make([]*session.Session, 0, g.many.len())
	g.many.all(func(s *session.Session) bool {
		out = append(out, s)
		return true
	})
	return out
}

// All yields every session, in no particular order, until yield returns
// false. It works with range-over-func: `for s := range ix.All { … }`.
func (ix *Index) All(yield func(*session.Session) bool) {
	ix.byID.all(yield)
}

// Apply returns a new snapshot with the upserts and then the deletes applied;
// ix itself is unchanged and stays valid. An upsert replaces the whole session
// with the same ID; a later upsert of one ID in the same call wins; an ID both
// upserted and deleted ends deleted; deleting an unknown ID does nothing; nil
// sessions are skipped.
//
// Every upsert counts as the most recent application of each of its
// prefixes: where several sessions hold the exact same prefix, the one
// applied last answers LookupIP until it is removed, and then the previous
// holder answers again.
//
// Cost is proportional to the changes, not to the index: the string indexes
// copy one root-to-leaf path per change (each node at most once per call),
// and the routing table uses bart's persistent operations, or for a large
// batch (more prefix changes than 1/64 of the table) one clone followed by
// in-place updates, which is then cheaper. Concurrent Apply calls on one
// snapshot are safe and produce independent snapshots.
func (ix *Index) Apply(upserts []*session.Session, deletes []string) *Index {
	if len(upserts) == 0 && len(deletes) == 0 {
		return ix
	}
	nx := *ix
	m := mutation{ix: &nx, ed: new(edit)}
	ops := len(deletes)
	for _, s := range upserts {
		if s != nil {
			ops += 2 * len(s.Allocations)
		}
	}
	if ops*64 > ix.lpm.Size() {
		nx.lpm = ix.lpm.Clone()
		m.inPlace = true
	}
	for _, s := range upserts {
		if s == nil {
			continue
		}
		if old, ok := nx.Get(s.ID); ok {
			m.remove(old)
		}
		m.add(s)
	}
	for _, id := range deletes {
		if old, ok := nx.Get(id); ok {
			m.remove(old)
		}
	}
	return &nx
}

// mutation edits a snapshot that no reader has seen yet.
type mutation struct {
	ix      *Index
	ed      *edit
	inPlace bool // ix.lpm is a private clone: update it in place
}

func (m *mutation) modify(p netip.Prefix, cb func(holder, bool) (holder, bool)) {
	if m.inPlace {
		m.ix.lpm.Modify(p, cb)
	} else {
		m.ix.lpm = m.ix.lpm.ModifyPersist(p, cb)
	}
}

func (m *mutation) add(s *session.Session) {
	ix := m.ix
	ix.byID.put(m.ed, ix.hash(s.ID), s, func(o *session.Session) bool { return o.ID == s.ID })
	m.groupAdd(&ix.byOrg, orgOf, s)
	m.groupAdd(&ix.byUser, userOf, s)
	m.groupAdd(&ix.byDevice, deviceOf, s)
	eachPrefix(s, func(p netip.Prefix) {
		m.modify(p, func(h holder, ok bool) (holder, bool) { return pushHolder(h, ok, s), false })
	})
}

func (m *mutation) remove(s *session.Session) {
	ix := m.ix
	ix.byID.del(m.ed, ix.hash(s.ID), func(o *session.Session) bool { return o.ID == s.ID })
	m.groupRemove(&ix.byOrg, orgOf, s)
	m.groupRemove(&ix.byUser, userOf, s)
	m.groupRemove(&ix.byDevice, deviceOf, s)
	eachPrefix(s, func(p netip.Prefix) {
		m.modify(p, func(h holder, ok bool) (holder, bool) {
			if !ok {
				return h, true
			}
			return dropHolder(h, s)
		})
	})
}

// pushHolder makes s the answering holder, keeping the previous one
// underneath.
func pushHolder(h holder, ok bool, s *session.Session) holder {
	if !ok {
		return holder{top: s}
	}
	var older []*session.Session
	if h.older != nil {
		older = make([]*session.Session, 0, len(*h.older)+1)
		older = append(older, *h.older...)
	}
	older = append(older, h.top)
	return holder{top: s, older: &older}
}

// dropHolder removes s from h; del reports that no holder is left.
func dropHolder(h holder, s *session.Session) (_ holder, del bool) {
	if h.top == s {
		if h.older == nil {
			return holder{}, true
		}
		o := *h.older
		if len(o) == 1 {
			return holder{top: o[0]}, false
		}
		rest := slices.Clone(o[:len(o)-1])
		return holder{top: o[len(o)-1], older: &rest}, false
	}
	if h.older == nil {
		return h, false
	}
	i := slices.Index(*h.older, s)
	if i < 0 {
		return h, false
	}
	if len(*h.older) == 1 {
		return holder{top: h.top}, false
	}
	rest := slices.Delete(slices.Clone(*h.older), i, i+1)
	return holder{top: h.top, older: &rest}, false
}

func (m *mutation) groupAdd(t *htree[group], field func(*session.Session) string, s *session.Session) {
	key := field(s)
	if key == "" {
		return
	}
	ix := m.ix
	h := ix.hash(key)
	match := func(g group) bool { return field(g.rep) == key }
	g, ok := t.get(h, match)
	switch {
	case !ok:
		g = group{rep: s}
	case g.many == nil:
		if g.rep.ID == s.ID {
			g.rep = s
			break
		}
		set := &htree[*session.Session]{}
		set.put(m.ed, ix.hash(g.rep.ID), g.rep, func(*session.Session) bool { return false })
		set.put(m.ed, ix.hash(s.ID), s, func(o *session.Session) bool { return o.ID == s.ID })
		g.many = set
	default:
		set := *g.many
		set.put(m.ed, ix.hash(s.ID), s, func(o *session.Session) bool { return o.ID == s.ID })
		g.many = &set
		if g.rep.ID == s.ID {
			g.rep = s
		}
	}
	t.put(m.ed, h, g, match)
}

func (m *mutation) groupRemove(t *htree[group], field func(*session.Session) string, s *session.Session) {
	key := field(s)
	if key == "" {
		return
	}
	ix := m.ix
	h := ix.hash(key)
	match := func(g group) bool { return field(g.rep) == key }
	g, ok := t.get(h, match)
	if !ok {
		return
	}
	if g.many == nil {
		if g.rep.ID == s.ID {
			t.del(m.ed, h, match)
		}
		return
	}
	set := *g.many
	if !set.del(m.ed, ix.hash(s.ID), func(o *session.Session) bool { return o.ID == s.ID }) {
		return
	}
	if set.len() == 1 {
		rep, _ := set.first()
		g = group{rep: rep}
	} else {
		g.many = &set
		if g.rep.ID == s.ID {
			g.rep, _ = set.first()
		}
	}
	t.put(m.ed, h, g, match)
}

// eachPrefix calls fn once for each distinct, valid allocation of s, masked
// and with IPv4-mapped IPv6 prefixes turned into IPv4 (LookupIP unmaps
// addresses the same way). Invalid prefixes are skipped: an index cannot
// refuse input, and the producer validates sessions before publishing.
func eachPrefix(s *session.Session, fn func(netip.Prefix)) {
	allocs := s.Allocations
	if len(allocs) > 16 {
		seen := make(map[netip.Prefix]struct{}, len(allocs))
		for _, p := range allocs {
			if p, ok := normPrefix(p); ok {
				if _, dup := seen[p]; !dup {
					seen[p] = struct{}{}
					fn(p)
				}
			}
		}
		return
	}
outer:
	for i, p := range allocs {
		p, ok := normPrefix(p)
		if !ok {
			continue
		}
		for _, q := range allocs[:i] {
			if q, ok := normPrefix(q); ok && q == p {
				continue outer
			}
		}
		fn(p)
	}
}

func normPrefix(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return p, false
	}
	a := p.Addr()
	if a.Zone() != "" {
		a = a.WithZone("")
		p = netip.PrefixFrom(a, p.Bits())
	}
	if a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), true
}

// Builder collects sessions for a bulk initial load, which is much cheaper
// than repeated Apply: Index packs every structure in one pass. A Builder is
// not safe for concurrent use.
type Builder struct {
	order []*session.Session // in Put order; nil where replaced or deleted
	pos   map[string]int     // id → position in order
	holes int
}

// NewBuilder returns a builder sized for about sizeHint sessions.
func NewBuilder(sizeHint int) *Builder {
	sizeHint = max(sizeHint, 0)
	return &Builder{order: make([]*session.Session, 0, sizeHint), pos: make(map[string]int, sizeHint)}
}

// Put adds s, replacing a session with the same ID; like Apply, it is the
// most recent application of its prefixes. nil is ignored.
func (b *Builder) Put(s *session.Session) {
	if s == nil {
		return
	}
	if i, ok := b.pos[s.ID]; ok {
		b.order[i] = nil
		b.holes++
	}
	b.pos[s.ID] = len(b.order)
	b.order = append(b.order, s)
	if b.holes > 1024 && b.holes > len(b.order)/2 {
		b.compact()
	}
}

// Delete removes the session with this id, if any.
func (b *Builder) Delete(id string) {
	if i, ok := b.pos[id]; ok {
		b.order[i] = nil
		b.holes++
		delete(b.pos, id)
	}
}

func (b *Builder) compact() {
	live := b.order[:0]
	for _, s := range b.order {
		if s != nil {
			b.pos[s.ID] = len(live)
			live = append(live, s)
		}
	}
	clear(b.order[len(live):])
	b.order = live
	b.holes = 0
}

// Index returns a snapshot of the sessions put so far. The builder stays
// usable; later changes do not affect the returned snapshot.
func (b *Builder) Index() *Index {
	ix := Empty()
	live := make([]*session.Session, 0, len(b.pos))
	for _, s := range b.order {
		if s != nil {
			live = append(live, s)
		}
	}
	for _, s := range live { // in Put order, so the last holder of a prefix answers
		eachPrefix(s, func(p netip.Prefix) {
			ix.lpm.Modify(p, func(h holder, ok bool) (holder, bool) { return pushHolder(h, ok, s), false })
		})
	}
	ix.byID = buildSet(ix, live)
	ix.byOrg = buildGroups(ix, live, orgOf)
	ix.byUser = buildGroups(ix, live, userOf)
	ix.byDevice = buildGroups(ix, live, deviceOf)
	return ix
}

type hashed struct {
	h uint64
	s *session.Session
}

// buildSet packs sessions into an htree keyed by session id.
func buildSet(ix *Index, ss []*session.Session) htree[*session.Session] {
	hs := make([]hashed, len(ss))
	for i, s := range ss {
		hs[i] = hashed{ix.hash(s.ID), s}
	}
	slices.SortFunc(hs, func(a, b hashed) int { return cmp.Compare(a.h, b.h) })
	hashes := make([]uint64, len(hs))
	items := make([]*session.Session, len(hs))
	for i, e := range hs {
		hashes[i], items[i] = e.h, e.s
	}
	return buildHTree(hashes, items)
}

// buildGroups packs a secondary index: sessions sorted by the hash of their
// key (then the key itself, which separates colliding keys), one group per
// run of equal keys.
func buildGroups(ix *Index, ss []*session.Session, field func(*session.Session) string) htree[group] {
	hs := make([]hashed, 0, len(ss))
	for _, s := range ss {
		if k := field(s); k != "" {
			hs = append(hs, hashed{ix.hash(k), s})
		}
	}
	slices.SortFunc(hs, func(a, b hashed) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(field(a.s), field(b.s))
	})
	var hashes []uint64
	var items []group
	for lo := 0; lo < len(hs); {
		hi := lo + 1
		for hi < len(hs) && hs[hi].h == hs[lo].h && field(hs[hi].s) == field(hs[lo].s) {
			hi++
		}
		g := group{rep: hs[lo].s}
		if hi-lo > 1 {
			members := make([]*session.Session, hi-lo)
			for i := range members {
				members[i] = hs[lo+i].s
			}
			set := buildSet(ix, members)
			g.many = &set
		}
		hashes = append(hashes, hs[lo].h)
		items = append(items, g)
		lo = hi
	}
	return buildHTree(hashes, items)
}
