package sessionindex

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/gaissmai/bart"
)

// routes is the IP routing table: longest-prefix match over every
// allocation, mapping to the slot that answers.
//
// Most subscriber allocations are IPv4 host routes (/32) and IPv6 /64s (or
// /128s). Those live in exact-match hash tables keyed by the masked address
// (one probe, usually one cache miss); every other length lives in a bart
// table (github.com/gaissmai/bart), which answers for any mix of lengths at
// a cost that grows with depth, not with the number of lengths. A lookup
// asks the tables from the most specific down, so the answer is the longest
// match over all of them:
//
//	IPv4: /32 table, then bart.
//	IPv6: /128 table; bart if it holds a prefix longer than /64 that
//	      matches; the /64 table; then bart for the shorter ones.
//
// A prefix held by several sessions is in its table once, with the session
// that answers; the others wait in older.
type routes struct {
	host4 *rtab[uint32]    // IPv4 /32
	net64 *rtab[[2]uint32] // IPv6 /64: the high half of the address
	host6 *rtab[[2]uint64] // IPv6 /128
	lpm   *bart.Fast[uint32]
	// owner is the edit that may change lpm in place: a Builder's, or an
	// Apply's that cloned the table because it changes a large part of it.
	// Any other edit changes it with bart's copy-on-write operations.
	owner *edit
	// long6 counts the IPv6 prefixes in lpm longer than /64: while there
	// are none, a /64 match is final.
	long6 int
	// older holds, for a prefix that several sessions hold, the ones that
	// do not answer, oldest first. It is empty except while a producer
	// replaces sessions (it sets the new one before it deletes the old).
	older  *bart.Table[[]uint32]
	nOlder int
}

// rtab is one exact-match table.
type rtab[K comparable] struct {
	owner *edit
	htab[K]
}

func (ix *Index) hash4(a uint32) uint32 {
	return uint32(mix(uint64(a)^ix.rseed[0], ix.rseed[1])>>32) & ix.tagMask
}

func (ix *Index) hash6(a [2]uint32) uint32 {
	return uint32(mix(uint64(a[0])<<32|uint64(a[1])^ix.rseed[0], ix.rseed[1])>>32) & ix.tagMask
}

