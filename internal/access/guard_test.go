package access_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
)

// memStore is a hand-written Store for the package's own tests; the real
// one (orgstore) is tested through the orgmanager on SQLite and
// PostgreSQL.
type memStore struct {
	mu      sync.Mutex
	rows    map[string]access.StoredToken
	changes int64
}

func newMemStore() *memStore { return &memStore{rows: map[string]access.StoredToken{}} }

func (m *memStore) InsertToken(_ context.Context, t access.StoredToken) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows[t.ID] = t
	m.changes++
	return nil
}

func (m *memStore) TokenByID(_ context.Context, id string) (access.StoredToken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.rows[id]
	if !ok {
		return t, access.ErrTokenNotFound
	}
	return t, nil
}

func (m *memStore) ListTokens(_ context.Context, org string) ([]access.Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []access.Token
	for _, t := range m.rows {
		if org == "" || t.Org == org {
			out = append(out, t.Token)
		}
	}
	return out, nil
}

func (m *memStore) RevokeToken(_ context.Context, id string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.rows[id]
	if !ok {
		return access.ErrTokenNotFound
	}
	if t.RevokedAt.IsZero() {
		t.RevokedAt = at
		m.rows[id] = t
		m.changes++
	}
	return nil
}

func (m *memStore) TokenChanges(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changes, nil
}

func (m *memStore) HasTokens(context.Context) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows) > 0, nil
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var admin = access.Principal{Role: access.RoleAdmin}

