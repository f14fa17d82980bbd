package deploy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go4.org/netipx"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/ranges"
	"github.com/svc-pf/svc-pf/internal/session"
)

// sessionDeploys is the sessions part of a deploy: it derives an
// organisation's sessions from one read of the store, diffs them against
// what the IP Mapper is known to hold, and publishes the diff.
type sessionDeploys struct {
	store          Store
	publisher      Publisher
	publishTimeout time.Duration
	metrics        *metrics
	// reach learns from every publish whether the IP Mapper answered.
	reach *reachability
	now   func() time.Time

	mu   sync.Mutex
	orgs map[string]*sessionState
}

// sessionState is what the sessions part keeps of one organisation between
// deploys. The scheduler runs one deploy of an organisation at a time, and
// the state changes only when a deploy ends, so a running deploy reads its
// copy of it without the lock.
type sessionState struct {
	deployed *deployedSnapshot
	// held names the sessions the IP Mapper was confirmed to hold for the
	// organisation after the last successful deploy; nil until the first
	// deploy since start, which then republishes in full. Ids suffice: a
	// session's allocation is its source CIDR, which is part of its id.
	held map[string]struct{}
	// unconfirmed names sessions a failed publish may have set anyway: a
	// later deploy cleans them if they are withdrawn meanwhile.
	unconfirmed map[string]struct{}
	revision    int64
}

// deployedSnapshot is what stays of a deployed snapshot: what GET
// effective-ranges shows and what the next deploy's prefix diff needs.
type deployedSnapshot struct {
	version  int64
	prefixes []netip.Prefix
	ranges   []ranges.Range
}

// deployed returns the last deployed snapshot of org since start.
func (s *sessionDeploys) deployed(org string) (deployedSnapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.orgs[org]; ok && st.deployed != nil {
		return *st.deployed, true
	}
	return deployedSnapshot{}, false
}

// deploy publishes the sessions of view, org's current state, and records
// what the IP Mapper then holds.
func (s *sessionDeploys) deploy(ctx context.Context, org string, full bool, view orgstore.View) error {
	s.mu.Lock()
	st, ok := s.orgs[org]
	if !ok {
		st = &sessionState{}
		s.orgs[org] = st
	}
	base := *st
	s.mu.Unlock()

	snap, diff, err := s.attempt(ctx, org, full, base, view)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if diff != nil && st.held != nil {
			if st.unconfirmed == nil {
				st.unconfirmed = map[string]struct{}{}
			}
			for _, ss := range diff.Set {
				st.unconfirmed[ss.ID] = struct{}{}
			}
		}
		return err
	}
	st.deployed = &deployedSnapshot{version: snap.Version, prefixes: snap.Prefixes, ranges: snap.Ranges}
	st.held = make(map[string]struct{}, len(snap.Sessions))
	for id := range snap.Sessions {
		st.held[id] = struct{}{}
	}
	st.revision = diff.Revision
	st.unconfirmed = nil
	return nil
}

// attempt computes and publishes one deploy against base. base.held is nil
// on the first deploy since start: the IP Mapper's contents are unknown, so
// everything is republished under a fresh revision and older revisions are
// cleaned, which leaves no stale and no duplicate session whatever happened
// before. On a failed publish the diff is returned with the error.
func (s *sessionDeploys) attempt(ctx context.Context, org string, full bool, base sessionState, view orgstore.View) (*Snapshot, *Diff, error) {
	snap := Compute(org, view)
	diff := Diff{Org: org, Revision: base.revision}
	if full || base.held == nil {
		var err error
		if diff.Revision, err = s.store.NextRevision(ctx, org); errors.Is(err, orgstore.ErrOrgNotFound) {
			// Deleted between the two reads; the next deploy cleans it.
			return nil, nil, err
		} else if err != nil {
			return nil, nil, fmt.Errorf("next revision of %s: %w", org, err)
		}
		diff.Set = sortedSessions(snap.Sessions)
		diff.CleanBelowRevision = diff.Revision
	} else {
		diff.Set, diff.CleanIDs = diffSessions(base.held, base.unconfirmed, snap.Sessions)
		if base.deployed != nil {
			diff.CleanSubnets = releasedSubnets(base.deployed.prefixes, snap.Prefixes)
		}
	}
	for i := range diff.Set {
		diff.Set[i].Revision = diff.Revision
	}
	if err := s.publish(ctx, diff); err != nil {
		return nil, &diff, err
	}
	return snap, &diff, nil
}

// clean removes every session of a deleted organisation and forgets it:
// were the organisation created again, its first deploy republishes in
// full and cleans older revisions.
func (s *sessionDeploys) clean(ctx context.Context, org string) error {
	if err := s.publish(ctx, Diff{Org: org, CleanOrg: true}); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.orgs, org)
	s.mu.Unlock()
	return nil
}

func (s *sessionDeploys) publish(ctx context.Context, diff Diff) error {
	if diff.Empty() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.publishTimeout)
	defer cancel()
	err := s.publisher.Publish(ctx, diff)
	s.reach.note(err, s.now())
	if err != nil {
		return fmt.Errorf("publish %s: %w", diff.Org, err)
	}
	s.metrics.sessionsSet.Add(float64(len(diff.Set)))
	s.metrics.sessionsCleaned.Add(float64(len(diff.CleanIDs)))
	return nil
}

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
