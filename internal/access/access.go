// Package access decides who is calling a management API and what that
// caller may do. It sits in front of every handler of the orgmanager's API,
// the console and the IP Mapper's session listing: a request's bearer token
// becomes a Principal, and the Principal's methods are the one place where
// the roles' reach is written down. The REST API and the console both ask
// them; neither keeps a copy of the rule.
package access

import (
	"errors"
	"fmt"
	"strings"
)

// Role is what a token may do.
type Role string

// The three roles. An admin reaches everything, the global settings layer
// and every organisation's tokens included; an org-admin reads and writes
// one organisation's tree (prefixes, overrides, settings, its activity and
// its own tokens); an org-viewer reads that one organisation.
const (
	RoleAdmin     Role = "admin"
	RoleOrgAdmin  Role = "org-admin"
	RoleOrgViewer Role = "org-viewer"
)

// ParseRole accepts exactly one of the three role names.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleOrgAdmin, RoleOrgViewer:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want admin, org-admin or org-viewer", s)
}

// Scoped reports whether the role is bound to one organisation.
func (r Role) Scoped() bool { return r == RoleOrgAdmin || r == RoleOrgViewer }

// The two refusals. Every caller maps them the same way: ErrUnauthorized
// (no token, or one that is malformed, unknown, expired or revoked) is 401,
// ErrForbidden (a known caller outside its reach) is 403.
var (
	ErrUnauthorized = errors.New("a valid bearer token is required")
	ErrForbidden    = errors.New("this token may not do that")
)

// Principal is the caller a token stands for.
type Principal struct {
	// TokenID identifies the token (never its secret); audit records
	// carry it.
	TokenID string
	// Name is the token's label, for people reading the audit.
	Name string
	Role Role
	// Org is the organisation a scoped role is bound to; empty for admin.
	Org string
}

// Admin reports whether the caller reaches the whole platform.
func (p Principal) Admin() bool { return p.Role == RoleAdmin }

// CanRead reports whether the caller may read organisation org. A scoped
// caller gets the same answer for every other organisation, whether it
// exists or not, so a refusal never tells it which organisations exist.
func (p Principal) CanRead(org string) bool {
	return p.Admin() || (p.Role.Scoped() && p.Org == org)
}

// CanWrite reports whether the caller may change organisation org.
func (p Principal) CanWrite(org string) bool {
	return p.Admin() || (p.Role == RoleOrgAdmin && p.Org == org)
}

// Read returns nil or ErrForbidden, for handlers that return errors.
func (p Principal) Read(org string) error {
	if p.CanRead(org) {
		return nil
	}
	return ErrForbidden
}

// Write returns nil or ErrForbidden.
func (p Principal) Write(org string) error {
	if p.CanWrite(org) {
		return nil
	}
	return ErrForbidden
}

// Platform returns nil for an admin and ErrForbidden for anyone else: the
// global settings layer, the platform-wide audit and every other
// platform-level operation.
func (p Principal) Platform() error {
	if p.Admin() {
		return nil
	}
	return ErrForbidden
}

// BearerToken extracts the token from an Authorization header value. The
// scheme is case-insensitive (RFC 7235); anything else, an empty token or
// one with spaces or control characters inside is ErrUnauthorized.
func BearerToken(header string) (string, error) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrUnauthorized
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" || len(tok) > maxTokenLen {
		return "", ErrUnauthorized
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c >= 0x7f {
			return "", ErrUnauthorized
		}
	}
	return tok, nil
}

// maxTokenLen bounds what is hashed and compared: a real token is far
// shorter, and a megabyte header must not cost a megabyte of work.
const maxTokenLen = 256
