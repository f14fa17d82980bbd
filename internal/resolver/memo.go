package resolver

import (
	"hash/maphash"
	"net/netip"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// policyMemo remembers, per UDP socket, the policy of the clients it
// served last, so that a client asking again skips the subscriber index,
// the settings layers and the policy cache (a shared, locked map): the
// packet-cache hit path then touches nothing another core writes. An entry
// holds while the sessions and settings snapshots it was found in are the
// current ones: the read models publish every change as a new snapshot
// (policy.View), so a comparison of two pointers is the whole validity
// check. Direct-mapped and owned by one goroutine: no lock.
//
// Behind it, for a client it does not hold (many more subscribers than
// entries, each asking now and then), a second memo maps what the policy
// is compiled from — the settings documents that can apply to the
// session, under one settings snapshot: the engine's own cache key
// (policy.Engine.KeyFor) — to the policy: such a client then costs the
// subscriber index lookup and the settings stack's map lookups, not the
// engine's policy cache (a shared, locked map). The key is the documents'
// pointers, not the subscriber's attributes: a million subscribers, each
// with a username of their own, share the few thousand stacks their
// settings documents make (a key of attributes would hold one entry per
// subscriber and never hit).
type policyMemo struct {
	seed    maphash.Seed
	entries [memoSize]memoEntry

	settings policy.Settings // the snapshot byDocs was filled under
	byDocs   map[policy.Key]*policy.Policy

	ahead []ahead // the batch's clients, by datagram (lookAhead)
}

// ahead is what lookAhead found for one datagram of a batch: its address
// memo slot and, when that slot does not hold it, its session.
type ahead struct {
	slot   uint32
	looked bool // s and found are set: the address memo missed
	found  bool
	s      sessionindex.Entry
	// org is s's, read in lookAhead's last step only to bring the entry's
	// first cache line in while the others' loads are under way.
	org sessionindex.OrgID
}

const memoSize = 4096

// memoDocsMax bounds byDocs; past it the map starts afresh, so that a
// flood of distinct identities cannot grow it without bound.
const memoDocsMax = 4096

type memoEntry struct {
	addr     netip.Addr
	sessions policy.Sessions
	settings policy.Settings
	p        *policy.Policy
	// sess is the client's session under sessions, kept with its policy
	// so that the observer's event does not look it up again.
	sess found
}

func newPolicyMemo() *policyMemo { return &policyMemo{seed: maphash.MakeSeed()} }

func (m *policyMemo) slot(client netip.Addr) uint32 {
	return uint32(maphash.Comparable(m.seed, client) % memoSize)
}

func (en *memoEntry) holds(v *policy.View, client netip.Addr) bool {
	return en.p != nil && en.addr == client && en.sessions == v.Sessions && en.settings == v.Settings
}

// lookAhead prepares the policies of a batch's clients (from, one per
// datagram) under view v: it reads their address memo slots, then looks
// up the sessions of those the memo does not hold, then reads those
// sessions' entries, each step for the whole batch before the next. A
// client new to the socket costs a few cache misses (its memo slot, the
// index's table, its entry: a million sessions are far more than the
// caches hold); one at a time, each waits for the previous, while a loop
// of independent loads lets the processor fetch several at once.
// policyFor then finds them in the caches. from must be the batch that
// policyFor's i index.
func (m *policyMemo) lookAhead(v *policy.View, from []netip.AddrPort) {
	if cap(m.ahead) < len(from) {
		m.ahead = make([]ahead, len(from))
	}
	m.ahead = m.ahead[:len(from)]
	for i, ap := range from {
		m.ahead[i] = ahead{slot: m.slot(ap.Addr().Unmap())}
	}
	if v.Sessions == nil {
		return
	}
	for i, ap := range from {
		a := &m.ahead[i]
		if c := ap.Addr().Unmap(); ap.IsValid() && !m.entries[a.slot].holds(v, c) {
			a.s, a.found = v.Sessions.LookupIP(c)
			a.looked = true
		}
	}
	for i := range m.ahead {
		if a := &m.ahead[i]; a.found {
			a.org = a.s.OrgID() // the entry's first cache line
		}
	}
}

// policyFor is the policy for datagram i of the batch lookAhead prepared,
// and the client's session.
func (m *policyMemo) policyFor(e *policy.Engine, v *policy.View, client netip.Addr, i int) (*policy.Policy, found) {
	a := &m.ahead[i]
	if a.looked {
		return m.policyAt(e, v, client, a.slot, a)
	}
	return m.policyAt(e, v, client, a.slot, nil)
}

// policyAt returns the policy of client, whose address memo slot is slot,
// under view v, and its session; a, when not nil, is its session, looked
// up already.
func (m *policyMemo) policyAt(e *policy.Engine, v *policy.View, client netip.Addr, slot uint32, a *ahead) (*policy.Policy, found) {
	en := &m.entries[slot]
	if en.holds(v, client) {
		return en.p, en.sess
	}
	p, s := m.byIdentity(e, v, client, a)
	*en = memoEntry{addr: client, sessions: v.Sessions, settings: v.Settings, p: p, sess: s}
	return p, s
}

// byIdentity finds client's session and the policy of its settings
// stack, compiling (through the engine) only what this socket has not
// seen under the current settings snapshot. The session is looked up
// once: by lookAhead (a), or here.
func (m *policyMemo) byIdentity(e *policy.Engine, v *policy.View, client netip.Addr, a *ahead) (*policy.Policy, found) {
	if v.Sessions == nil {
		p, s, ok := e.PolicyFor(v, client)
		return p, found{s: s, ok: ok, known: true}
	}
	if m.byDocs == nil || m.settings != v.Settings || len(m.byDocs) >= memoDocsMax {
		m.byDocs = make(map[policy.Key]*policy.Policy, 64)
		m.settings = v.Settings
	}
	var s sessionindex.Entry
	var ok bool
	if a != nil {
		s, ok = a.s, a.found
	} else {
		s, ok = v.Sessions.LookupIP(client)
	}
	fs := found{s: s, ok: ok, known: true}
	k := e.KeyFor(v, s, ok)
	if p, hit := m.byDocs[k]; hit {
		return p, fs
	}
	p := e.PolicyOf(v, s, ok)
	m.byDocs[k] = p
	return p, fs
}
