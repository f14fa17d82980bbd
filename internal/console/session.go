package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/httpapi"
)

// Cookie names. The session cookie carries a random id only; the token
// stays on the server.
const (
	sessionCookie = "svcpf_session"
	// signinCookie carries the sign-in form's CSRF value (the form has no
	// session yet): the POST must bring the same value in the cookie and
	// in the form.
	signinCookie = "svcpf_signin"
	csrfField    = "csrf"
)

// signedIn is one sign-in: the token's secret (kept in memory only, to ask
// the authenticator again on every request), the CSRF value of its forms
// and when it ends.
type signedIn struct {
	secret  string
	tokenID string
	csrf    string
	expires time.Time
}

// sessionStore holds the signed-in sessions by id. Bounded: past max, the
// session closest to its end goes.
type sessionStore struct {
	mu    sync.Mutex
	byID  map[string]*signedIn
	ttl   time.Duration
	max   int
	clock func() time.Time
}

func newSessionStore(ttl time.Duration, max int, clock func() time.Time) *sessionStore {
	return &sessionStore{byID: map[string]*signedIn{}, ttl: ttl, max: max, clock: clock}
}

// randomID is 256 bits, base64url: a session id, a CSRF value.
func randomID() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (s *sessionStore) create(secret, tokenID string) (string, *signedIn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	if len(s.byID) >= s.max {
		s.sweepLocked(now)
	}
	for len(s.byID) >= s.max {
		var oldest string
		var at time.Time
		for id, si := range s.byID {
			if oldest == "" || si.expires.Before(at) {
				oldest, at = id, si.expires
			}
		}
		delete(s.byID, oldest)
	}
	id := randomID()
	si := &signedIn{secret: secret, tokenID: tokenID, csrf: randomID(), expires: now.Add(s.ttl)}
	s.byID[id] = si
	return id, si
}

func (s *sessionStore) sweepLocked(now time.Time) {
	for id, si := range s.byID {
		if !now.Before(si.expires) {
			delete(s.byID, id)
		}
	}
}

func (s *sessionStore) get(id string) (*signedIn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	si, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	if !s.clock().Before(si.expires) {
		delete(s.byID, id)
		return nil, false
	}
	return si, true
}

func (s *sessionStore) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// endToken ends every session of a token (it was revoked here).
func (s *sessionStore) endToken(tokenID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, si := range s.byID {
		if si.tokenID == tokenID {
			delete(s.byID, id)
		}
	}
}

// cookie builds a cookie of the console: HttpOnly, SameSite=Strict, Secure
// when the request came over TLS, limited to /ui/.
func cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

// req is what a signed-in handler gets.
type req struct {
	w   http.ResponseWriter
	r   *http.Request
	p   access.Principal
	sid string
	si  *signedIn
	org string // on organisation pages
}

func (q *req) ctx() context.Context { return q.r.Context() }

// signed runs h for a signed-in caller: a missing, unknown or expired
// session, or one whose token the authenticator no longer takes, is sent
// to the sign-in page (a GET) or refused (401, a POST); a POST without the
// session's CSRF value is refused with 403 and the page's form again.
func (c *Console) signed(h func(*req)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, ok := c.session(w, r)
		if !ok {
			return
		}
		if r.Method == http.MethodPost && !c.checkCSRF(q) {
			return
		}
		h(q)
	}
}

func (c *Console) session(w http.ResponseWriter, r *http.Request) (*req, bool) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; form-action 'self'")
	ck, err := r.Cookie(sessionCookie)
	var si *signedIn
	if err == nil {
		si, _ = c.sessions.get(ck.Value)
	}
	var p access.Principal
	if si != nil {
		p, err = c.cfg.Auth.Authenticate(r.Context(), si.secret)
		if err != nil {
			// Revoked or expired since the sign-in: the session ends with
			// its token. Anything else (the database away) is a 500, and
			// the session stays.
			if !errors.Is(err, access.ErrUnauthorized) {
				c.internal(w, r, err)
				return nil, false
			}
			c.sessions.delete(ck.Value)
			si = nil
		}
	}
	if si == nil {
		http.SetCookie(w, cookie(r, sessionCookie, "", -1))
		if r.Method == http.MethodGet {
			http.Redirect(w, r, "/ui/signin?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return nil, false
		}
		c.renderSignin(w, r, http.StatusUnauthorized, "Your session has ended: sign in again.")
		return nil, false
	}
	return &req{w: w, r: r, p: p, sid: ck.Value, si: si}, true
}

