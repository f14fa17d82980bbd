// Package wire holds the IP Mapper's NATS protocol: the micro service's
// name, subjects and the JSON bodies of its four commands; and the body of
// its HTTP GET /sessions (SessionsReply), which `svc-pf ipmapper sessions`
// reads. Both sides
// import it — the server (internal/ipmapper) and the orgmanager's client
// and deploy publisher (internal/ipmapper/mapperclient) — and it imports
// nothing of either, so the server does not depend on the write side.
package wire

import (
	"errors"
	"fmt"
	"net/netip"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/session"
)

// Service identity and subjects. The endpoints of the IP Mapper of bucket
// B live in the micro group "ipmapper.B" (Group), so each command's subject
// is "ipmapper.B.<command>" (Subject): an orgmanager reaches exactly the IP
// Mapper of the bucket its nodes follow, never another bucket's on the same
// NATS. Version 2 is the first with the bucket in the subjects; a version 1
// IP Mapper (fixed "ipmapper.<command>" subjects, no lock) is a conflict
// the IP Mapper refuses to start beside.
const (
	ServiceName    = "ipmapper"
	ServiceVersion = "2.0.0"
	GroupPrefix    = "ipmapper"

	CmdSetSession      = "set-session"
	CmdSetSessionBatch = "set-session-batch"
	CmdGetSessions     = "get-sessions"
	CmdCleanSessions   = "clean-sessions"

	// The subjects of the default bucket (session.Bucket).
	SubjectSetSession      = GroupPrefix + "." + session.Bucket + "." + CmdSetSession
	SubjectSetSessionBatch = GroupPrefix + "." + session.Bucket + "." + CmdSetSessionBatch
	SubjectGetSessions     = GroupPrefix + "." + session.Bucket + "." + CmdGetSessions
	SubjectCleanSessions   = GroupPrefix + "." + session.Bucket + "." + CmdCleanSessions
)

// Keys of the micro service's metadata ($SRV.INFO/PING.ipmapper): which
// bucket an instance serves and which lock it holds, so that an operator
// (and an IP Mapper checking for conflicts) can tell instances apart.
const (
	MetadataBucket     = "bucket"
	MetadataLockBucket = "lock_bucket"
	MetadataInstance   = "instance"
)

// HeaderProbe marks a request as the IP Mapper's self-probe: any endpoint
// answers it at once with an empty body, without reading the body, touching
// the table or counting it as a request. The active IP Mapper sends it to
// its own endpoints through the queue groups its clients use, to find out
// whether the service answers them (docs/ipmapper.md, "Health").
const HeaderProbe = "Svcpf-Probe"

// Commands lists the four commands, the micro service's endpoints.
func Commands() []string {
	return []string{CmdSetSession, CmdSetSessionBatch, CmdGetSessions, CmdCleanSessions}
}

// Group is the micro group of the IP Mapper of bucket.
func Group(bucket string) string { return GroupPrefix + "." + bucket }

// Subject is the subject of cmd at the IP Mapper of bucket.
func Subject(bucket, cmd string) string { return Group(bucket) + "." + cmd }

// maxBucketLen bounds a bucket name: it is a KV bucket (stream "KV_<name>")
// and a subject token, and a name this long is a typo, not a design.
const maxBucketLen = 64

// ValidBucket checks a JetStream key-value bucket name: 1 to 64 of
// [A-Za-z0-9_-], the charset nats.go accepts for a bucket. The name is also
// a token of the IP Mapper's subjects, where '.', '*', '>' or a space would
// change what the subject means; the charset excludes them all.
func ValidBucket(name string) error {
	if name == "" {
		return errors.New("bucket name is empty")
	}
	if len(name) > maxBucketLen {
		return fmt.Errorf("bucket name %q is longer than %d characters", Truncate(name, maxBucketLen), maxBucketLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("bucket name %q: character %q at %d is not allowed (use A-Z, a-z, 0-9, _ and -)", Truncate(name, maxBucketLen), rune(c), i)
		}
	}
	return nil
}

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
// ones, of which Errors lists the first in index order: the IP Mapper bounds
// the list so that the reply always fits in one NATS message.
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

// SessionsReply is the body of the IP Mapper's HTTP GET /sessions (the
// operator's read-only view of its table, docs/ipmapper.md).
type SessionsReply struct {
	Sessions []session.Session `json:"sessions"`
	// Count is len(Sessions); Total counts every match (after `after`).
	Count int `json:"count"`
	Total int `json:"total"`
	Limit int `json:"limit"`
	// Next, when set, is the `after` of the next page.
	Next string `json:"next,omitempty"`
}

// CleanSessionsRequest selects the sessions to remove; see Mode for the
// selectors. All must be set to remove every session of an organisation, so
// that a request whose selector came out empty never wipes an organisation.
type CleanSessionsRequest struct {
	Org           string         `json:"org,omitempty"`
	All           bool           `json:"all,omitempty"`
	RevisionBelow int64          `json:"revision_below,omitempty"`
	Subnets       []netip.Prefix `json:"subnets,omitempty"`
	IDs           []string       `json:"ids,omitempty"`
	// Producer limits the clean to that producer's sessions ("" is the
	// orgmanager's); see session.Session.Producer.
	Producer string `json:"producer,omitempty"`
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

// CleanMode names the selector of a valid CleanSessionsRequest.
type CleanMode int

const (
	CleanByOrg CleanMode = iota + 1
	CleanByRevision
	CleanBySubnets
	CleanByIDs
)

// Mode validates the selector: exactly one of All, RevisionBelow, Subnets,
// IDs; All, RevisionBelow and Subnets need Org; IDs may carry it. It masks
// Subnets in place. Both sides apply it: the Client before it splits a
// request (so that splitting never turns an invalid request into valid
// pieces), the IP Mapper on every request it receives.
func (r *CleanSessionsRequest) Mode() (CleanMode, error) {
	switch {
	case r.RevisionBelow < 0:
		return 0, errors.New("revision_below must be positive")
	case r.IDs != nil && len(r.IDs) == 0:
		return 0, errors.New("ids is empty: nothing to clean")
	case r.Subnets != nil && len(r.Subnets) == 0:
		return 0, errors.New("subnets is empty: nothing to clean")
	}
	if !session.ValidProducer(r.Producer) {
		return 0, fmt.Errorf("invalid producer %q", Truncate(r.Producer, 40))
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
				return 0, fmt.Errorf("invalid session id %q", Truncate(id, 140))
			}
		}
		return CleanByIDs, nil
	}
	if r.Org == "" {
		return 0, errors.New("org is required to clean by all, revision_below or subnets")
	}
	switch {
	case r.All:
		return CleanByOrg, nil
	case r.RevisionBelow > 0:
		return CleanByRevision, nil
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
	return CleanBySubnets, nil
}

// Truncate bounds a caller's string quoted in an error, which may be a
// header value and is always a log line. It cuts at a rune boundary, so a
// valid string stays valid UTF-8.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
