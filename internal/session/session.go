// Package session defines the subscriber session: the unit the write side
// (orgmanager's deploy step) publishes to the IP Mapper, the IP Mapper stores in
// the JetStream key-value bucket "sessions", and every filter node's subscriber
// index reads back. It holds only the shared shape and identity rules, no I/O.
package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// Bucket is the JetStream key-value bucket that holds every session, keyed by
// session id. The IP Mapper is its only writer; subscriber indexes watch it.
const Bucket = "sessions"

// Session maps IP allocations to a subscriber identity inside an organisation.
type Session struct {
	ID  string `json:"id"`
	Org string `json:"org"`
	// Revision is the producer's deploy revision; clean-sessions can remove
	// everything of an org below a revision after a full republish.
	Revision    int64          `json:"revision"`
	Allocations []netip.Prefix `json:"allocations"`
	// Attributes are the subscriber's within Org (JSON: username, deviceid,
	// location at the top level of the session object).
	identity.Attributes
	// TraceID is observational (an override's meta.trace_id): never part of
	// identity.
	TraceID string `json:"trace_id,omitempty"`
	// OpaqueID is a producer-chosen reference; immutable once set.
	OpaqueID string `json:"opaque_id,omitempty"`
	// Producer names the writer that owns the session: "" for the
	// orgmanager's deploys (every session written before producers
	// existed), ProducerRADIUS for RADIUS accounting. A producer's writes
	// and cleans never touch another producer's sessions.
	Producer  string    `json:"producer,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	// ExpiresAt, when set, is when the IP Mapper's sweeper removes the session.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// ProducerRADIUS owns the sessions RADIUS accounting writes.
const ProducerRADIUS = "radius"

// maxProducerLen bounds a producer name: it names a service, not data.
const maxProducerLen = 32

// ValidProducer reports whether p is a producer name: "" (the orgmanager)
// or 1 to 32 of [a-z0-9-] starting with a letter.
func ValidProducer(p string) bool {
	if len(p) > maxProducerLen {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z':
		case (c >= '0' && c <= '9' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Identity is the subscriber the session names.
func (s *Session) Identity() identity.Identity {
	return identity.Identity{Org: s.Org, Attributes: s.Attributes}
}

// NewID returns the deterministic session id for an organisation's range
// source: the subscriber (org and attributes) and the CIDR the ranges derive
// from (an override or a bare prefix). meta and trace_id are deliberately not
// part of it, so redeploys are idempotent and diffs compare ids only.
//
// The id is 32 lowercase hex digits, which is a valid JetStream KV key.
func NewID(id identity.Identity, orig netip.Prefix) string {
	h := sha256.New()
	// Length-prefixed fields: no two distinct tuples hash the same input.
	for _, s := range []string{id.Org, orig.Masked().String(), id.Username, id.DeviceID, id.Location} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

// ValidID reports whether id is usable as a session id (and so as a KV key):
// 1..128 characters of [A-Za-z0-9_=-]. Dots and slashes are excluded because
// NATS treats them as subject token separators.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '=':
		default:
			return false
		}
	}
	return true
}

// Validate checks the fields every producer must fill. The IP Mapper applies
// it to every session it stores or reloads, and every node to every value it
// reads from the bucket, so both sides hold the same set.
func (s *Session) Validate() error {
	switch {
	case !ValidID(s.ID):
		return fmt.Errorf("invalid session id %q", s.ID)
	case s.Org == "":
		return errors.New("session org is required")
	case !ValidProducer(s.Producer):
		return fmt.Errorf("invalid producer %q: use 1 to 32 of a-z, 0-9 and -, starting with a letter", s.Producer)
	}
	for _, p := range s.Allocations {
		if !p.IsValid() {
			return errors.New("invalid allocation")
		}
		if p != p.Masked() {
			return fmt.Errorf("allocation %s has host bits set", p)
		}
		// ::ffff:a.b.c.d/n names IPv4 addresses in IPv6 form. Readers
		// disagree on it (lookups unmap the address, a prefix set or
		// contains test does not), so only the IPv4 form is stored.
		if p.Addr().Is4In6() {
			return fmt.Errorf("allocation %s: IPv4-mapped IPv6 allocation; use the IPv4 form", p)
		}
	}
	return nil
}

// Decode parses the value stored under key in the sessions bucket: the one
// rule, shared by the IP Mapper (its own reload and every command) and every
// node's read model, for what counts as a session there. The session must be
// valid (Validate) and carry key as its ID, since deletes address it by key.
func Decode(key string, value []byte) (*Session, error) {
	var s Session
	if !decodeCanonical(value, &s) {
		s = Session{}
		if err := json.Unmarshal(value, &s); err != nil {
			return nil, fmt.Errorf("decode session: %w", err)
		}
	}
	if s.ID != key {
		return nil, fmt.Errorf("session id %q does not match its key %q", s.ID, key)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}