// checkCSRF compares the form's CSRF value with the session's, in constant
// time. A refusal answers 403 with the page the form came from, so the
// person can send it again.
func (c *Console) checkCSRF(q *req) bool {
	// The form is read here for every POST; the handlers read it again
	// from the parsed copy.
	if err := parseForm(q.w, q.r); err != nil {
		c.render(q.w, q.r, http.StatusBadRequest, "error", q.page("Bad form", err.Error()))
		return false
	}
	got := q.r.PostForm.Get(csrfField)
	if got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(q.si.csrf)) == 1 {
		return true
	}
	pg := q.page("Form expired", "This form was not sent from this session (its CSRF token is missing or wrong). Nothing was changed; here is the page again.")
	pg.Again = q.r.URL.Path
	c.render(q.w, q.r, http.StatusForbidden, "error", pg)
	return false
}

// maxForm bounds a form body: the CSV import is the largest, 10 000 rows.
const maxForm = 8 << 20

func parseForm(w http.ResponseWriter, r *http.Request) error {
	if r.PostForm != nil {
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errors.New("the form is larger than 8 MiB")
		}
		return errors.New("the form could not be read")
	}
	return nil
}

// orgPage runs h for a signed-in caller who may read the organisation in
// the path (a POST: write it); anyone else gets 403, whether the
// organisation exists or not, as from the API.
func (c *Console) orgPage(h func(*req)) http.HandlerFunc {
	return c.signed(func(q *req) {
		q.org = q.r.PathValue("org")
		check := q.p.Read
		if q.r.Method == http.MethodPost {
			check = q.p.Write
		}
		if err := check(q.org); err != nil {
			c.forbidden(q)
			return
		}
		h(q)
	})
}

func (c *Console) forbidden(q *req) {
	c.render(q.w, q.r, http.StatusForbidden, "error", q.page("Forbidden", access.ErrForbidden.Error()))
}

func (c *Console) signinForm(w http.ResponseWriter, r *http.Request) {
	c.renderSignin(w, r, http.StatusOK, "")
}

func (c *Console) renderSignin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; form-action 'self'")
	v := randomID()
	http.SetCookie(w, cookie(r, signinCookie, v, 600))
	next := safeNext(r.URL.Query().Get("next"))
	if r.Method == http.MethodPost {
		next = safeNext(r.PostForm.Get("next"))
	}
	c.render(w, r, status, "signin", &page{Title: "Sign in", CSRF: v, Error: msg, Next: next,
		Fields: map[string]string{}})
}

// signin checks the form's CSRF value against its cookie, then the token;
// a good one starts a session. Messages never say whether a token exists.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		c.renderSignin(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ck, err := r.Cookie(signinCookie)
	got := r.PostForm.Get(csrfField)
	if err != nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(ck.Value)) != 1 {
		c.renderSignin(w, r, http.StatusForbidden, "The sign-in form expired or did not come from this console; sign in again.")
		return
	}
	in, msg := parseSignin(r.PostForm)
	if msg != "" {
		c.renderSignin(w, r, http.StatusBadRequest, msg)
		return
	}
	p, err := c.cfg.Auth.Authenticate(r.Context(), in.token)
	if err != nil {
		if errors.Is(err, access.ErrUnauthorized) {
			c.renderSignin(w, r, http.StatusUnauthorized, "That token is not valid (unknown, expired or revoked).")
			return
		}
		c.internal(w, r, err)
		return
	}
	id, _ := c.sessions.create(in.token, p.TokenID)
	http.SetCookie(w, cookie(r, signinCookie, "", -1))
	http.SetCookie(w, cookie(r, sessionCookie, id, int(c.cfg.SessionTTL/time.Second)))
	c.log.Info("console sign-in", "token_id", p.TokenID, "role", string(p.Role), "org", p.Org,
		"request_id", httpapi.RequestID(r.Context()))
	next := safeNext(r.PostForm.Get("next"))
	if next == "" {
		next = "/ui/orgs"
		if p.Role.Scoped() {
			next = "/ui/orgs/" + p.Org
		}
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) signout(q *req) {
	c.sessions.delete(q.sid)
	http.SetCookie(q.w, cookie(q.r, sessionCookie, "", -1))
	http.Redirect(q.w, q.r, "/ui/signin", http.StatusSeeOther)
}

// safeNext keeps a return path only when it is the console's own: no
// scheme, no host, under /ui/.
func safeNext(s string) string {
	if len(s) < len(Prefix) || s[:len(Prefix)] != Prefix || len(s) > 2048 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '\\' {
			return ""
		}
	}
	return s
}
