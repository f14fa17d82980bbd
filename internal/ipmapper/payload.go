package ipmapper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/svc-pf/svc-pf/internal/session"
)

// Service identity and subjects. The endpoints live in the micro group
// "ipmapper", so each command's subject is "ipmapper.<command>".
const (
	ServiceName    = "ipmapper"
	ServiceVersion = "1.0.0"
	groupName      = "ipmapper"

	CmdSetSession      = "set-session"
	CmdSetSessionBatch = "set-session-batch"
	CmdGetSessions     = "get-sessions"
	CmdCleanSessions   = "clean-sessions"

	SubjectSetSession      = groupName + "." + CmdSetSession
	SubjectSetSessionBatch = groupName + "." + CmdSetSessionBatch
	SubjectGetSessions     = groupName + "." + CmdGetSessions
	SubjectCleanSessions   = groupName + "." + CmdCleanSessions
)

// maxReplyItemErrors bounds the item errors one batch reply lists, so the
// reply always fits in a NATS message however small the items were; Failed
// still counts all of them.
const maxReplyItemErrors = 1000

// SetSessionRequest is the body of set-session.
type SetSessionRequest struct {
	Session session.Session `json:"session"`
	// TTLSeconds > 0 makes the session expire that long after this update;
	// 0 (or absent) keeps the stored expiry (none for a new session);
	// -1 removes the expiry. Other negative values are refused.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// SetSessionReply answers set-session with the session as stored.
type SetSessionReply struct {
	Session session.Session `json:"session"`
}

// SetSessionBatchRequest is the body of set-session-batch. TTLSeconds applies
// to every item, with set-session's meaning.
type SetSessionBatchRequest struct {
	Sessions   []session.Session `json:"sessions"`
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
}

// ItemError reports one refused item of a batch by its index in the request.
type ItemError struct {
	Index int    `json:"index"`
	ID    string `json:"id,omitempty"`
	Error string `json:"error"`
}

// SetSessionBatchReply answers set-session-batch. Stored counts the items
// accepted (including those that changed nothing); Failed counts the refused
// ones, of which Errors lists the first maxReplyItemErrors in index order.
type SetSessionBatchReply struct {
	Stored int         `json:"stored"`
	Failed int         `json:"failed"`
	Errors []ItemError `json:"errors,omitempty"`
}

// GetSessionsRequest selects sessions by exactly one of ID, IP, Org,
// Username, DeviceID. After continues a paged reply (see GetSessionsReply).
type GetSessionsRequest struct {
	ID       string `json:"id,omitempty"`
	IP       string `json:"ip,omitempty"`
	Org      string `json:"org,omitempty"`
	Username string `json:"username,omitempty"`
	DeviceID string `json:"deviceid,omitempty"`
	After    string `json:"after,omitempty"`
}

// GetSessionsReply lists the matching sessions in id order. When they do not
// fit in one NATS message, Next is set: ask again with After = Next.
type GetSessionsReply struct {
	Sessions []session.Session `json:"sessions"`
	Next     string            `json:"next,omitempty"`
}

// CleanSessionsRequest selects the sessions to remove; see cleanPlan for the
// modes. All must be set to remove every session of an organisation, so that
// a request whose selector came out empty never wipes an organisation.
type CleanSessionsRequest struct {
	Org           string         `json:"org,omitempty"`
	All           bool           `json:"all,omitempty"`
	RevisionBelow int64          `json:"revision_below,omitempty"`
	Subnets       []netip.Prefix `json:"subnets,omitempty"`
	IDs           []string       `json:"ids,omitempty"`
}

// CleanSessionsReply answers clean-sessions.
type CleanSessionsReply struct {
	Removed int `json:"removed"`
}

// ErrorReply is the body of every error reply; the same text is in the
// Nats-Service-Error header, the status code in Nats-Service-Error-Code.
type ErrorReply struct {
	Error string `json:"error"`
}

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

func decodeSetSession(data []byte) (SetSessionRequest, error) {
	var req SetSessionRequest
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
func decodeSetSessionBatch(data []byte) (SetSessionBatchRequest, error) {
	var req SetSessionBatchRequest
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
	var req GetSessionsRequest
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
			return getQuery{}, fmt.Errorf("invalid ip %q", truncate(req.IP, 64))
		}
		// Dual-stack sockets report IPv4 clients as ::ffff:a.b.c.d.
		q.ip = ip.Unmap()
	}
	q.after = req.After
	return q, nil
}

// cleanMode names a validated clean-sessions selector.
type cleanMode int

const (
	cleanByOrg cleanMode = iota + 1
	cleanByRevision
	cleanBySubnets
	cleanByIDs
)

func decodeCleanSessions(data []byte) (CleanSessionsRequest, cleanMode, error) {
	var req CleanSessionsRequest
	if err := decodeStrict(data, &req); err != nil {
		return req, 0, err
	}
	mode, err := req.mode()
	return req, mode, err
}

// mode validates the selector: exactly one of all, revision_below, subnets,
// ids; all, revision_below and subnets need org; ids may carry org.
func (r *CleanSessionsRequest) mode() (cleanMode, error) {
	switch {
	case r.RevisionBelow < 0:
		return 0, errors.New("revision_below must be positive")
	case r.IDs != nil && len(r.IDs) == 0:
		return 0, errors.New("ids is empty: nothing to clean")
	case r.Subnets != nil && len(r.Subnets) == 0:
		return 0, errors.New("subnets is empty: nothing to clean")
	}
	n := 0
	for _, set := range []bool{r.All, r.RevisionBelow > 0, len(r.Subnets) > 0, len(r.IDs) > 0} {
		if set {
			n++
		}
	}
	if n == 0 {
		return 0, errors.New(`clean-sessions needs one of "all" (with org), "revision_below" (with org), "subnets" (with org) or "ids"`)
	}
	if n > 1 {
		return 0, errors.New(`clean-sessions takes only one of "all", "revision_below", "subnets", "ids"`)
	}
	if len(r.IDs) > 0 {
		for _, id := range r.IDs {
			if !session.ValidID(id) {
				return 0, fmt.Errorf("invalid session id %q", truncate(id, 140))
			}
		}
		return cleanByIDs, nil
	}
	if r.Org == "" {
		return 0, errors.New("org is required to clean by all, revision_below or subnets")
	}
	switch {
	case r.All:
		return cleanByOrg, nil
	case r.RevisionBelow > 0:
		return cleanByRevision, nil
	}
	for i, p := range r.Subnets {
		if !p.IsValid() {
			return 0, fmt.Errorf("subnets[%d] is not a valid prefix", i)
		}
		p = p.Masked()
		// No allocation is IPv4-mapped (session.Validate), so such a
		// subnet would silently select nothing.
		if p.Addr().Is4In6() {
			return 0, fmt.Errorf("subnets[%d] %s: IPv4-mapped IPv6 subnet; use the IPv4 form", i, p)
		}
		r.Subnets[i] = p
	}
	return cleanBySubnets, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
