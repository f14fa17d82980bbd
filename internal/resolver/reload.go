package resolver

import (
	"net/netip"
	"slices"
)

// What a running resolver lets a reload (SIGHUP) change without a restart.
// Each setting sits behind an atomic pointer that the query path loads once
// per query: a query sees the old value or the new one, never a mix, and
// the hot path pays one atomic load, no lock.

// SetAllowFrom replaces allow_from: the client networks served, UDP and
// TCP (a TCP connection is checked when accepted, so connections already
// open keep being served until they close). nil means the default
// (DefaultAllowFrom), as in Config; an empty non-nil list refuses every
// client. Queries already past the check are answered.
func (r *Resolver) SetAllowFrom(prefixes []netip.Prefix) {
	if prefixes == nil {
		prefixes = DefaultAllowFrom()
	}
	p := slices.Clone(prefixes)
	for i := range p {
		p[i] = p[i].Masked()
	}
	r.allowFrom.Store(&p)
}

// AllowFrom is allow_from in force.
func (r *Resolver) AllowFrom() []netip.Prefix { return slices.Clone(*r.allowFrom.Load()) }

// allowed reports whether a client may ask (allow_from).
func (r *Resolver) allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range *r.allowFrom.Load() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
