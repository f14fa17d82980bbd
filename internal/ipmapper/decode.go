package ipmapper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/session"
)

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data: a typo in a field name must not silently turn
// into "field absent", which for a merge means "keep the stored value".
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty request body")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid JSON: trailing data after the request object")
	}
	return nil
}

// validateTTL checks a ttl_seconds value.
func validateTTL(ttl int64) error {
	if ttl < -1 {
		return fmt.Errorf("ttl_seconds %d: must be positive, 0 (keep) or -1 (no expiry)", ttl)
	}
	// Bounded so now+ttl cannot overflow time.Duration (about 292 years).
	if ttl > maxTTLSeconds {
		return fmt.Errorf("ttl_seconds %d: at most %d", ttl, maxTTLSeconds)
	}
	return nil
}

// maxTTLSeconds is ten years.
const maxTTLSeconds = 10 * 366 * 24 * 3600

// validateSession checks an incoming session: session.Validate plus what
// the IP Mapper needs on top of it.
func validateSession(s *session.Session) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Revision < 0 {
		return fmt.Errorf("session %s: revision %d is negative", s.ID, s.Revision)
	}
	return nil
}

func decodeSetSession(data []byte) (wire.SetSessionRequest, error) {
	var req wire.SetSessionRequest
	if err := decodeStrict(data, &req); err != nil {
		return req, err
	}
	if err := validateTTL(req.TTLSeconds); err != nil {
		return req, err
	}
	if err := validateSession(&req.Session); err != nil {
		return req, err
	}
	return req, nil
}

// decodeSetSessionBatch checks the envelope only; items are validated one by
// one so that a bad item is reported by index and does not sink the rest.
func decodeSetSessionBatch(data []byte) (wire.SetSessionBatchRequest, error) {
	var req wire.SetSessionBatchRequest
	if err := decodeStrict(data, &req); err != nil {
		return req, err
	}
	if req.Sessions == nil {
		return req, errors.New(`"sessions" is required`)
	}
	if err := validateTTL(req.TTLSeconds); err != nil {
		return req, err
	}
	return req, nil
}

// getQuery is a decoded get-sessions request.
type getQuery struct {
	kind  string // "id", "ip", "org", "username" or "deviceid"
	value string
	ip    netip.Addr
	after string
}

func decodeGetSessions(data []byte) (getQuery, error) {
	var req wire.GetSessionsRequest
	if err := decodeStrict(data, &req); err != nil {
		return getQuery{}, err
	}
	var q getQuery
	n := 0
	for _, f := range []struct{ kind, value string }{
		{"id", req.ID}, {"ip", req.IP}, {"org", req.Org}, {"username", req.Username}, {"deviceid", req.DeviceID},
	} {
		if f.value != "" {
			n++
			q.kind, q.value = f.kind, f.value
		}
	}
	if n != 1 {
		return getQuery{}, errors.New("get-sessions needs exactly one of id, ip, org, username, deviceid")
	}
	if q.kind == "ip" {
		ip, err := netip.ParseAddr(req.IP)
		if err != nil || ip.Zone() != "" {
			return getQuery{}, fmt.Errorf("invalid ip %q", wire.Truncate(req.IP, 64))
		}
		// Dual-stack sockets report IPv4 clients as ::ffff:a.b.c.d.
		q.ip = ip.Unmap()
	}
	q.after = req.After
	return q, nil
}

func decodeCleanSessions(data []byte) (wire.CleanSessionsRequest, wire.CleanMode, error) {
	var req wire.CleanSessionsRequest
	if err := decodeStrict(data, &req); err != nil {
		return req, 0, err
	}
	mode, err := req.Mode()
	return req, mode, err
}
