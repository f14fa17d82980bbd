package orgmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// harness is the orgmanager API on a real store, served over a real
// loopback socket behind the real guard and audit, with the deploy
// pipeline running (no IP Mapper).
type harness struct {
	t        testing.TB
	srv      *httptest.Server
	store    *orgstore.Store
	deployer *deploy.Deployer
	notes    *notifyRecorder
	router   *httpapi.Router
	tokens   *access.Tokens
	auditor  *access.Auditor
	// token is the platform admin's token every request carries unless
	// doAs names another.
	token string
}

// notifyRecorder is the real deployer, counting the notifications the API
// sends it.
type notifyRecorder struct {
	*deploy.Deployer
	mu     sync.Mutex
	orgs   map[string]int
	global int
}

func (n *notifyRecorder) Notify(org string) {
	n.mu.Lock()
	n.orgs[org]++
	n.mu.Unlock()
	n.Deployer.Notify(org)
}

// NotifyGlobal counts and forwards.
func (n *notifyRecorder) NotifyGlobal() {
	n.mu.Lock()
	n.global++
	n.mu.Unlock()
	n.Deployer.NotifyGlobal()
}

// counts returns the notifications of org and the global ones so far.
func (n *notifyRecorder) counts(org string) (int, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.orgs[org], n.global
}

// eachDB runs fn against SQLite and PostgreSQL.
func eachDB(t *testing.T, fn func(t *testing.T, h *harness)) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		fn(t, newHarness(t, open(t), deploy.Discard{}))
	})
}

func newHarness(t testing.TB, store *orgstore.Store, pub deploy.Publisher) *harness {
	t.Helper()
	return newHarnessConfig(t, deploy.Config{Store: store, Publisher: pub})
}

// newHarnessConfig is newHarness with more of the deploy configuration.
// tune adjusts the API's configuration.
func newHarnessConfig(t testing.TB, cfg deploy.Config, tune ...func(*Config)) *harness {
	t.Helper()
	store := cfg.Store.(*orgstore.Store)
	reg := prometheus.NewRegistry()
	cfg.Workers, cfg.Registerer = 2, reg
	cfg.RetryMin, cfg.RetryMax = 10*time.Millisecond, 100*time.Millisecond
	d, err := deploy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	notes := &notifyRecorder{Deployer: d, orgs: map[string]int{}}
	tokens, err := access.New(access.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	_, admin, err := tokens.Create(context.Background(), access.Principal{Role: access.RoleAdmin}, access.NewToken{Role: access.RoleAdmin, Name: "harness"})
	if err != nil {
		t.Fatal(err)
	}
	// An empty activity store, so that the reports answer like every
	// other endpoint (TestActivityWithoutStore takes it away).
	acfg := Config{Store: store, Deployer: notes, Tokens: tokens, Activity: emptyActivity{}}
	for _, f := range tune {
		f(&acfg)
	}
	api, err := New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	// The audit as the orgmanager wires it (internal/app): inside the
	// guard, so that its records name the token the guard verified, and
	// told of the writes the guard refuses.
	auditor, err := access.NewAuditor(access.AuditorConfig{Store: store, RequestID: httpapi.RequestID, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// The tests send many refused requests from one address; the failure
	// limit has a test of its own (TestFailureLimit).
	guard, err := access.NewGuard(access.GuardConfig{Verifier: tokens, Protected: Protected, Authorize: Authorize,
		Refused: auditor.Refused, Failures: access.FailureLimit{Max: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := httpapi.NewRouter(httpapi.RouterConfig{Registerer: reg, Guard: guard.Check, Wrap: auditor.Handler})
	if err != nil {
		t.Fatal(err)
	}
	api.Register(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return &harness{t: t, srv: srv, store: store, deployer: d, notes: notes, router: r, tokens: tokens, auditor: auditor, token: admin}
}

// authorize gives req the admin's token.
func (h *harness) authorize(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+h.token)
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; body is sent as is when it is a string or a reader
// (a reader streams, chunked), else as JSON.
func (h *harness) do(method, path string, body any) *response {
	h.t.Helper()
	return h.doAs(h.token, method, path, body)
}

// doAs is do with another token; "" sends no Authorization header.
func (h *harness) doAs(token, method, path string, body any) *response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &response{status: resp.StatusCode, header: resp.Header, body: data}
	if r.status != http.StatusNoContent && resp.Header.Get("Content-Type") != "application/json" {
		h.t.Errorf("%s %s: Content-Type %q", method, path, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("X-Request-ID") == "" {
		h.t.Errorf("%s %s: no X-Request-ID", method, path)
	}
	if r.status >= 500 {
		h.t.Errorf("%s %s: server error %d %s", method, path, r.status, data)
	}
	return r
}

// must sends a request and fails unless the status is want.
func (h *harness) must(want int, method, path string, body any) *response {
	h.t.Helper()
	r := h.do(method, path, body)
	if r.status != want {
		h.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, want, r.body)
	}
	return r
}

// decode unmarshals the body into v.
func (r *response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
}

// errorText returns the {"error": …} message, failing when there is none.
func (r *response) errorText(t testing.TB) string {
	t.Helper()
	var e map[string]any
	r.decode(t, &e)
	msg, ok := e["error"].(string)
	if !ok || msg == "" {
		t.Fatalf("no error message in %s", r.body)
	}
	return msg
}

func (r *response) version(t testing.TB) string {
	t.Helper()
	v := r.header.Get("X-Org-Version")
	if v == "" {
		t.Fatalf("no X-Org-Version (status %d, body %s)", r.status, r.body)
	}
	return v
}

// expectError checks status and that the message contains want.
func (h *harness) expectError(status int, method, path string, body any, want string) {
	h.t.Helper()
	r := h.must(status, method, path, body)
	if msg := r.errorText(h.t); !strings.Contains(msg, want) {
		h.t.Errorf("%s %s: error %q does not contain %q", method, path, msg, want)
	}
}

// org creates an organisation with prefixes.
func (h *harness) org(id string, prefixes ...string) {
	h.t.Helper()
	h.must(200, "PUT", "/org/"+id, nil)
	if len(prefixes) > 0 {
		h.must(200, "PATCH", "/org/"+id+"/prefixes", map[string]any{"add": prefixes})
	}
}

type rangesResponse struct {
	Version    int64               `json:"version"`
	Dirty      bool                `json:"dirty"`
	DirtySince string              `json:"dirty_since"`
	Ranges     []map[string]string `json:"ranges"`
}

// settled waits until the organisation's effective ranges are not dirty
// and returns them.
func (h *harness) settled(org string) rangesResponse {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rr rangesResponse
		h.must(200, "GET", "/org/"+org+"/effective-ranges", nil).decode(h.t, &rr)
		if !rr.Dirty {
			return rr
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s still dirty after 10s: %+v", org, rr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
