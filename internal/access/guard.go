package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// Verifier turns a token string into its principal; *Tokens is one.
type Verifier interface {
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// GuardConfig configures a Guard.
type GuardConfig struct {
	// Verifier checks tokens; required unless Open.
	Verifier Verifier
	// Open (auth.mode: none) lets every request through as an admin
	// without a token. The caller logs the warning at start.
	Open bool
	// Protected reports whether a request needs a token at all; nil: every
	// request does. Status pages, /health and /metrics answer false.
	Protected func(r *http.Request) bool
	// Authorize is the listener's route rule: nil, or ErrForbidden for a
	// caller outside its reach. It sees every method, so that a refusal
	// comes before any 404 or 405 that would tell what exists. nil: every
	// verified caller may proceed.
	Authorize func(r *http.Request, p Principal) error
	// Refused, when set, learns of each request Authorize refused (the
	// audit keeps the refused writes: Auditor.Refused).
	Refused func(r *http.Request, p Principal)
	// Failures slows down the clients whose tokens fail; the zero value
	// takes FailureLimit's defaults.
	Failures FailureLimit
	// Now is the clock of the failure limit; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Guard is the HTTP middleware of the management listeners: it asks for
// `Authorization: Bearer <token>`, verifies it, applies the listener's
// route rule and puts the Principal in the request's context. It never
// logs a token, its hash or the Authorization header.
type Guard struct {
	cfg     GuardConfig
	limiter *limiter
	log     *slog.Logger
}

// openPrincipal is the caller of every request under auth.mode none.
var openPrincipal = Principal{Role: RoleAdmin, Name: "auth.mode none"}

// NewGuard returns the middleware.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	if cfg.Verifier == nil && !cfg.Open {
		return nil, errors.New("access: a Verifier is required unless the guard is open")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lim, err := newLimiter(cfg.Failures, cfg.Now)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{cfg: cfg, limiter: lim, log: log}, nil
}

// Check is the guard as a step of a router: it returns the request to
// serve, carrying the Principal, or false after answering 401, 403 or 429
// itself. A request that needs no token passes unchanged.
func (g *Guard) Check(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if g.cfg.Protected != nil && !g.cfg.Protected(r) {
		return r, true
	}
	if g.cfg.Open {
		return r.WithContext(WithPrincipal(r.Context(), openPrincipal)), true
	}
	// The client's address is parsed only when some client is being
	// counted, or this one fails: a request with a valid token while
	// nobody fails pays for neither.
	var client netip.Prefix
	keyed := false
	if g.limiter.tracking() {
		client, keyed = clientKey(r.RemoteAddr)
	}
	if keyed {
		if wait := g.limiter.blocked(client); wait > 0 {
			tooMany(w, wait, "authentications")
			return nil, false
		}
	}
	p, err := g.authenticate(r)
	if err != nil {
		if !errors.Is(err, ErrUnauthorized) {
			// The store failed: not the caller's fault, not counted.
			g.log.Error("token verification failed", "path", r.URL.Path, "err", err)
			writeError(w, http.StatusServiceUnavailable, "tokens cannot be verified right now")
			return nil, false
		}
		if !keyed {
			client, keyed = clientKey(r.RemoteAddr)
		}
		if keyed {
			g.limiter.fail(client)
		}
		g.log.Debug("authentication refused", "method", r.Method, "path", r.URL.Path, "client", r.RemoteAddr, "reason", err.Error())
		w.Header().Set("WWW-Authenticate", `Bearer realm="svc-pf"`)
		writeError(w, http.StatusUnauthorized, err.Error())
		return nil, false
	}
	if g.cfg.Authorize != nil {
		if err := g.cfg.Authorize(r, p); err != nil {
			if g.cfg.Refused != nil {
				g.cfg.Refused(r, p)
			}
			writeError(w, http.StatusForbidden, err.Error())
			return nil, false
		}
	}
	return r.WithContext(WithPrincipal(r.Context(), p)), true
}

func (g *Guard) authenticate(r *http.Request) (Principal, error) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return Principal{}, ErrUnauthorized
	}
	if len(h) > 1 {
		return Principal{}, errTwoHeaders
	}
	tok, err := BearerToken(h[0])
	if err != nil {
		return Principal{}, errNotBearer
	}
	return g.cfg.Verifier.Authenticate(r.Context(), tok)
}

var (
	errTwoHeaders = fmt.Errorf("%w: more than one Authorization header", ErrUnauthorized)
	errNotBearer  = fmt.Errorf("%w: the Authorization header must be \"Bearer <token>\"", ErrUnauthorized)
)

// Wrap is the guard around a whole handler.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r, ok := g.Check(w, r); ok {
			next.ServeHTTP(w, r)
		}
	})
}

// LimitFailures puts next, a sign-in that answers 401 to a bad token (the
// console's), under the same limit on repeated failures as the bearer
// check: a client over it gets 429 with Retry-After without next running,
// and each 401 next answers counts against the client.
func (g *Guard) LimitFailures(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		client, keyed := clientKey(r.RemoteAddr)
		if keyed {
			if wait := g.limiter.blocked(client); wait > 0 {
				tooMany(w, wait, "sign-ins")
				return
			}
		}
		sw := &statusWriter{ResponseWriter: w}
		next(sw, r)
		if keyed && sw.status == http.StatusUnauthorized {
			g.limiter.fail(client)
		}
	}
}

// tooMany answers 429 to a client over the failure limit for wait more,
// in whole seconds (rounded up) in Retry-After and in the message.
func tooMany(w http.ResponseWriter, wait time.Duration, what string) {
	secs := strconv.Itoa(int((wait + time.Second - 1) / time.Second))
	w.Header().Set("Retry-After", secs)
	writeError(w, http.StatusTooManyRequests, "too many failed "+what+" from this address; retry after "+secs+"s")
}

// writeError answers {"error": msg}, the body of every error of the
// management APIs.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}
