package orgmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// callers are the tokens of the access table, by name.
type callers map[string]string

// makeCallers creates one token of each kind the table tries: acme's
// viewer and admin, beta's admin, the platform admin (the harness's), and
// an expired and a revoked one (both acme's org-admins).
func makeCallers(t *testing.T, h *harness) callers {
	t.Helper()
	ctx := context.Background()
	admin := access.Principal{Role: access.RoleAdmin}
	mk := func(role access.Role, org string) string {
		_, tok, err := h.tokens.Create(ctx, admin, access.NewToken{Role: role, Org: org, Name: string(role) + " of " + org})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	c := callers{
		"viewer of acme":         mk(access.RoleOrgViewer, "acme"),
		"org-admin of beta":      mk(access.RoleOrgAdmin, "beta"),
		"org-admin of acme":      mk(access.RoleOrgAdmin, "acme"),
		"platform admin":         h.token,
		"unknown":                access.GenerateToken(),
		"malformed":              "not-a-token",
		"expired":                "",
		"revoked":                mk(access.RoleOrgAdmin, "acme"),
		"no token":               "",
		"wrong secret of a real": "",
	}
	// Expired: a row whose expiry has passed, written as another process
	// would.
	tok := access.GenerateToken()
	id, secret, _ := access.ParseToken(tok)
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	if err := h.store.InsertToken(ctx, access.StoredToken{Token: access.Token{ID: id, Role: access.RoleAdmin,
		CreatedAt: past.Add(-time.Hour), ExpiresAt: past}, Hash: access.HashSecret(secret)}); err != nil {
		t.Fatal(err)
	}
	c["expired"] = tok
	rid, _, _ := access.ParseToken(c["revoked"])
	if err := h.tokens.Revoke(ctx, admin, rid); err != nil {
		t.Fatal(err)
	}
	// A real id with another secret.
	aid, _, _ := access.ParseToken(c["org-admin of acme"])
	c["wrong secret of a real"] = "svcpf_" + aid + "_" + strings.Repeat("0", 64)
	return c
}

// sendAs sends a request with the header value auth ("" for none), over
// the harness's real listener.
func (h *harness) sendAs(auth, method, path, body string) (int, http.Header, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// allowed is a table cell for a request the caller may make: whatever the
// handler answers, but never 401, 403 or 429.
const allowed = 0

// TestAccessTable: every orgmanager endpoint (method and path, from the
// router itself, plus the methods each path does not have) against every
// kind of caller, through a real listener, on SQLite and PostgreSQL. A
// scoped caller gets 403 for another organisation whether it exists
// (acme, beta's admin) or not (ghost), before any 404 or 405.
func TestAccessTable(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/8")
		h.org("beta")
		c := makeCallers(t, h)

		type cell struct {
			name   string
			header string // the Authorization header
		}
		bearer := func(name string) cell { return cell{name, "Bearer " + c[name]} }
		unauthenticated := []cell{
			{"no token", ""},
			{"empty bearer", "Bearer "},
			{"basic scheme", "Basic YWxhZGRpbjpvcGVuc2VzYW1l"},
			bearer("malformed"), bearer("unknown"), bearer("expired"), bearer("revoked"), bearer("wrong secret of a real"),
		}

		methods := []string{"GET", "PUT", "PATCH", "POST", "DELETE"}
		registered := map[string][]string{}
		for _, r := range h.router.Routes() {
			registered[r.Pattern] = append(registered[r.Pattern], r.Method)
		}
		checked := 0
		for pattern, have := range registered {
			for _, m := range methods {
				for _, org := range []string{"acme", "ghost"} {
					path := strings.ReplaceAll(strings.ReplaceAll(pattern, "{org}", org), "{id}", "0123456789abcdef")
					read := m == "GET"
					isOrg := strings.HasPrefix(pattern, "/org/")
					if !isOrg && org == "ghost" {
						continue
					}
					want := map[string]int{}
					for _, u := range unauthenticated {
						want[u.name] = http.StatusUnauthorized
					}
					switch {
					case isOrg:
						want["platform admin"] = allowed
						want["org-admin of acme"] = allowed
						want["viewer of acme"] = allowed
						if !read {
							want["viewer of acme"] = http.StatusForbidden
						}
						want["org-admin of beta"] = http.StatusForbidden
						if org == "ghost" {
							want["org-admin of acme"] = http.StatusForbidden
							want["viewer of acme"] = http.StatusForbidden
							// The platform admin may learn that ghost does
							// not exist; writes would create it, so the
							// table leaves them out.
							if !read {
								delete(want, "platform admin")
							}
						}
					case pattern == "/settings":
						for _, n := range []string{"platform admin", "org-admin of acme", "viewer of acme", "org-admin of beta"} {
							want[n] = allowed
							if !read && n != "platform admin" {
								want[n] = http.StatusForbidden
							}
						}
					case pattern == "/org":
						// The listing: any valid token (it shows what the
						// token may read; TestAccessTable's listing rows
						// below check what).
						for _, n := range []string{"platform admin", "org-admin of acme", "viewer of acme", "org-admin of beta"} {
							want[n] = allowed
						}
					case pattern == "/audit" || pattern == "/nodes":
						// Every organisation's records, the platform's nodes:
						// the platform admin's alone, whatever the method.
						want["platform admin"] = allowed
						if pattern == "/nodes" && read {
							// Let through; the harness has no NATS, so no
							// nodes' bucket to read (TestNodes has one).
							want["platform admin"] = http.StatusServiceUnavailable
						}
						for _, n := range []string{"org-admin of acme", "viewer of acme", "org-admin of beta"} {
							want[n] = http.StatusForbidden
						}
					default: // /tokens and /tokens/{id}: the token service decides, tested below
						for _, n := range []string{"platform admin", "org-admin of acme", "org-admin of beta"} {
							want[n] = allowed
						}
						if pattern == "/tokens" && m == "POST" {
							want["org-admin of acme"] = http.StatusForbidden // the body asks for a token of beta
						}
					}
					cells := append(slices.Clone(unauthenticated), bearer("platform admin"), bearer("org-admin of acme"),
						bearer("viewer of acme"), bearer("org-admin of beta"))
					for _, cl := range cells {
						w, ok := want[cl.name]
						if !ok {
							continue
						}
						body := "{}"
						if read || m == "DELETE" {
							body = ""
						}
						if pattern == "/tokens" && m == "POST" {
							body = `{"role":"org-viewer","org":"beta"}`
						}
						status, hdr, data := h.sendAs(cl.header, m, path, body)
						checked++
						label := fmt.Sprintf("%s %s as %s", m, path, cl.name)
						if w == allowed {
							if status == 401 || status == 403 || status == 429 || status >= 500 {
								t.Errorf("%s: %d %s, want it let through", label, status, data)
							}
							if !slices.Contains(have, m) && status != 405 {
								t.Errorf("%s: %d, want 405 (not a route)", label, status)
							}
							continue
						}
						if status != w {
							t.Errorf("%s: %d %s, want %d", label, status, data, w)
							continue
						}
						var e struct{ Error string }
						if json.Unmarshal(data, &e) != nil || e.Error == "" {
							t.Errorf("%s: body %q is not {\"error\": …}", label, data)
						}
						if w == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
							t.Errorf("%s: 401 without WWW-Authenticate: Bearer", label)
						}
					}
				}
			}
		}
		if checked < 300 {
			t.Fatalf("only %d requests checked", checked)
		}

		// The listings and the audit, with the status each caller gets
		// (not only "let through"): GET /org for any valid token, GET
		// /audit for the platform admin, an organisation's audit and its
		// settings list for whoever may read the organisation (its
		// viewer included).
		for _, row := range []struct {
			path string
			want map[string]int
		}{
			{"/org", map[string]int{"platform admin": 200, "org-admin of acme": 200, "viewer of acme": 200, "org-admin of beta": 200}},
			{"/org?limit=1", map[string]int{"platform admin": 200, "org-admin of acme": 200, "viewer of acme": 200, "org-admin of beta": 200}},
			{"/audit", map[string]int{"platform admin": 200, "org-admin of acme": 403, "viewer of acme": 403, "org-admin of beta": 403}},
			{"/audit?limit=1", map[string]int{"platform admin": 200, "org-admin of acme": 403, "viewer of acme": 403, "org-admin of beta": 403}},
			{"/org/acme/audit", map[string]int{"platform admin": 200, "org-admin of acme": 200, "viewer of acme": 200, "org-admin of beta": 403}},
			{"/org/ghost/audit", map[string]int{"platform admin": 200, "org-admin of acme": 403, "viewer of acme": 403, "org-admin of beta": 403}},
			{"/org/acme/settings?list=1", map[string]int{"platform admin": 200, "org-admin of acme": 200, "viewer of acme": 200, "org-admin of beta": 403}},
			{"/org/ghost/settings?list=1", map[string]int{"platform admin": 404, "org-admin of acme": 403, "viewer of acme": 403, "org-admin of beta": 403}},
		} {
			for _, u := range unauthenticated {
				row.want[u.name] = http.StatusUnauthorized
			}
			cells := append(slices.Clone(unauthenticated), bearer("platform admin"), bearer("org-admin of acme"),
				bearer("viewer of acme"), bearer("org-admin of beta"))
			for _, cl := range cells {
				status, _, data := h.sendAs(cl.header, "GET", row.path, "")
				if status != row.want[cl.name] {
					t.Errorf("GET %s as %s: %d %s, want %d", row.path, cl.name, status, data, row.want[cl.name])
				}
			}
		}
		// GET /org: the platform admin sees every organisation, a scoped
		// token its own only.
		for who, want := range map[string][]string{
			"platform admin":    {"acme", "beta"},
			"org-admin of acme": {"acme"},
			"viewer of acme":    {"acme"},
			"org-admin of beta": {"beta"},
		} {
			_, _, data := h.sendAs("Bearer "+c[who], "GET", "/org", "")
			var page struct {
				Orgs []struct {
					OrgID string `json:"org_id"`
				}
			}
			if err := json.Unmarshal(data, &page); err != nil {
				t.Fatalf("GET /org as %s: %s", who, data)
			}
			var got []string
			for _, o := range page.Orgs {
				got = append(got, o.OrgID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("GET /org as %s: %q, want %q", who, got, want)
			}
		}
		// The table's own writes never reached ghost.
		h.must(404, "GET", "/org/ghost", nil)
	})
}

