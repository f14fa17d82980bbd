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

// storeAudit reads the audit for the console's pages: the store's read,
// the one GET /audit and GET /org/{org}/audit answer from (internal/app
// wires the same).
type storeAudit struct{ s *orgstore.Store }

func (a storeAudit) Audit(ctx context.Context, q access.AuditQuery) ([]access.AuditRecord, error) {
	return a.s.AuditRecords(ctx, q)
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
// simulator, with the real token service and auditor on that store.
type env struct {
	t       testing.TB
	base    string
	store   *orgstore.Store
	tokens  *access.Tokens
	auditor *access.Auditor
	logs    *natstest.LogBuffer
}

// The tokens every env starts with, in the format of package access (so
// that the tests can name them): a platform admin, acme's org-admin and
// acme's viewer. newEnv stores them hashed, as any token is stored.
const (
	adminID      = "00000000000000a1"
	acmeID       = "00000000000000a2"
	viewerID     = "00000000000000a3"
	adminSecret  = "svcpf_" + adminID + "_1111111111111111111111111111111111111111111111111111111111111111"
	acmeSecret   = "svcpf_" + acmeID + "_2222222222222222222222222222222222222222222222222222222222222222"
	viewerSecret = "svcpf_" + viewerID + "_3333333333333333333333333333333333333333333333333333333333333333"
)

// seedTokens stores the env's tokens in the store, hashed, as `svc-pf
// token create` or POST /tokens would leave them.
func seedTokens(t testing.TB, store *orgstore.Store) {
	t.Helper()
	for _, tk := range []struct {
		tok  string
		name string
		role access.Role
		org  string
	}{
		{adminSecret, "bootstrap", access.RoleAdmin, ""},
		{acmeSecret, "acme admin", access.RoleOrgAdmin, "acme"},
		{viewerSecret, "acme viewer", access.RoleOrgViewer, "acme"},
	} {
		id, secret, err := access.ParseToken(tk.tok)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.InsertToken(context.Background(), access.StoredToken{Token: access.Token{ID: id, Name: tk.name,
			Role: tk.role, Org: tk.org, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}, Hash: access.HashSecret(secret)}); err != nil {
			t.Fatal(err)
		}
	}
}

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
	logs := &natstest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	seedTokens(t, store)
	tokens, err := access.New(access.Config{Store: store, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	auditor, err := access.NewAuditor(access.AuditorConfig{Store: store, RequestID: httpapi.RequestID, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cc := console.Config{Ops: api.Ops(), Auth: tokens, Orgs: storeOrgs{store}, Tokens: tokens, Audit: auditor,
		AuditLog: storeAudit{store}, Simulator: simAdapter{sim}, Logger: log}
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
	return &env{t: t, base: "http://" + srv.Addr().String(), store: store, tokens: tokens, auditor: auditor, logs: logs}
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
