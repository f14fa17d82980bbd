package access_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// lockedBuffer is a log destination the server's goroutines write while
// the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var testAdmin = access.Principal{TokenID: "tok-1", Name: "ops", Role: access.RoleAdmin}

// withCaller stands in for the authentication: it puts testAdmin in the
// request's context unless the request says X-Test-Anonymous.
func withCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Anonymous") == "" {
			r = r.WithContext(access.WithPrincipal(r.Context(), testAdmin))
		}
		next.ServeHTTP(w, r)
	})
}

type auditHarness struct {
	store   *orgstore.Store
	auditor *access.Auditor
	reg     *prometheus.Registry
	logs    *lockedBuffer
	srv     *httptest.Server
}

// newAuditHarness serves a few stand-in API routes on a real router and
// listener, behind the auditor's wrapper and the stand-in authentication.
func newAuditHarness(t *testing.T, store *orgstore.Store) *auditHarness {
	t.Helper()
	h := &auditHarness{store: store, reg: prometheus.NewRegistry(), logs: &lockedBuffer{}}
	log := slog.New(slog.NewTextHandler(h.logs, nil))
	var err error
	h.auditor, err = access.NewAuditor(access.AuditorConfig{Store: store, RequestID: httpapi.RequestID, Logger: log,
		Registerer: h.reg, Skip: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/ui/") }})
	if err != nil {
		t.Fatal(err)
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	versioned := func(status int, version string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if version != "" {
				w.Header().Set("X-Org-Version", version)
			}
			if status == http.StatusNoContent {
				w.WriteHeader(status)
				return
			}
			httpapi.WriteJSON(w, status, map[string]bool{"success": status < 300})
		}
	}
	router.Handle(http.MethodPut, "/org/{org}", versioned(200, "7"))
	router.Handle(http.MethodGet, "/org/{org}", versioned(200, "7"))
	router.Handle(http.MethodDelete, "/org/{org}", versioned(204, ""))
	router.Handle(http.MethodPatch, "/org/{org}/prefixes", versioned(422, ""))
	router.Handle(http.MethodPut, "/settings", versioned(200, ""))
	router.Handle(http.MethodPost, "/tokens", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, http.StatusUnauthorized, "a valid bearer token is required")
	})
	router.Handle(http.MethodPost, "/ui/orgs", versioned(200, ""))
	h.srv = httptest.NewServer(withCaller(h.auditor.Handler(router)))
	t.Cleanup(h.srv.Close)
	return h
}

// send makes a request and returns the response's status and request id.
func (h *auditHarness) send(t *testing.T, method, path string, anonymous bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if anonymous {
		req.Header.Set("X-Test-Anonymous", "1")
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Request-ID")
}

func TestAuditorRecordsEveryWrite(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		h := newAuditHarness(t, open(t))
		ctx := context.Background()
		type want struct {
			method, path, org string
			version           int64
			status            int
			role              access.Role
		}
		var wants []want
		for _, c := range []struct {
			method, path string
			anonymous    bool
			want         *want
		}{
			{"PUT", "/org/acme", false, &want{"PUT", "/org/acme", "acme", 7, 200, access.RoleAdmin}},
			{"GET", "/org/acme", false, nil}, // a read
			{"PATCH", "/org/acme/prefixes", false, &want{"PATCH", "/org/acme/prefixes", "acme", 0, 422, access.RoleAdmin}},
			{"DELETE", "/org/a%20b?confirm=true", false, &want{"DELETE", "/org/a%20b?confirm=true", "a b", 0, 204, access.RoleAdmin}},
			{"PUT", "/settings", false, &want{"PUT", "/settings", "", 0, 200, access.RoleAdmin}},
			{"POST", "/tokens", false, nil},  // 401: not recorded
			{"POST", "/ui/orgs", false, nil}, // skipped: the console records its own
			{"POST", "/nowhere", false, &want{"POST", "/nowhere", "", 0, 404, access.RoleAdmin}},
			{"PUT", "/org/acme", true, &want{"PUT", "/org/acme", "acme", 7, 200, access.AuditUnauthenticated}},
		} {
			_, id := h.send(t, c.method, c.path, c.anonymous)
			if c.want == nil {
				continue
			}
			wants = append(wants, *c.want)
			// The record is stored before the response is finished.
			recs, err := h.store.AuditRecords(ctx, access.AuditQuery{Limit: 1})
			if err != nil || len(recs) != 1 {
				t.Fatalf("%s %s: %v %v", c.method, c.path, recs, err)
			}
			r := recs[0]
			got := want{r.Method, r.Path, r.Org, r.OrgVersion, r.Status, r.Role}
			if got != *c.want || r.RequestID != id || id == "" {
				t.Errorf("%s %s: recorded %+v request id %q, want %+v request id %q", c.method, c.path, got, r.RequestID, *c.want, id)
			}
			if c.anonymous {
				if r.TokenID != "" || r.TokenName != "" {
					t.Errorf("anonymous write recorded with token %q %q", r.TokenID, r.TokenName)
				}
			} else if r.TokenID != testAdmin.TokenID || r.TokenName != testAdmin.Name {
				t.Errorf("%s %s: token %q %q", c.method, c.path, r.TokenID, r.TokenName)
			}
			if time.Since(r.Time) > time.Minute || r.Time.After(time.Now().Add(time.Second)) {
				t.Errorf("%s %s: time %v", c.method, c.path, r.Time)
			}
		}
		recs, err := h.store.AuditRecords(ctx, access.AuditQuery{Limit: 100})
		if err != nil || len(recs) != len(wants) {
			t.Fatalf("%d records, want %d (%v)", len(recs), len(wants), err)
		}
		if n := metricValue(t, h.reg, "svcpf_audit_records_total"); n != float64(len(wants)) {
			t.Errorf("svcpf_audit_records_total = %v", n)
		}
	})
}

