package console_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/console"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// tokenTable is the test's token store: the tokens of package access are
// built beside this package and joined to it later, so the tests stand in
// for them with the smallest real thing — secrets mapped to principals,
// revocable. Unavoidable until then; it implements console.Authenticator
// and console.Tokens by the rules the token store follows (a scoped
// caller sees and touches its own organisation's tokens only).
type tokenTable struct {
	mu      sync.Mutex
	secrets map[string]access.Principal
	tokens  []access.Token
	n       int
}

func newTokenTable() *tokenTable { return &tokenTable{secrets: map[string]access.Principal{}} }

func (tt *tokenTable) add(secret string, p access.Principal) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.secrets[secret] = p
	tt.tokens = append(tt.tokens, access.Token{ID: p.TokenID, Name: p.Name, Role: p.Role, Org: p.Org, CreatedAt: time.Now().UTC()})
}

func (tt *tokenTable) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	p, ok := tt.secrets[secret]
	if !ok {
		return access.Principal{}, access.ErrUnauthorized
	}
	return p, nil
}

func (tt *tokenTable) Create(_ context.Context, by access.Principal, nt access.NewToken) (access.Token, string, error) {
	if err := by.Write(nt.Org); err != nil && !by.Admin() {
		return access.Token{}, "", err
	}
	tt.mu.Lock()
	tt.n++
	id := "t" + string(rune('a'+tt.n))
	tt.mu.Unlock()
	secret := "secret-" + id
	tt.add(secret, access.Principal{TokenID: id, Name: nt.Name, Role: nt.Role, Org: nt.Org})
	return access.Token{ID: id, Name: nt.Name, Role: nt.Role, Org: nt.Org}, secret, nil
}

func (tt *tokenTable) List(_ context.Context, by access.Principal) ([]access.Token, error) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	var out []access.Token
	for _, t := range tt.tokens {
		if by.Admin() || t.Org == by.Org {
			out = append(out, t)
		}
	}
	return out, nil
}

func (tt *tokenTable) Revoke(_ context.Context, by access.Principal, id string) error {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for i, t := range tt.tokens {
		if t.ID != id {
			continue
		}
		if !by.Admin() && t.Org != by.Org {
			return access.ErrForbidden
		}
		tt.tokens[i].RevokedAt = time.Now().UTC()
		for s, p := range tt.secrets {
			if p.TokenID == id {
				delete(tt.secrets, s)
			}
		}
		return nil
	}
	return errors.New("no such token")
}

// auditLog keeps the records the console writes, for the audit pages.
type auditLog struct {
	mu   sync.Mutex
	recs []access.AuditRecord
}

func (a *auditLog) Record(_ context.Context, r access.AuditRecord) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
	return nil
}

func (a *auditLog) Audit(_ context.Context, q access.AuditQuery) ([]access.AuditRecord, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []access.AuditRecord
	for i := len(a.recs) - 1; i >= 0 && len(out) < q.Limit; i-- {
		if q.Org == "" || a.recs[i].Org == q.Org {
			out = append(out, a.recs[i])
		}
	}
	return out, nil
}

// simAdapter is the in-process simulator as the console takes it (what
// svc-pf all wires): its 400 becomes the console's BadInput.
type simAdapter struct{ svc *simulator.Service }

func (s simAdapter) Simulate(ctx context.Context, p url.Values) ([]byte, error) {
	b, err := s.svc.Simulate(ctx, p)
	var bad *simulator.BadRequest
	if errors.As(err, &bad) {
		return nil, &console.BadInput{Msg: bad.Msg}
	}
	return b, err
}

func (s simAdapter) Info(ctx context.Context) ([]byte, error) { return s.svc.InfoJSON(ctx) }

// storeOrgs pages the store's organisations for the list.
type storeOrgs struct{ s *orgstore.Store }

func (o storeOrgs) ListOrgs(ctx context.Context, after string, limit int) ([]console.OrgSummary, string, error) {
	page, next, err := o.s.ListOrgs(ctx, after, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]console.OrgSummary, len(page))
	for i, v := range page {
		out[i] = console.OrgSummary{ID: v.ID, Version: v.Version, UpdatedAt: v.UpdatedAt}
	}
	return out, next, nil
}

// env is a console on a real listener over a real store, deployer and
// simulator.
type env struct {
	t      testing.TB
	base   string
	store  *orgstore.Store
	tokens *tokenTable
	audit  *auditLog
	logs   *natstest.LogBuffer
}

const (
	adminSecret  = "admin-secret-0123456789"
	acmeSecret   = "acme-secret-0123456789"
	viewerSecret = "viewer-secret-0123456789"
)

func newEnv(t testing.TB, store *orgstore.Store, tweak ...func(*console.Config)) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := deploy.New(deploy.Config{Store: store, Publisher: deploy.Discard{}, Workers: 1,
		RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	api, err := orgmanager.New(orgmanager.Config{Store: store, Deployer: d})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return policy.View{} }})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simulator.New(simulator.Config{Engine: eng, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	tt := newTokenTable()
	tt.add(adminSecret, access.Principal{TokenID: "admin1", Name: "bootstrap", Role: access.RoleAdmin})
	tt.add(acmeSecret, access.Principal{TokenID: "acme1", Name: "acme admin", Role: access.RoleOrgAdmin, Org: "acme"})
	tt.add(viewerSecret, access.Principal{TokenID: "view1", Name: "acme viewer", Role: access.RoleOrgViewer, Org: "acme"})
	al := &auditLog{}
	logs := &natstest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cc := console.Config{Ops: api.Ops(), Auth: tt, Orgs: storeOrgs{store}, Tokens: tt, Audit: al, AuditLog: al,
		Simulator: simAdapter{sim}, Logger: log}
	for _, f := range tweak {
		f(&cc)
	}
	c, err := console.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api.Register(r)
	c.Register(r)
	srv, err := httpapi.Listen(httpapi.Config{Address: "127.0.0.1:0"}, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-served
		<-done
		sim.Close()
	})
	return &env{t: t, base: "http://" + srv.Addr().String(), store: store, tokens: tt, audit: al, logs: logs}
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so each answer can be looked at.
type browser struct {
	e    *env
	c    *http.Client
	csrf string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{e: e, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

type answer struct {
	status   int
	body     string
	location string
	header   http.Header
}

func (b *browser) do(req *http.Request) answer {
	b.e.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if m := csrfRe.FindSubmatch(body); m != nil {
		b.csrf = string(m[1])
	}
	return answer{status: resp.StatusCode, body: string(body), location: resp.Header.Get("Location"), header: resp.Header}
}

func (b *browser) get(path string) answer {
	req, _ := http.NewRequest(http.MethodGet, b.e.base+path, nil)
	return b.do(req)
}

// post sends a form with the page's CSRF value unless form sets its own.
func (b *browser) post(path string, form url.Values) answer {
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	return b.postRaw(path, form)
}

func (b *browser) postRaw(path string, form url.Values) answer {
	req, _ := http.NewRequest(http.MethodPost, b.e.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

func (b *browser) signIn(secret string) {
	b.e.t.Helper()
	b.get("/ui/signin")
	a := b.post("/ui/signin", url.Values{"token": {secret}})
	if a.status != http.StatusSeeOther {
		b.e.t.Fatalf("sign-in: %d %s", a.status, a.body)
	}
	b.get(a.location) // picks up the session's CSRF value
}

func openSQLite(t testing.TB) *orgstore.Store { return storetest.Open(t, orgstore.DialectSQLite) }
