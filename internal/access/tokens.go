package access

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// ErrTokenNotFound: no token has that id (or, for a scoped caller, none of
// its organisation has). The REST API answers 404.
var ErrTokenNotFound = errors.New("token not found")

// ErrInvalid wraps every refusal of a NewToken (unknown role, an org where
// none belongs, a negative expiry, an unprintable name): HTTP 400.
var ErrInvalid = errors.New("invalid token request")

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, a ...any) error { return &invalidError{msg: fmt.Sprintf(format, a...)} }

// StoredToken is a token's row: what may be shown, and the hash of its
// secret.
type StoredToken struct {
	Token
	Hash Hash
}

// Store is what Tokens needs from the database; orgstore implements it on
// the orgmanager's database, in the same schema as the organisations.
type Store interface {
	InsertToken(ctx context.Context, t StoredToken) error
	// TokenByID returns ErrTokenNotFound for an unknown id.
	TokenByID(ctx context.Context, id string) (StoredToken, error)
	// ListTokens lists the tokens of org, or every token when org is "",
	// in creation order.
	ListTokens(ctx context.Context, org string) ([]Token, error)
	// RevokeToken marks the token revoked at at (unless it already is);
	// ErrTokenNotFound for an unknown id.
	RevokeToken(ctx context.Context, id string, at time.Time) error
	// TokenChanges is a counter that every insert and revocation bumps in
	// the same transaction: the cheap question "did anything change?" that
	// bounds how long another process's revocation takes to apply here.
	TokenChanges(ctx context.Context) (int64, error)
	// HasTokens reports whether any token row exists, revoked ones included.
	HasTokens(ctx context.Context) (bool, error)
}

// Config configures Tokens.
type Config struct {
	Store Store
	// Now is the clock for creation and expiry; nil means time.Now.
	Now func() time.Time
	// RecheckInterval bounds how long a token revoked by another process
	// (the CLI on the database, another orgmanager) keeps working here:
	// at most this long plus one database round trip. Default 2s.
	RecheckInterval time.Duration
	Logger          *slog.Logger
}

// DefaultRecheckInterval is Config.RecheckInterval's default.
const DefaultRecheckInterval = 2 * time.Second

// Tokens creates, lists, revokes and verifies tokens. Verification runs from
// memory: a token once read from the store is kept (id → hash, principal,
// expiry, revocation), so a request costs a hash and a map lookup, not a
// query. A revocation through this Tokens applies to the next request; one
// made elsewhere is seen within RecheckInterval (see Authenticate).
type Tokens struct {
	store    Store
	now      func() time.Time
	interval time.Duration
	log      *slog.Logger

	mu      sync.RWMutex
	entries map[string]entry
	// gen is bumped whenever the cache is cleared, so that a lookup that
	// read the store before the clear does not put back what it read.
	gen uint64

	// checkedAt is when the change counter was last read (UnixNano);
	// checking guards the one request that reads it.
	checkedAt atomic.Int64
	checking  sync.Mutex
	changes   atomic.Int64
}

type entry struct {
	hash      Hash
	principal Principal
	expires   time.Time // zero: never
	revoked   bool
}

