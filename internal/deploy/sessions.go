package deploy

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/ranges"
	"github.com/svc-pf/svc-pf/internal/session"
	"go4.org/netipx"
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
func Compute(org string, v orgstore.View) *Snapshot {
	traceIDs := make(map[netip.Prefix]string)
	for _, o := range v.Overrides {
		if o.TraceID != "" {
			traceIDs[o.CIDR] = o.TraceID
		}
	}
	rs := EffectiveRanges(v)
	sessions := make(map[string]session.Session, len(rs))
	for _, r := range rs {
		id := session.NewID(org, r.Orig, r.Attrs.Username, r.Attrs.DeviceID, r.Attrs.Location)
		s, ok := sessions[id]
		if !ok {
			s = session.Session{ID: id, Org: org, Username: r.Attrs.Username, DeviceID: r.Attrs.DeviceID,
				Location: r.Attrs.Location, TraceID: traceIDs[r.Orig]}
		}
		s.Allocations = netipx.IPRangeFrom(r.From, r.To).AppendPrefixes(s.Allocations)
		sessions[id] = s
	}
	return &Snapshot{Version: v.Version, Prefixes: v.Prefixes, Ranges: rs, Sessions: sessions}
}

// EffectiveRanges flattens one read of the store into effective ranges.
func EffectiveRanges(v orgstore.View) []ranges.Range {
	overrides := make([]ranges.Override, len(v.Overrides))
	for i, o := range v.Overrides {
		overrides[i] = ranges.Override{CIDR: o.CIDR, Attrs: ranges.Attributes{Username: o.Username, DeviceID: o.DeviceID, Location: o.Location}}
	}
	return ranges.Effective(v.Prefixes, overrides)
}

// diffSessions lists what must change in the IP Mapper to go from what it
// holds (have, plus the ids in maybe that a failed publish may have set) to
// want. A session whose only change is its trace_id is not resent: trace_id
// is observational and never triggers a diff.
func diffSessions(have map[string]session.Session, maybe map[string]struct{}, want map[string]session.Session) (set []session.Session, clean []string) {
	for id, s := range want {
		old, ok := have[id]
		if !ok || !slices.Equal(old.Allocations, s.Allocations) {
			set = append(set, s)
		}
	}
	for id := range have {
		if _, ok := want[id]; !ok {
			clean = append(clean, id)
		}
	}
	for id := range maybe {
		_, kept := want[id]
		_, listed := have[id]
		if !kept && !listed {
			clean = append(clean, id)
		}
	}
	slices.SortFunc(set, func(a, b session.Session) int { return cmp.Compare(a.ID, b.ID) })
	slices.Sort(clean)
	return set, clean
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
	return set.Prefixes()
}

func sortedSessions(m map[string]session.Session) []session.Session {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b session.Session) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
