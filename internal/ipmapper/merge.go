package ipmapper

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/svc-pf/svc-pf/internal/session"
)

// Merge refusals; all are the producer's fault (status 400).
var (
	ErrOtherOrg          = errors.New("session id belongs to another organisation")
	ErrOpaqueIDImmutable = errors.New("opaque_id is immutable once set")
	// ErrOtherProducer: a producer never changes nor removes another
	// producer's session (the orgmanager's deploys and RADIUS accounting
	// each own theirs).
	ErrOtherProducer = errors.New("session id belongs to another producer")
)

// producerName is how errors name a producer: "" is the orgmanager's.
func producerName(p string) string {
	if p == "" {
		return `"" (the orgmanager)`
	}
	return fmt.Sprintf("%q", p)
}

// merge applies an update to the stored session (nil when there is none) and
// returns the session to store and whether anything changed. The update
// must come from the stored session's producer and org; the producer is
// kept (it is part of the session's identity, like the org). An empty field
// of the update keeps the stored value; a non-empty allocation list replaces
// the stored one. ttl follows SetSessionRequest.TTLSeconds.
//
// When nothing but updated_at would change, merge returns the stored session
// and changed=false, so that republishing an identical session costs no KV
// write and no update on every watching node; updated_at therefore means
// "last changed", not "last sent".
func merge(stored *session.Session, in *session.Session, ttl int64, now time.Time) (out session.Session, changed bool, err error) {
	if stored != nil {
		if stored.Org != in.Org {
			return session.Session{}, false, fmt.Errorf("%w: %s is not in org %q", ErrOtherOrg, in.ID, in.Org)
		}
		if stored.Producer != in.Producer {
			return session.Session{}, false, fmt.Errorf("%w: session %s is producer %s's, not %s's",
				ErrOtherProducer, in.ID, producerName(stored.Producer), producerName(in.Producer))
		}
		if stored.OpaqueID != "" && in.OpaqueID != "" && stored.OpaqueID != in.OpaqueID {
			return session.Session{}, false, fmt.Errorf("%w: session %s has opaque_id %q", ErrOpaqueIDImmutable, in.ID, stored.OpaqueID)
		}
		out = *stored
	} else {
		out = session.Session{ID: in.ID, Org: in.Org, Producer: in.Producer}
	}
	if in.Revision != 0 {
		out.Revision = in.Revision
	}
	if len(in.Allocations) > 0 {
		out.Allocations = slices.Clone(in.Allocations)
	}
	if out.Allocations == nil {
		// Stored as [] rather than null: one shape for every reader.
		out.Allocations = []netip.Prefix{}
	}
	setIfNotEmpty(&out.Username, in.Username)
	setIfNotEmpty(&out.DeviceID, in.DeviceID)
	setIfNotEmpty(&out.Location, in.Location)
	setIfNotEmpty(&out.TraceID, in.TraceID)
	setIfNotEmpty(&out.OpaqueID, in.OpaqueID)
	switch {
	case ttl > 0:
		exp := now.Add(time.Duration(ttl) * time.Second)
		out.ExpiresAt = &exp
	case ttl < 0:
		out.ExpiresAt = nil
	}
	if stored != nil && sameContent(stored, &out) {
		return *stored, false, nil
	}
	out.UpdatedAt = now
	return out, true, nil
}

func setIfNotEmpty(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// sameContent compares everything but UpdatedAt.
func sameContent(a, b *session.Session) bool {
	if a.ID != b.ID || a.Org != b.Org || a.Producer != b.Producer || a.Revision != b.Revision ||
		a.Username != b.Username || a.DeviceID != b.DeviceID || a.Location != b.Location ||
		a.TraceID != b.TraceID || a.OpaqueID != b.OpaqueID ||
		!slices.Equal(a.Allocations, b.Allocations) {
		return false
	}
	switch {
	case a.ExpiresAt == nil && b.ExpiresAt == nil:
		return true
	case a.ExpiresAt == nil || b.ExpiresAt == nil:
		return false
	default:
		return a.ExpiresAt.Equal(*b.ExpiresAt)
	}
}
