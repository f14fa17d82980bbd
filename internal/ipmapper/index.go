package ipmapper

import (
	"net/netip"
	"time"

	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// indexGet returns a copy of the stored session with id, or nil: merges
// build the new session from it.
func indexGet(ix *sessionindex.Index, id string) *session.Session {
	e, ok := ix.Get(id)
	if !ok {
		return nil
	}
	return e.Session()
}

// entryExpired is expired for a session still in the index.
func entryExpired(e sessionindex.Entry, now time.Time) bool {
	t, ok := e.ExpiresAt()
	return ok && !t.After(now)
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
