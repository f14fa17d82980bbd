package deploy

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"go4.org/netipx"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/ranges"
	"github.com/svc-pf/svc-pf/internal/session"
)

// Snapshot is one computed state of an organisation: what a deploy
// publishes and what GET effective-ranges shows. It is never modified once
// built, so readers share it without locks.
type Snapshot struct {
	Version  int64
	Prefixes []netip.Prefix
	Ranges   []ranges.Range
	// Sessions by id, each with its allocations. Revision is left zero: it
	// is the publisher's business, stamped on the diff.
	Sessions map[string]session.Session
}

// Compute derives the effective ranges and sessions of an organisation from
// one consistent read of the store.
//
// A session's allocations are the CIDRs it comes from, not the flattened
// ranges: every consumer of sessions (the IP Mapper, each node's subscriber
// index) resolves an address by longest-prefix match, which gives the same
// answer as the ranges for every address, as long as a bare prefix that an
// active override covers is not published (an override wins over a prefix
// whatever their lengths). Flattened allocations would explode for an
// organisation with many overrides — every gap between them splits the
// remainder of its prefix into up to 2×32 (IPv4) or 2×128 (IPv6) CIDRs, all
// in one session — and every new override would rewrite its parent.
func Compute(org string, v orgstore.View) *Snapshot {
	cov := ranges.NewCoverage(v.Prefixes)
	sessions := make(map[string]session.Session, len(v.Overrides)+len(v.Prefixes))
	var covered netipx.IPSetBuilder
	for _, o := range v.Overrides {
		if !cov.Covers(o.CIDR) {
			continue // outside-prefixes: held back
		}
		covered.AddPrefix(o.CIDR)
		id := session.NewID(identity.Identity{Org: org, Attributes: o.Attributes}, o.CIDR)
		sessions[id] = session.Session{ID: id, Org: org, Allocations: []netip.Prefix{allocation(o.CIDR)},
			Attributes: o.Attributes, TraceID: o.TraceID}
	}
	overridden, _ := covered.IPSet()
	for _, p := range v.Prefixes {
		if overridden.ContainsPrefix(p) {
			continue // every address resolves to an override
		}
		id := session.NewID(identity.Identity{Org: org}, p)
		sessions[id] = session.Session{ID: id, Org: org, Allocations: []netip.Prefix{allocation(p)}}
	}
	return &Snapshot{Version: v.Version, Prefixes: v.Prefixes, Ranges: EffectiveRanges(v), Sessions: sessions}
}

// EffectiveRanges flattens one read of the store into effective ranges.
func EffectiveRanges(v orgstore.View) []ranges.Range {
	overrides := make([]ranges.Override, len(v.Overrides))
	for i, o := range v.Overrides {
		overrides[i] = ranges.Override{CIDR: o.CIDR, Attrs: o.Attributes}
	}
	return ranges.Effective(v.Prefixes, overrides)
}

// diffSessions lists what must change in the IP Mapper to go from what it
// holds (have, plus the ids in maybe that a failed publish may have set) to
// want. Sessions are compared by id alone: the id covers the source CIDR
// (the allocation) and the attributes, and deliberately not trace_id, so a
// trace_id-only change is not resent.
func diffSessions(have, maybe map[string]struct{}, want map[string]session.Session) (set []session.Session, clean []string) {
	for id, s := range want {
		if _, ok := have[id]; !ok {
			set = append(set, s)
		}
	}
	for _, m := range []map[string]struct{}{have, maybe} {
		for id := range m {
			if _, ok := want[id]; !ok {
				clean = append(clean, id)
			}
		}
	}
	slices.SortFunc(set, func(a, b session.Session) int { return cmp.Compare(a.ID, b.ID) })
	slices.Sort(clean)
	return set, slices.Compact(clean)
}

// releasedSubnets is the address space the removed prefixes leave: what was
// deployed before minus what the current prefixes still cover. No current
// session has an allocation in it, so cleaning inside it never touches them.
func releasedSubnets(before, now []netip.Prefix) []netip.Prefix {
	var b netipx.IPSetBuilder
	for _, p := range before {
		b.AddPrefix(p)
	}
	for _, p := range now {
		b.RemovePrefix(p)
	}
	set, _ := b.IPSet()
	out := set.Prefixes()
	for i, p := range out {
		out[i] = allocation(p)
	}
	return out
}

// allocation is p as the IP Mapper and every node hold it: an IPv4-mapped
// IPv6 prefix (::ffff:a.b.c.d/n) in its IPv4 form, which is how lookups see
// those addresses. The API refuses such CIDRs (cidr.Parse); the store does
// not, and a value that reached it some other way must still deploy rather
// than be refused by the IP Mapper on every retry. The session id keeps the
// CIDR as stored. A masked IPv4-mapped prefix always has n ≥ 96.
func allocation(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

func sortedSessions(m map[string]session.Session) []session.Session {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b session.Session) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
