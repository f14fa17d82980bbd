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

// AuditQuery selects audit records, newest first.
type AuditQuery struct {
	Org   string    // empty: every organisation (admin only)
	Since time.Time // zero: from the beginning
	Limit int
}

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