// TestScopedTokenNeverLearnsExistence: for a scoped token, an existing
// organisation of someone else and one that does not exist answer alike,
// status and body, on every method.
func TestScopedTokenNeverLearnsExistence(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		h.org("beta")
		c := makeCallers(t, h)
		for _, who := range []string{"org-admin of acme", "viewer of acme"} {
			for _, m := range []string{"GET", "PUT", "PATCH", "POST", "DELETE", "OPTIONS"} {
				for _, suffix := range []string{"", "/prefixes", "/overrides?cidr=10.0.0.0/8", "/effective-ranges", "/settings", "/nothing-here"} {
					s1, _, b1 := h.sendAs("Bearer "+c[who], m, "/org/beta"+suffix, "")
					s2, _, b2 := h.sendAs("Bearer "+c[who], m, "/org/ghost"+suffix, "")
					if s1 != 403 || s2 != 403 || !bytes.Equal(b1, b2) {
						t.Errorf("%s %s on beta and ghost%s: %d %s / %d %s, want the same 403", who, m, suffix, s1, b1, s2, b2)
					}
				}
			}
		}
	})
}

// TestTokenEndpoints: POST, GET and DELETE /tokens with the rules of who
// manages which tokens; the secret is shown once and never listed.
func TestTokenEndpoints(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		c := makeCallers(t, h)
		as := func(who, method, path, body string) (int, []byte) {
			status, _, data := h.sendAs("Bearer "+c[who], method, path, body)
			return status, data
		}
		// Who creates what.
		for _, tc := range []struct {
			who, body string
			want      int
		}{
			{"platform admin", `{"role":"admin","name":"ops"}`, 201},
			{"platform admin", `{"role":"org-viewer","org":"acme","expires":"720h"}`, 201},
			{"org-admin of acme", `{"role":"org-viewer","org":"acme"}`, 201},
			{"org-admin of acme", `{"role":"org-admin","org":"acme"}`, 201},
			{"org-admin of acme", `{"role":"admin"}`, 403},
			{"org-admin of acme", `{"role":"org-viewer","org":"beta"}`, 403},
			{"org-admin of beta", `{"role":"org-viewer","org":"acme"}`, 403},
			{"viewer of acme", `{"role":"org-viewer","org":"acme"}`, 403},
			{"platform admin", `{"role":"root"}`, 400},
			{"platform admin", `{"role":"admin","org":"acme"}`, 400},
			{"platform admin", `{"role":"org-admin"}`, 400},
			{"platform admin", `{"role":"org-admin","org":"a/b"}`, 400},
			{"platform admin", `{"role":"admin","expires":"-1h"}`, 400},
			{"platform admin", `{"role":"admin","expires":"soon"}`, 400},
			{"platform admin", `{"role":"admin","name":"a\u0001b"}`, 400},
			{"platform admin", `{"role":"admin","colour":"red"}`, 400},
			{"platform admin", `{"role":"admin"} {}`, 400},
			{"platform admin", ``, 400},
			{"platform admin", `[]`, 400},
		} {
			status, data := as(tc.who, "POST", "/tokens", tc.body)
			if status != tc.want {
				t.Errorf("POST /tokens %s as %s: %d %s, want %d", tc.body, tc.who, status, data, tc.want)
				continue
			}
			if status != 201 {
				continue
			}
			var out struct{ ID, Token, Role, Org string }
			if err := json.Unmarshal(data, &out); err != nil || !access.ValidID(out.ID) || !strings.HasPrefix(out.Token, "svcpf_"+out.ID+"_") {
				t.Errorf("POST /tokens: body %s", data)
				continue
			}
			// The new token works at once.
			if s, _, d := h.sendAs("Bearer "+out.Token, "GET", "/tokens", ""); (out.Role == "org-viewer") != (s == 403) {
				t.Errorf("new %s token: GET /tokens %d %s", out.Role, s, d)
			}
		}
		// Listing: no secret or hash; an org-admin sees its organisation's only.
		_, all := as("platform admin", "GET", "/tokens", "")
		_, own := as("org-admin of acme", "GET", "/tokens", "")
		for _, secret := range c {
			if len(secret) > 30 && (bytes.Contains(all, []byte(secret[23:])) || bytes.Contains(own, []byte(secret[23:]))) {
				t.Fatal("a listing contains a secret")
			}
		}
		var listed struct {
			Tokens []struct{ ID, Org, Role string }
		}
		if err := json.Unmarshal(own, &listed); err != nil || len(listed.Tokens) == 0 {
			t.Fatalf("org-admin's list: %s", own)
		}
		for _, tk := range listed.Tokens {
			if tk.Org != "acme" {
				t.Errorf("acme's org-admin lists %+v", tk)
			}
		}
		if s, _ := as("viewer of acme", "GET", "/tokens", ""); s != 403 {
			t.Errorf("viewer lists tokens: %d", s)
		}
		// Revocation: an org-admin revokes its organisation's tokens only,
		// and another organisation's id answers as an unknown one.
		betaID, _, _ := access.ParseToken(c["org-admin of beta"])
		viewerID, _, _ := access.ParseToken(c["viewer of acme"])
		adminID, _, _ := access.ParseToken(h.token)
		for _, tc := range []struct {
			who, id string
			want    int
		}{
			{"org-admin of acme", betaID, 404},
			{"org-admin of acme", adminID, 404},
			{"org-admin of acme", "0123456789abcdef", 404},
			{"org-admin of acme", "not-an-id", 404},
			{"viewer of acme", viewerID, 403},
			{"org-admin of beta", viewerID, 404},
			{"org-admin of acme", viewerID, 204},
			{"org-admin of acme", viewerID, 204}, // again: still revoked
			{"platform admin", betaID, 204},
		} {
			if s, d := as(tc.who, "DELETE", "/tokens/"+tc.id, ""); s != tc.want {
				t.Errorf("DELETE /tokens/%s as %s: %d %s, want %d", tc.id, tc.who, s, d, tc.want)
			}
		}
		// Revoked through the API: refused on the next request.
		for _, who := range []string{"viewer of acme", "org-admin of beta"} {
			if s, d := as(who, "GET", "/org/acme", ""); s != 401 || !strings.Contains(string(d), "revoked") {
				t.Errorf("%s after its revocation: %d %s", who, s, d)
			}
		}
	})
}

