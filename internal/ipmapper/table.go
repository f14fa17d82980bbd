package ipmapper

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// current returns the live stored session with id, or nil; an expired one
// counts as absent even before the sweeper removes it.
func current(ix *sessionindex.Index, id string, now time.Time) *session.Session {
	sess := indexGet(ix, id)
	if sess == nil || expired(sess, now) {
		return nil
	}
	return sess
}

// expired reports whether s has an expiry at or before now. An expired
// session is treated as absent before the sweeper has removed it.
func expired(s *session.Session, now time.Time) bool {
	return s.ExpiresAt != nil && !s.ExpiresAt.After(now)
}

// entryExpired is expired for a session still in the index.
func entryExpired(e sessionindex.Entry, now time.Time) bool {
	t, ok := e.ExpiresAt()
	return ok && !t.After(now)
}

// indexGet returns a copy of the stored session with id, or nil: merges
// build the new session from it.
func indexGet(ix *sessionindex.Index, id string) *session.Session {
	e, ok := ix.Get(id)
	if !ok {
		return nil
	}
	return e.Session()
}

// lookupLive is LookupIP over the unexpired sessions. An expired session
// the sweeper has not removed yet must not hide the next one that covers a:
// a less specific allocation, or an older holder of the same prefix. Each
// expired winner is dropped from a private copy of the snapshot (Apply
// leaves ix as it is and costs in proportion to the change), and the
// lookup is asked again; with no expired winner it is LookupIP alone.
func lookupLive(ix *sessionindex.Index, a netip.Addr, now time.Time) (sessionindex.Entry, bool) {
	for {
		e, ok := ix.LookupIP(a)
		if !ok || !entryExpired(e, now) {
			return e, ok
		}
		// Terminates: every round removes one session from the copy.
		ix = ix.Apply(nil, []string{e.ID()})
	}
}

// commit publishes a new index snapshot. Called with mu held, after the KV
// acknowledged the writes.
func (s *Service) commit(upserts []*session.Session, deletes []string) {
	if len(upserts) == 0 && len(deletes) == 0 {
		return
	}
	s.idx.Store(s.idx.Load().Apply(upserts, deletes))
	for _, u := range upserts {
		if u.ExpiresAt != nil {
			s.expiring[u.ID] = *u.ExpiresAt
		} else {
			delete(s.expiring, u.ID)
		}
	}
	for _, id := range deletes {
		delete(s.expiring, id)
	}
}

// remove deletes ids from the bucket and then from the table, keeping the
// two in step: an id whose delete was not acknowledged stays in both. It
// returns the removed ids and the first write error. Called with mu held.
func (s *Service) remove(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	errs := s.store.deleteKeys(ctx, ids)
	removed := make([]string, 0, len(ids))
	var failed []string
	var first error
	for i, err := range errs {
		if err != nil {
			s.metrics.kvWriteErrors.Inc()
			failed = append(failed, ids[i])
			if first == nil {
				first = fmt.Errorf("delete session %s: %w", ids[i], err)
			}
			continue
		}
		removed = append(removed, ids[i])
	}
	s.commit(nil, removed)
	if len(failed) > 0 {
		s.reconcile(failed)
	}
	return removed, first
}