func newTokens(t testing.TB, now func() time.Time) *access.Tokens {
	t.Helper()
	tk, err := access.New(access.Config{Store: newMemStore(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestAuthenticate(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tk := newTokens(t, c.Now)
	ctx := context.Background()
	info, tok, err := tk.Create(ctx, admin, access.NewToken{Role: access.RoleOrgViewer, Org: "acme", Name: "v", Expires: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != access.TokenLen || !strings.HasPrefix(tok, "svcpf_"+info.ID+"_") {
		t.Fatalf("token %q of id %s", tok, info.ID)
	}
	p, err := tk.Authenticate(ctx, tok)
	if err != nil || p != (access.Principal{TokenID: info.ID, Name: "v", Role: access.RoleOrgViewer, Org: "acme"}) {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	c.Add(time.Hour)
	if _, err := tk.Authenticate(ctx, tok); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("after its expiry: %v", err)
	}
	for _, bad := range []string{"", tok[:len(tok)-1], tok + "0", strings.ToUpper(tok), "svcpf_" + info.ID + "_" + strings.Repeat("0", 64)} {
		if _, err := tk.Authenticate(ctx, bad); err == nil {
			t.Errorf("Authenticate(%q) succeeded", bad)
		}
	}
}

func TestCreateRules(t *testing.T) {
	tk := newTokens(t, nil)
	ctx := context.Background()
	oa := access.Principal{Role: access.RoleOrgAdmin, Org: "acme"}
	ov := access.Principal{Role: access.RoleOrgViewer, Org: "acme"}
	for _, c := range []struct {
		by   access.Principal
		nt   access.NewToken
		want error
	}{
		{admin, access.NewToken{Role: access.RoleAdmin}, nil},
		{oa, access.NewToken{Role: access.RoleAdmin}, access.ErrForbidden},
		{oa, access.NewToken{Role: access.RoleOrgAdmin, Org: "acme"}, nil},
		{oa, access.NewToken{Role: access.RoleOrgViewer, Org: "acme"}, nil},
		{oa, access.NewToken{Role: access.RoleOrgViewer, Org: "beta"}, access.ErrForbidden},
		{ov, access.NewToken{Role: access.RoleOrgViewer, Org: "acme"}, access.ErrForbidden},
		{admin, access.NewToken{Role: "root"}, access.ErrInvalid},
		{admin, access.NewToken{Role: access.RoleOrgViewer}, access.ErrInvalid},
		{admin, access.NewToken{Role: access.RoleAdmin, Org: "acme"}, access.ErrInvalid},
		{admin, access.NewToken{Role: access.RoleAdmin, Expires: -time.Second}, access.ErrInvalid},
		{admin, access.NewToken{Role: access.RoleAdmin, Name: strings.Repeat("x", 129)}, access.ErrInvalid},
	} {
		_, _, err := tk.Create(ctx, c.by, c.nt)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%+v creates %+v: %v, want %v", c.by, c.nt, err, c.want)
		}
	}
	if _, err := tk.List(ctx, ov); !errors.Is(err, access.ErrForbidden) {
		t.Errorf("viewer lists: %v", err)
	}
}

func guardOver(t testing.TB, tk *access.Tokens, now func() time.Time, lim access.FailureLimit) http.Handler {
	_, h := guardAndHandler(t, tk, now, lim)
	return h
}

func guardAndHandler(t testing.TB, tk *access.Tokens, now func() time.Time, lim access.FailureLimit) (*access.Guard, http.Handler) {
	t.Helper()
	g, err := access.NewGuard(access.GuardConfig{Verifier: tk, Now: now, Failures: lim,
		Protected: func(r *http.Request) bool { return r.URL.Path != "/health" },
		Authorize: func(r *http.Request, p access.Principal) error {
			return p.Read(strings.TrimPrefix(r.URL.Path, "/org/"))
		}})
	if err != nil {
		t.Fatal(err)
	}
	return g, g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := access.FromContext(r.Context()); !ok && r.URL.Path != "/health" {
			t.Error("no principal in the context")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

func serve(h http.Handler, remote, path, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.RemoteAddr = remote
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestFailureLimit: after Max failures within the window an address gets
// 429 with Retry-After, whatever it sends, until the window ends; other
// addresses are not affected; an IPv6 /64 counts as one client.
func TestFailureLimit(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tk := newTokens(t, c.Now)
	_, good, err := tk.Create(context.Background(), admin, access.NewToken{Role: access.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	h := guardOver(t, tk, c.Now, access.FailureLimit{Max: 3, Window: time.Minute})
	for i := range 3 {
		if rec := serve(h, "192.0.2.1:1000", "/org/acme", "Bearer nope"); rec.Code != 401 {
			t.Fatalf("failure %d: %d", i, rec.Code)
		}
	}
	rec := serve(h, "192.0.2.1:1001", "/org/acme", "Bearer "+good)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "60" || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("after 3 failures: %d %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := serve(h, "192.0.2.2:1000", "/org/acme", "Bearer "+good); rec.Code != 204 {
		t.Fatalf("another address: %d", rec.Code)
	}
	if rec := serve(h, "192.0.2.1:1000", "/health", ""); rec.Code != 204 {
		t.Fatalf("an open path while limited: %d", rec.Code)
	}
	c.Add(30 * time.Second)
	if rec := serve(h, "192.0.2.1:1000", "/org/acme", "Bearer "+good); rec.Code != 429 || rec.Header().Get("Retry-After") != "30" {
		t.Fatalf("half-way: %d %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	c.Add(30 * time.Second)
	if rec := serve(h, "192.0.2.1:1000", "/org/acme", "Bearer "+good); rec.Code != 204 {
		t.Fatalf("after the window: %d", rec.Code)
	}
	// IPv6: two addresses of one /64 share a count; another /64 does not.
	for i := range 3 {
		serve(h, "[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:1", "/org/acme", "")
	}
	if rec := serve(h, "[2001:db8:1:2:ffff::9]:1", "/org/acme", "Bearer "+good); rec.Code != 429 {
		t.Fatalf("same /64: %d", rec.Code)
	}
	if rec := serve(h, "[2001:db8:1:3::1]:1", "/org/acme", "Bearer "+good); rec.Code != 204 {
		t.Fatalf("another /64: %d", rec.Code)
	}
	// A 403 is no failed authentication.
	for range 5 {
		serve(h, "192.0.2.9:1", "/org/beta", "Bearer "+good)
	}
	_, viewer, _ := tk.Create(context.Background(), admin, access.NewToken{Role: access.RoleOrgViewer, Org: "acme"})
	for range 5 {
		if rec := serve(h, "192.0.2.9:1", "/org/beta", "Bearer "+viewer); rec.Code != 403 {
			t.Fatalf("viewer on beta: %d", rec.Code)
		}
	}
}

// TestGuardAnswers: the 401's header and body for each kind of bad
// header, and the open mode.
func TestGuardAnswers(t *testing.T) {
	tk := newTokens(t, nil)
	h := guardOver(t, tk, nil, access.FailureLimit{Max: 1000})
	for _, auth := range []string{"", "Bearer", "Bearer ", "Basic abc", "bearer svcpf_x", "Bearer " + access.GenerateToken()} {
		rec := serve(h, "192.0.2.1:1", "/org/acme", auth)
		if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") != `Bearer realm="svc-pf"` ||
			rec.Header().Get("Content-Type") != "application/json" || !strings.HasPrefix(rec.Body.String(), `{"error":"a valid bearer token is required`) {
			t.Errorf("%q: %d %q %s", auth, rec.Code, rec.Header(), rec.Body)
		}
	}
	req := httptest.NewRequest("GET", "/org/acme", nil)
	req.Header.Add("Authorization", "Bearer a")
	req.Header.Add("Authorization", "Bearer b")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Errorf("two headers: %d", rec.Code)
	}
	open, err := access.NewGuard(access.GuardConfig{Open: true})
	if err != nil {
		t.Fatal(err)
	}
	oh := open.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := access.FromContext(r.Context()); !ok || !p.Admin() {
			t.Errorf("open mode: principal %+v %v", p, ok)
		}
	}))
	if rec := serve(oh, "192.0.2.1:1", "/org/acme", ""); rec.Code != 200 {
		t.Errorf("open mode: %d", rec.Code)
	}
	if _, err := access.NewGuard(access.GuardConfig{}); err == nil {
		t.Error("a guard without a verifier was built")
	}
}

// TestFailureLimitMemoryBounded: a flood of addresses never holds more
// than Clients entries.
func TestFailureLimitMemoryBounded(t *testing.T) {
	tk := newTokens(t, nil)
	g, h := guardAndHandler(t, tk, nil, access.FailureLimit{Max: 2, Clients: 100})
	for i := range 5000 {
		serve(h, "10."+strconv.Itoa(i>>16&255)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255)+":1", "/org/acme", "")
	}
	if n := g.LimiterSize(); n > 100 {
		t.Fatalf("%d clients tracked, bound 100", n)
	}
}

// BenchmarkGuard is the cost the guard adds to a request with a valid
// token: header parsing, the in-memory lookup, SHA-256 and the constant
// time compare, the route rule, the principal in the context.
func BenchmarkGuard(b *testing.B) {
	tk := newTokens(b, nil)
	_, tok, err := tk.Create(context.Background(), admin, access.NewToken{Role: access.RoleOrgAdmin, Org: "acme"})
	if err != nil {
		b.Fatal(err)
	}
	g, err := access.NewGuard(access.GuardConfig{Verifier: tk,
		Authorize: func(r *http.Request, p access.Principal) error { return p.Write("acme") }})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("PUT", "/org/acme/prefixes", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	req.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := g.Check(w, req); !ok {
				b.Error("refused")
				return
			}
		}
	})
}

// BenchmarkAuthenticate is the token check alone, without HTTP.
func BenchmarkAuthenticate(b *testing.B) {
	tk := newTokens(b, nil)
	_, tok, err := tk.Create(context.Background(), admin, access.NewToken{Role: access.RoleAdmin})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tk.Authenticate(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

// brokenStore fails every read, as a database that does not answer.
type brokenStore struct{ *memStore }

func (brokenStore) TokenByID(context.Context, string) (access.StoredToken, error) {
	return access.StoredToken{}, errors.New("connection refused")
}

// TestStoreDownIs503: a token not in memory while the store fails is a 503,
// never a 401, and is not counted against the client.
func TestStoreDownIs503(t *testing.T) {
	tk, err := access.New(access.Config{Store: brokenStore{newMemStore()}})
	if err != nil {
		t.Fatal(err)
	}
	h := guardOver(t, tk, nil, access.FailureLimit{Max: 1})
	for range 3 {
		rec := serve(h, "192.0.2.1:1", "/org/acme", "Bearer "+access.GenerateToken())
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "cannot be verified") {
			t.Fatalf("store down: %d %s", rec.Code, rec.Body)
		}
	}
}