// TestRevocationIsImmediate: while goroutines keep making requests with a
// token, another revokes it; every request sent after Revoke returned is
// refused with 401.
func TestRevocationIsImmediate(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		ctx := context.Background()
		admin := access.Principal{Role: access.RoleAdmin}
		tk, tok, err := h.tokens.Create(ctx, admin, access.NewToken{Role: access.RoleOrgAdmin, Org: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		var revoked atomic.Bool
		var wg sync.WaitGroup
		var ok, refused, late atomic.Int64
		stop := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := revoked.Load() // read before the request is sent
					req, _ := http.NewRequest("GET", h.srv.URL+"/org/acme/prefixes", nil)
					req.Header.Set("Authorization", "Bearer "+tok)
					resp, err := h.srv.Client().Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					switch {
					case resp.StatusCode != 401 && resp.StatusCode != 200:
						t.Errorf("status %d", resp.StatusCode)
						return
					case resp.StatusCode == 401:
						refused.Add(1)
					case after:
						late.Add(1)
					default:
						ok.Add(1)
					}
				}
			}()
		}
		for ok.Load() < 20 && !t.Failed() {
			time.Sleep(time.Millisecond)
		}
		if err := h.tokens.Revoke(ctx, admin, tk.ID); err != nil {
			t.Fatal(err)
		}
		revoked.Store(true)
		for refused.Load() < 50 && !t.Failed() {
			time.Sleep(time.Millisecond)
		}
		close(stop)
		wg.Wait()
		if late.Load() != 0 {
			t.Fatalf("%d requests sent after Revoke returned were served", late.Load())
		}
	})
}

