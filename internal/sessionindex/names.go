package sessionindex

import (
	"slices"
	"strings"
)

// names is the index's intern table of org and location names: entries
// store a name as its 4-byte id, which keeps pointers out of them (the
// garbage collector then never reads an entry chunk). Id 0 is reserved: no
// location, and a free slot's org; the empty string, as an org, has an id
// of its own.
//
// The table is append-only, so ids are stable across all the snapshots of
// one lineage (OrgID): a snapshot holds its own names value, whose slice
// holds ids 0 to n-1, and the first new name of a later edit copies the
// slice (with room to grow, where that edit appends in place). It is one
// flat slice, not pages, because the resolver reads a name for each new
// client (one dependent load fewer), while new names are rare: copying a
// few thousand string headers (tens of KiB) for an Apply that brings a new
// organisation costs microseconds. A name is never removed: the table
// holds every org and location name the lineage has seen. They are few
// (organisations number in the thousands, locations are an operator's
// sites), and a lineage ends with every full reload of the sessions read
// model (a new Builder); an IP Mapper whose organisations come and go over
// months keeps their names, some tens of bytes each.
type names struct {
	lin    *lineage
	strs   []string     // by id; id 0 is ""
	byName htab[uint32] // strTag(name) → id, confirmed by the name
	// prods are the producer names by code (entry.prod); code 0 is "".
	// Append-only too, at most prodExt codes: a producer's code is stable
	// within the lineage.
	prods []string
	owner *edit // the edit that may change this value and append to strs and prods in place
}

// lineage is the identity of the snapshots derived from one Empty() or one
// Builder, which share one intern table's ids. It must not be a zero-size
// type: distinct zero-size allocations may share an address.
type lineage struct{ _ byte }

func newNames() *names {
	return &names{lin: new(lineage), strs: []string{""}, prods: []string{""}}
}

// name is the name of id, "" for 0.
func (t *names) name(id uint32) string { return t.strs[id] }

// nameID returns the id of name s, if the snapshot has one.
func (ix *Index) nameID(s string) (uint32, bool) {
	t := ix.names
	tag := ix.strTag(s)
	return t.byName.find(tag, tag, func(id uint32) bool { return t.name(id) == s })
}

// intern returns the id of name s, adding it if the index has none.
func (m *mutation) intern(s string) uint32 {
	if id, ok := m.ix.nameID(s); ok {
		return id
	}
	t := m.ownNames()
	id := uint32(len(t.strs))
	// A copy: s may be part of a larger string (a decoded message) that the
	// index must not keep alive.
	t.strs = append(t.strs, strings.Clone(s))
	t.byName.insert(m.ed, m.ix.strTag(s), id, sameHash)
	return id
}

// ownNames returns the index's names, made writable by the mutation's
// edit.
func (m *mutation) ownNames() *names {
	t := m.ix.names
	if t.owner != m.ed {
		c := *t
		// Clip: appends copy, never writing the snapshot's arrays.
		c.strs, c.prods, c.owner = slices.Clip(t.strs), slices.Clip(t.prods), m.ed
		t, m.ix.names = &c, &c
	}
	return t
}

// producer returns the code of producer p (not ""), adding it if the
// index has none; prodExt when the table is full. A scan: an index sees a
// handful of producers.
func (m *mutation) producer(p string) uint8 {
	if i := slices.Index(m.ix.names.prods, p); i > 0 {
		return uint8(i)
	}
	if len(m.ix.names.prods) >= prodExt {
		return prodExt
	}
	t := m.ownNames()
	t.prods = append(t.prods, strings.Clone(p))
	return uint8(len(t.prods) - 1)
}
