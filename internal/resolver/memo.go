package resolver

import (
	"hash/maphash"
	"net/netip"
	"strings"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/policy"
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
// is compiled from — the session's organisation and attributes, under one
// settings snapshot — to the policy: such a client then costs the
// subscriber index lookup only, not the settings stack and the shared
// policy cache. A million subscribers share a few thousand of these.
type policyMemo struct {
	seed    maphash.Seed
	entries [memoSize]memoEntry

	settings policy.Settings // the snapshot byDocs was filled under
	byDocs   map[docsKey]*policy.Policy
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
}

// docsKey is what policy.Engine compiles a session's policy from besides
// the settings snapshot (its settings stack): the organisation and the
// attributes; found false is a client without a session (the global
// layer only).
type docsKey struct {
	found bool
	org   string
	attrs identity.Attributes
}

func newPolicyMemo() *policyMemo { return &policyMemo{seed: maphash.MakeSeed()} }

// policy returns the policy of client under view v.
func (m *policyMemo) policy(e *policy.Engine, v *policy.View, client netip.Addr) *policy.Policy {
	en := &m.entries[maphash.Comparable(m.seed, client)%memoSize]
	if en.p != nil && en.addr == client && en.sessions == v.Sessions && en.settings == v.Settings {
		return en.p
	}
	p := m.byIdentity(e, v, client)
	*en = memoEntry{addr: client, sessions: v.Sessions, settings: v.Settings, p: p}
	return p
}

// byIdentity finds client's session and returns the policy of its
// organisation and attributes, compiling (through the engine) only what
// this socket has not seen under the current settings snapshot.
func (m *policyMemo) byIdentity(e *policy.Engine, v *policy.View, client netip.Addr) *policy.Policy {
	if v.Sessions == nil {
		p, _, _ := e.PolicyFor(v, client)
		return p
	}
	if m.byDocs == nil || m.settings != v.Settings || len(m.byDocs) >= memoDocsMax {
		m.byDocs = make(map[docsKey]*policy.Policy, 64)
		m.settings = v.Settings
	}
	var k docsKey
	if s, ok := v.Sessions.LookupIP(client); ok {
		id := s.Identity()
		k = docsKey{found: true, org: id.Org, attrs: id.Attributes}
	}
	if p, ok := m.byDocs[k]; ok {
		return p
	}
	p, _, _ := e.PolicyFor(v, client)
	// The index's strings are views into its memory: cloned, so that the
	// key does not keep the index's chunks alive.
	k.org, k.attrs.Username = strings.Clone(k.org), strings.Clone(k.attrs.Username)
	k.attrs.DeviceID, k.attrs.Location = strings.Clone(k.attrs.DeviceID), strings.Clone(k.attrs.Location)
	m.byDocs[k] = p
	return p
}
