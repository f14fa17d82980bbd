package access

import (
	"context"
	"time"
)

// Token is a stored token as it may be shown: never its secret, which is
// known only to whoever received it from Create.
type Token struct {
	ID        string
	Name      string
	Role      Role
	Org       string    // empty for admin
	CreatedAt time.Time // UTC
	ExpiresAt time.Time // zero: never
	RevokedAt time.Time // zero: not revoked
}

// NewToken is what a caller asks Create for.
type NewToken struct {
	Role Role
	Org  string // required for the scoped roles, empty for admin
	Name string
	// Expires is how long the token lives; 0 is forever.
	Expires time.Duration
}

// AuditRecord is one write through a management API, kept in the
// database: who (the token, never its secret), what (method and path),
// on which organisation and to which version, and how it ended.
type AuditRecord struct {
	// ID is assigned by the store when the record is appended (ignored
	// there); records read back carry it, and AuditQuery.Before takes it
	// as the cursor of the next page.
	ID         int64
	Time       time.Time // UTC
	TokenID    string
	TokenName  string
	Role       Role
	Method     string
	Path       string
	Org        string // empty for platform-level writes
	OrgVersion int64  // the organisation's version after the write; 0 when none
	RequestID  string
	Status     int
}

// AuditQuery selects audit records, newest first (by time, then by ID).
type AuditQuery struct {
	Org   string    // empty: every organisation (admin only)
	Since time.Time // zero: from the beginning
	Limit int
	// Before, when not 0, is the ID of the last record of the previous
	// page: only records older than it are returned.
	Before int64
}

// AuditUnauthenticated is the role an audit record carries when the write
// reached the API without a verified caller (auth.mode none).
const AuditUnauthenticated Role = "unauthenticated"

type principalKey struct{}

// WithPrincipal returns ctx carrying p; the middleware calls it once the
// token is verified, and handlers read it back with FromContext.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller the middleware verified. ok is false when
// no middleware ran: handlers treat that as ErrUnauthorized, never as an
// admin.
func FromContext(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}