// TestRevocationElsewhereApplies: a revocation written by another process
// (here a second Tokens on the same database, as the CLI is) applies to
// this one once its recheck interval has passed.
func TestRevocationElsewhereApplies(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		admin := access.Principal{Role: access.RoleAdmin}
		now := time.Now()
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		here, err := access.New(access.Config{Store: h.store, Now: clock, RecheckInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		elsewhere, err := access.New(access.Config{Store: h.store})
		if err != nil {
			t.Fatal(err)
		}
		tk, tok, err := elsewhere.Create(ctx, admin, access.NewToken{Role: access.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := here.Authenticate(ctx, tok); err != nil {
			t.Fatal(err)
		}
		if err := elsewhere.Revoke(ctx, admin, tk.ID); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(1100 * time.Millisecond)
		mu.Unlock()
		if _, err := here.Authenticate(ctx, tok); err == nil {
			t.Fatal("a token revoked elsewhere still works after the recheck interval")
		}
	})
}

// TestNoSecretsInLogs: with debug logging, neither a valid nor a refused
// token, nor its hash, appears in what the router and the guard log.
func TestNoSecretsInLogs(t *testing.T) {
	store := storetest.Open(t, storetest.SQLite)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tokens, err := access.New(access.Config{Store: store, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, good, err := tokens.Create(context.Background(), access.Principal{Role: access.RoleAdmin}, access.NewToken{Role: access.RoleOrgViewer, Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(Config{Store: store, Deployer: discardDeployer{}, Tokens: tokens, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := access.NewGuard(access.GuardConfig{Verifier: tokens, Protected: Protected, Authorize: Authorize, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	r, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: prometheus.NewRegistry(), Guard: guard.Check})
	if err != nil {
		t.Fatal(err)
	}
	api.Register(r)
	h := &harness{t: t, router: r}
	h.srv = newServer(t, r)
	id, secret, _ := access.ParseToken(good)
	wrong := "svcpf_" + id + "_" + strings.Repeat("f", 64)
	for _, auth := range []string{"Bearer " + good, "Bearer " + wrong, "Bearer " + access.GenerateToken(), "Basic " + good, "Bearer " + good + " extra"} {
		for _, path := range []string{"/org/acme", "/org/beta", "/tokens", "/nothing"} {
			h.sendAs(auth, "GET", path, "")
		}
	}
	out := logs.String()
	if !strings.Contains(out, "level=DEBUG") {
		t.Fatalf("nothing was logged at debug level:\n%s", out)
	}
	hash := access.HashSecret(secret)
	for _, leak := range []string{secret, strings.Repeat("f", 64), fmt.Sprintf("%x", hash[:])} {
		if strings.Contains(out, leak) {
			t.Errorf("the log contains %q:\n%s", leak, out)
		}
	}
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// discardDeployer is a Deployer that does nothing, for tests of access
// alone.
type discardDeployer struct{}

func (discardDeployer) Notify(string)               { /* nothing deploys in these tests */ }
func (discardDeployer) NotifyGlobal()               { /* nothing deploys in these tests */ }
func (discardDeployer) Redeploy(string)             { /* nothing deploys in these tests */ }
func (discardDeployer) Status(string) deploy.Status { return deploy.Status{} }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