// metricValue is the value of the registered counter name.
func metricValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// closedStore is a real store whose database connections are closed: every
// write fails, as when the database is gone.
func closedStore(t *testing.T, dialect string) *orgstore.Store {
	t.Helper()
	s, err := orgstore.Open(context.Background(), orgstore.Config{URL: storetest.URL(t, dialect)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuditorFailureKeepsTheResponse: when the database refuses the
// record, the client still gets the handler's answer, unchanged, and the
// failure is logged at ERROR with what the record held, and counted.
func TestAuditorFailureKeepsTheResponse(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		s := closedStore(t, dialect)
		h := newAuditHarness(t, s)
		req, _ := http.NewRequest("PUT", h.srv.URL+"/org/acme", nil)
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Org-Version") != "7" || strings.TrimSpace(string(body)) != `{"success":true}` {
			t.Fatalf("response changed: %d %q %s", resp.StatusCode, resp.Header.Get("X-Org-Version"), body)
		}
		if n := metricValue(t, h.reg, "svcpf_audit_write_failures_total"); n != 1 {
			t.Errorf("svcpf_audit_write_failures_total = %v, want 1", n)
		}
		logs := h.logs.String()
		for _, want := range []string{"level=ERROR", "audit record not written", "path=/org/acme", "org=acme", "token_id=tok-1",
			"request_id=" + resp.Header.Get("X-Request-ID")} {
			if !strings.Contains(logs, want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		}
	})
}

func TestAuditorRecord(t *testing.T) {
	s := storetest.Open(t, storetest.SQLite)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	a, err := access.NewAuditor(access.AuditorConfig{Store: s, Now: func() time.Time { return now },
		RequestID: func(context.Context) string { return "from-ctx" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scoped := access.Principal{TokenID: "t2", Name: "acme portal", Role: access.RoleOrgAdmin, Org: "acme"}
	// From the caller in the context, now, and the request's id.
	if err := a.Record(access.WithPrincipal(ctx, scoped), access.AuditRecord{Method: "POST", Path: "/ui/org/acme/overrides",
		Org: "acme", OrgVersion: 3, Status: 200}); err != nil {
		t.Fatal(err)
	}
	// Without a caller: unauthenticated. What the console gives is kept.
	if err := a.Record(ctx, access.AuditRecord{Time: now.Add(-time.Hour), Method: "POST", Path: "/ui/login", RequestID: "r9",
		Status: 303}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.AuditRecords(ctx, access.AuditQuery{Limit: 10})
	if err != nil || len(recs) != 2 {
		t.Fatalf("%v %v", recs, err)
	}
	first := recs[0]
	first.ID = 0
	if want := (access.AuditRecord{Time: now, TokenID: "t2", TokenName: "acme portal", Role: access.RoleOrgAdmin, Method: "POST",
		Path: "/ui/org/acme/overrides", Org: "acme", OrgVersion: 3, RequestID: "from-ctx", Status: 200}); first != want {
		t.Errorf("recorded %+v\nwant     %+v", first, want)
	}
	if r := recs[1]; r.Role != access.AuditUnauthenticated || r.RequestID != "r9" || !r.Time.Equal(now.Add(-time.Hour)) {
		t.Errorf("recorded %+v", r)
	}
	// A failure is returned to the console.
	a, err = access.NewAuditor(access.AuditorConfig{Store: closedStore(t, storetest.SQLite)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Record(ctx, access.AuditRecord{Method: "POST", Path: "/ui/x", Status: 200}); err == nil {
		t.Fatal("Record on a closed store: no error")
	}
}

func TestAuditorRetention(t *testing.T) {
	s := storetest.Open(t, storetest.SQLite)
	now := time.Now()
	ctx := context.Background()
	for _, age := range []time.Duration{49 * time.Hour, 47 * time.Hour, time.Minute} {
		if err := s.AppendAudit(ctx, access.AuditRecord{Time: now.Add(-age), Method: "PUT", Path: "/org/a", Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	keepAll, err := access.NewAuditor(access.AuditorConfig{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	if n := keepAll.Prune(ctx); n != 0 {
		t.Fatalf("no retention pruned %d", n)
	}
	keepAll.Run(ctx) // returns at once: nothing to prune, ever
	reg := prometheus.NewRegistry()
	a, err := access.NewAuditor(access.AuditorConfig{Store: s, Retention: 48 * time.Hour, Registerer: reg,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(runCtx)
	}()
	// Run prunes at start; wait for it through the metric.
	for metricValue(t, reg, "svcpf_audit_pruned_total") < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	recs, err := s.AuditRecords(ctx, access.AuditQuery{Limit: 10})
	if err != nil || len(recs) != 2 {
		t.Fatalf("after pruning at 48h: %d records, %v", len(recs), err)
	}
}

func TestNewAuditorChecksItsConfig(t *testing.T) {
	s := storetest.Open(t, storetest.SQLite)
	for name, cfg := range map[string]access.AuditorConfig{
		"no store":           {},
		"negative retention": {Store: s, Retention: -time.Hour},
		"negative interval":  {Store: s, PruneInterval: -time.Hour},
	} {
		if _, err := access.NewAuditor(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
