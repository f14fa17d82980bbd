package ipmapper

import (
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