// New returns Tokens over cfg.Store.
func New(cfg Config) (*Tokens, error) {
	if cfg.Store == nil {
		return nil, errors.New("access: Store is required")
	}
	if cfg.RecheckInterval < 0 {
		return nil, errors.New("access: RecheckInterval must not be negative")
	}
	t := &Tokens{store: cfg.Store, now: cfg.Now, interval: cfg.RecheckInterval, log: cfg.Logger,
		entries: map[string]entry{}}
	if t.now == nil {
		t.now = time.Now
	}
	if t.interval == 0 {
		t.interval = DefaultRecheckInterval
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.changes.Store(-1) // the first check clears nothing but records the counter
	return t, nil
}

// maxNameLen bounds a token's label.
const maxNameLen = 128

// Create makes a token and returns it with its secret, which is never
// shown again. Only an admin creates admin tokens; an org-admin creates
// tokens of its own organisation (org-admin or org-viewer); an org-viewer
// creates none.
func (t *Tokens) Create(ctx context.Context, by Principal, nt NewToken) (Token, string, error) {
	role, err := ParseRole(string(nt.Role))
	if err != nil {
		return Token{}, "", &invalidError{msg: err.Error()}
	}
	if role == RoleAdmin {
		if nt.Org != "" {
			return Token{}, "", invalidf("an admin token has no org")
		}
		if err := by.Platform(); err != nil {
			return Token{}, "", err
		}
	} else {
		if nt.Org == "" {
			return Token{}, "", invalidf("a %s token needs an org", role)
		}
		if err := identity.ValidateOrg(nt.Org); err != nil {
			return Token{}, "", &invalidError{msg: "org: " + err.Error()}
		}
		if err := by.Write(nt.Org); err != nil {
			return Token{}, "", err
		}
	}
	if nt.Expires < 0 {
		return Token{}, "", invalidf("expires must not be negative")
	}
	if err := checkName(nt.Name); err != nil {
		return Token{}, "", err
	}
	id, secret, tok := generate()
	now := t.now().UTC().Truncate(time.Microsecond)
	st := StoredToken{Token: Token{ID: id, Name: nt.Name, Role: role, Org: nt.Org, CreatedAt: now}, Hash: HashSecret(secret)}
	if nt.Expires > 0 {
		st.ExpiresAt = now.Add(nt.Expires)
	}
	if err := t.store.InsertToken(ctx, st); err != nil {
		return Token{}, "", err
	}
	t.put(st, t.generation())
	return st.Token, tok, nil
}

func checkName(name string) error {
	if len(name) > maxNameLen {
		return invalidf("name is longer than %d bytes", maxNameLen)
	}
	if !utf8.ValidString(name) {
		return invalidf("name is not valid UTF-8")
	}
	for _, r := range name {
		if r < ' ' || r == 0x7f {
			return invalidf("name contains a control character")
		}
	}
	return nil
}

// List returns the tokens the caller manages, without secrets: an admin
// every token, an org-admin its organisation's. An org-viewer manages none.
func (t *Tokens) List(ctx context.Context, by Principal) ([]Token, error) {
	switch {
	case by.Admin():
		return t.store.ListTokens(ctx, "")
	case by.Role == RoleOrgAdmin && by.Org != "":
		return t.store.ListTokens(ctx, by.Org)
	}
	return nil, ErrForbidden
}

// Revoke revokes the token id; revoking a revoked token succeeds again. An
// org-admin revokes tokens of its own organisation only, and for any
// other id gets ErrTokenNotFound, as for one that does not exist: a token
// id of another organisation is never confirmed.
func (t *Tokens) Revoke(ctx context.Context, by Principal, id string) error {
	if !by.Admin() && by.Role != RoleOrgAdmin {
		return ErrForbidden
	}
	if !ValidID(id) {
		return ErrTokenNotFound
	}
	st, err := t.store.TokenByID(ctx, id)
	if err != nil {
		return err
	}
	if !by.Admin() && (st.Org == "" || !by.CanWrite(st.Org)) {
		return ErrTokenNotFound
	}
	if err := t.store.RevokeToken(ctx, id, t.now()); err != nil {
		return err
	}
	// At once in this process: the next request with it is refused. The
	// generation moves too, so that a lookup that read the row before the
	// revocation does not cache it afterwards.
	t.mu.Lock()
	if e, ok := t.entries[id]; ok {
		e.revoked = true
		t.entries[id] = e
	}
	t.gen++
	t.mu.Unlock()
	return nil
}

// Authenticate returns the principal of a token string, or an error
// wrapping ErrUnauthorized when it is malformed, unknown, expired or
// revoked (the error's text says which, and never contains the token).
func (t *Tokens) Authenticate(ctx context.Context, tok string) (Principal, error) {
	id, secret, err := ParseToken(tok)
	if err != nil {
		return Principal{}, errMalformed
	}
	now := t.now()
	t.recheck(ctx, now)
	t.mu.RLock()
	e, ok := t.entries[id]
	gen := t.gen
	t.mu.RUnlock()
	if !ok {
		st, err := t.store.TokenByID(ctx, id)
		if errors.Is(err, ErrTokenNotFound) {
			return Principal{}, errUnknown
		}
		if err != nil {
			return Principal{}, err
		}
		e = t.put(st, gen)
	}
	h := HashSecret(secret)
	if subtle.ConstantTimeCompare(h[:], e.hash[:]) != 1 {
		return Principal{}, errUnknown
	}
	if e.revoked {
		return Principal{}, errRevoked
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		return Principal{}, errExpired
	}
	return e.principal, nil
}

// The reasons of a 401, all ErrUnauthorized. Unknown covers both an id
// nobody has and a wrong secret, so a guess learns nothing; expired and
// revoked are said only to whoever holds the secret.
var (
	errMalformed = fmt.Errorf("%w: the token is not an svc-pf token (svcpf_<id>_<secret>)", ErrUnauthorized)
	errUnknown   = fmt.Errorf("%w: unknown token", ErrUnauthorized)
	errExpired   = fmt.Errorf("%w: the token has expired", ErrUnauthorized)
	errRevoked   = fmt.Errorf("%w: the token has been revoked", ErrUnauthorized)
)

func (t *Tokens) generation() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.gen
}

