package resolver

import (
	"hash/maphash"
	"net/netip"

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
type policyMemo struct {
	seed    maphash.Seed
	entries [memoSize]memoEntry
}

const memoSize = 4096

type memoEntry struct {
	addr     netip.Addr
	sessions policy.Sessions
	settings policy.Settings
	p        *policy.Policy
}

func newPolicyMemo() *policyMemo { return &policyMemo{seed: maphash.MakeSeed()} }

// policy returns the policy of client under view v.
func (m *policyMemo) policy(e *policy.Engine, v *policy.View, client netip.Addr) *policy.Policy {
	en := &m.entries[maphash.Comparable(m.seed, client)%memoSize]
	if en.p != nil && en.addr == client && en.sessions == v.Sessions && en.settings == v.Settings {
		return en.p
	}
	p, _, _ := e.PolicyFor(v, client)
	*en = memoEntry{addr: client, sessions: v.Sessions, settings: v.Settings, p: p}
	return p
}