func (ix *Index) hash6w(a [2]uint64) uint32 {
	return uint32(mix(mix(a[0]^ix.rseed[0], a[1]^ix.rseed[1]), ix.rseed[2])>>32) & ix.tagMask
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func split6(hi uint64) [2]uint32 { return [2]uint32{uint32(hi >> 32), uint32(hi)} }

// LookupIP returns the session whose allocation is the longest prefix
// containing a. An IPv4-mapped IPv6 address matches as the IPv4 address it
// maps, and a zone is ignored, so callers can pass what a dual-stack socket
// reports. It does not allocate, and it does not read the entry: the first
// access to the Entry's fields does.
func (ix *Index) LookupIP(a netip.Addr) (Entry, bool) {
	if s, ok := ix.lookup(a); ok {
		return ix.at(s), true
	}
	return Entry{}, false
}

func (ix *Index) lookup(a netip.Addr) (uint32, bool) {
	r := &ix.routes
	if a.Is4In6() {
		a = a.Unmap()
	}
	a = a.WithZone("")
	if a.Is4() {
		b := a.As4()
		key := binary.BigEndian.Uint32(b[:])
		if s, ok := r.host4.get(ix.hash4(key), key); ok {
			return s, true
		}
		return r.lpmLookup(a)
	}
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	if s, ok := r.host6.get(ix.hash6w([2]uint64{hi, lo}), [2]uint64{hi, lo}); ok {
		return s, true
	}
	if r.long6 > 0 {
		if p, s, ok := r.lpm.LookupPrefixLPM(netip.PrefixFrom(a, 128)); ok && p.Bits() > 64 {
			return s, true
		}
	}
	key := split6(hi)
	if s, ok := r.net64.get(ix.hash6(key), key); ok {
		return s, true
	}
	return r.lpmLookup(a)
}

func (r *routes) lpmLookup(a netip.Addr) (uint32, bool) {
	if r.lpm == nil {
		return 0, false
	}
	return r.lpm.Lookup(a)
}

// exactKind says which exact-match table holds k, if any.
type exactKind int

const (
	inLPM exactKind = iota
	inHost4
	inNet64
	inHost6
)

func (k pkey) table() exactKind {
	switch n := k.bits(); {
	case !k.v6() && n == 32:
		return inHost4
	case k.v6() && n == 64:
		return inNet64
	case k.v6() && n == 128:
		return inHost6
	}
	return inLPM
}

// route returns the slot that answers for exactly k.
func (ix *Index) route(k pkey) (uint32, bool) {
	r := &ix.routes
	switch k.table() {
	case inHost4:
		return r.host4.get(ix.hash4(uint32(k.lo)), uint32(k.lo))
	case inNet64:
		key := split6(k.hi)
		return r.net64.get(ix.hash6(key), key)
	case inHost6:
		key := [2]uint64{k.hi, k.lo}
		return r.host6.get(ix.hash6w(key), key)
	}
	if r.lpm == nil {
		return 0, false
	}
	return r.lpm.Get(k.prefix())
}

// get is htab.get on a table that may not exist.
func (t *rtab[K]) get(h uint32, key K) (uint32, bool) {
	if t == nil {
		return 0, false
	}
	return t.htab.get(h, key)
}

// prepareRoutes lets an Apply of about changes changes own the bart table:
// when they are many, one clone and in-place updates cost less than a path
// copy per change.
func (m *mutation) prepareRoutes(changes int) {
	r := &m.ix.routes
	if r.lpm != nil && r.owner != m.ed && changes > r.lpm.Size()/64 {
		r.lpm, r.owner = r.lpm.Clone(), m.ed
	}
}

// routeOp is one change to the table of k: insert slot, remove slot, or
// replace slot by to.
type routeOp int

const (
	opInsert routeOp = iota
	opRemove
	opReplace
)

func (m *mutation) routeChange(op routeOp, k pkey, slot, to uint32) {
	ix, r := m.ix, &m.ix.routes
	switch k.table() {
	case inHost4:
		tableChange(&r.host4, m.ed, op, uint32(k.lo), slot, to, ix.hash4)
	case inNet64:
		tableChange(&r.net64, m.ed, op, split6(k.hi), slot, to, ix.hash6)
	case inHost6:
		tableChange(&r.host6, m.ed, op, [2]uint64{k.hi, k.lo}, slot, to, ix.hash6w)
	default:
		m.lpmChange(op, k, slot, to)
	}
}

func (m *mutation) lpmChange(op routeOp, k pkey, slot, to uint32) {
	r := &m.ix.routes
	if r.lpm == nil {
		r.lpm, r.owner = new(bart.Fast[uint32]), m.ed
	}
	if k.v6() && k.bits() > 64 {
		switch op {
		case opInsert:
			r.long6++
		case opRemove:
			r.long6--
		}
	}
	p, inPlace := k.prefix(), r.owner == m.ed
	switch {
	case op == opRemove && inPlace:
		r.lpm.Delete(p)
	case op == opRemove:
		r.lpm = r.lpm.DeletePersist(p)
	case inPlace:
		r.lpm.Insert(p, pick(op == opInsert, slot, to))
	default:
		r.lpm = r.lpm.InsertPersist(p, pick(op == opInsert, slot, to))
	}
}

func pick(first bool, a, b uint32) uint32 {
	if first {
		return a
	}
	return b
}

// tableChange applies op to the exact-match table *p, creating it, or
// dropping it when it empties.
func tableChange[K comparable](p **rtab[K], ed *edit, op routeOp, key K, slot, to uint32, hf hashFn[K]) {
	t := *p
	switch {
	case t == nil:
		t = &rtab[K]{owner: ed}
	case t.owner != ed:
		c := *t
		c.owner = ed
		t = &c
	}
	switch op {
	case opInsert:
		t.insert(ed, key, slot, hf)
	case opRemove:
		t.remove(ed, key, slot, hf)
	case opReplace:
		t.replace(ed, key, slot, to, hf)
	}
	if t.len() == 0 {
		t = nil
	}
	*p = t
}

// pushRoute makes slot the answer for k, keeping the previous holder
// underneath.
func (m *mutation) pushRoute(k pkey, slot uint32) {
	r := &m.ix.routes
	top, found := m.ix.route(k)
	switch {
	case !found:
		m.routeChange(opInsert, k, slot, 0)
	case top != slot:
		older := r.olderOf(k)
		next := make([]uint32, 0, len(older)+1)
		for _, s := range older {
			if s != slot {
				next = append(next, s)
			}
		}
		r.setOlder(k, append(next, top))
		m.routeChange(opReplace, k, top, slot)
	}
}

// dropRoute removes slot as a holder of k; if it answered, the most recent
// older holder answers instead.
func (m *mutation) dropRoute(k pkey, slot uint32) {
	r := &m.ix.routes
	older := r.olderOf(k)
	if top, found := m.ix.route(k); found && top == slot {
		if len(older) == 0 {
			m.routeChange(opRemove, k, slot, 0)
			return
		}
		r.setOlder(k, slices.Clone(older[:len(older)-1]))
		m.routeChange(opReplace, k, slot, older[len(older)-1])
		return
	}
	if i := slices.Index(older, slot); i >= 0 {
		r.setOlder(k, slices.Delete(slices.Clone(older), i, i+1))
	}
}

func (r *routes) olderOf(k pkey) []uint32 {
	if r.nOlder == 0 {
		return nil
	}
	v, _ := r.older.Get(k.prefix())
	return v
}

// setOlder replaces the older holders of k (a slice nobody else holds).
func (r *routes) setOlder(k pkey, v []uint32) {
	before := len(r.olderOf(k))
	if r.older == nil {
		r.older = new(bart.Table[[]uint32])
	}
	r.older = r.older.ModifyPersist(k.prefix(), func([]uint32, bool) ([]uint32, bool) {
		return v, len(v) == 0
	})
	r.nOlder += len(v) - before
}