// put caches st unless the cache was cleared since gen was read.
func (t *Tokens) put(st StoredToken, gen uint64) entry {
	e := entry{hash: st.Hash, expires: st.ExpiresAt, revoked: !st.RevokedAt.IsZero(),
		principal: Principal{TokenID: st.ID, Name: st.Name, Role: st.Role, Org: st.Org}}
	t.mu.Lock()
	if t.gen == gen {
		t.entries[st.ID] = e
	}
	t.mu.Unlock()
	return e
}

// recheck reads the store's change counter once per interval, and clears
// the cache when it moved: the next request of each token reads its row
// again, revocations from elsewhere included. One request at a time pays
// the query; the others meanwhile go on with the cache, so a revocation
// made elsewhere applies at most RecheckInterval plus one database round
// trip after it committed. A failed read keeps the cache and is retried
// at the next interval.
func (t *Tokens) recheck(ctx context.Context, now time.Time) {
	last := t.checkedAt.Load()
	if now.UnixNano()-last < int64(t.interval) || !t.checking.TryLock() {
		return
	}
	defer t.checking.Unlock()
	if t.checkedAt.Load() != last {
		return // another request just did
	}
	n, err := t.store.TokenChanges(ctx)
	if err != nil {
		t.log.Warn("cannot read the token change counter; verifying from memory", "err", err)
		t.checkedAt.Store(now.UnixNano())
		return
	}
	if n != t.changes.Load() {
		t.mu.Lock()
		clear(t.entries)
		t.gen++
		t.mu.Unlock()
		t.changes.Store(n)
	}
	t.checkedAt.Store(now.UnixNano())
}

// Bootstrap creates an admin token when the store has none at all (revoked
// ones count: an operator who revoked every token did so on purpose) and
// returns its string; "" when tokens exist.
func (t *Tokens) Bootstrap(ctx context.Context) (string, error) {
	has, err := t.store.HasTokens(ctx)
	if err != nil || has {
		return "", err
	}
	_, tok, err := t.Create(ctx, Principal{Role: RoleAdmin, Name: "bootstrap"}, NewToken{Role: RoleAdmin, Name: "bootstrap"})
	return tok, err
}

// Ensure makes tok (a token string in the svc-pf format, chosen outside:
// SVCPF_ADMIN_TOKEN) exist as an admin token named name. It refuses a tok
// whose id exists with another secret or role, or revoked or expired:
// silently replacing it would undo an operator's revocation.
func (t *Tokens) Ensure(ctx context.Context, tok, name string) error {
	id, secret, err := ParseToken(tok)
	if err != nil {
		return fmt.Errorf("not an svc-pf token: want svcpf_<16 hex digits>_<64 hex digits>, e.g. from `svc-pf token create`")
	}
	st, err := t.store.TokenByID(ctx, id)
	switch {
	case errors.Is(err, ErrTokenNotFound):
		now := t.now().UTC().Truncate(time.Microsecond)
		st = StoredToken{Token: Token{ID: id, Name: name, Role: RoleAdmin, CreatedAt: now}, Hash: HashSecret(secret)}
		if err := t.store.InsertToken(ctx, st); err != nil {
			return err
		}
		t.put(st, t.generation())
		return nil
	case err != nil:
		return err
	}
	h := HashSecret(secret)
	switch {
	case subtle.ConstantTimeCompare(h[:], st.Hash[:]) != 1:
		return fmt.Errorf("token %s exists with another secret", id)
	case st.Role != RoleAdmin:
		return fmt.Errorf("token %s exists with role %s, not admin", id, st.Role)
	case !st.RevokedAt.IsZero():
		return fmt.Errorf("token %s has been revoked", id)
	case !st.ExpiresAt.IsZero() && !t.now().Before(st.ExpiresAt):
		return fmt.Errorf("token %s has expired", id)
	}
	return nil
}
