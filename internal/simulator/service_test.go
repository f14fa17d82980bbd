package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// orgSettings is a settings read model for tests: documents of one org by
// scope.
type orgSettings map[settings.Scope]*settings.Document

func (o orgSettings) Version(string) uint64 { return 1 }

func (o orgSettings) Stack(org string, a identity.Attributes) settings.Stack {
	var st settings.Stack
	if org == "" {
		return st
	}
	if d := o[settings.Scope{Kind: settings.ScopeOrg}]; d != nil {
		st.Org = settings.Layer{Name: "org:" + org, Doc: d}
	}
	if d := o[settings.Scope{Kind: settings.ScopeUsername, Value: a.Username}]; d != nil && a.Username != "" {
		st.Username = settings.Layer{Name: "username:" + a.Username, Doc: d}
	}
	return st
}

type fixture struct {
	t     testing.TB
	base  string
	svc   *Service
	reg   *prometheus.Registry
	feeds *feeds.Client
}

type fixtureOpts struct {
	workers int
	file    string
	keys    []string
	noFeeds bool
	// pprof is http.pprof.
	pprof bool
	// callTimeout is lua.call_timeout; 0 is the default 5s.
	callTimeout time.Duration
	// log receives the service's log; nil discards it.
	log *slog.Logger
}

// buildFeed writes a feed directory from a CSV source: bad.example is
// code 3 (malware), ads.example code 7.
func buildFeed(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	csv := filepath.Join(dir, "src.csv")
	if err := os.WriteFile(csv, []byte("bad.example,3\nads.example,7\nshop.example/cart,7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := feedbuild.ParseSource("csv:-:" + csv)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "feed")
	if _, err := feedbuild.Build(context.Background(), feedbuild.BuildConfig{Dir: out, Name: "test",
		Titles: map[uint16]string{3: "malware", 7: "ads"}, Sources: []feedbuild.Source{src}}); err != nil {
		t.Fatal(err)
	}
	return out
}

func newFixture(t testing.TB, o fixtureOpts) *fixture {
	t.Helper()
	if o.workers == 0 {
		o.workers = 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var cfgs []feeds.FeedConfig
	if !o.noFeeds {
		cfgs = []feeds.FeedConfig{{Name: "test", URL: buildFeed(t), PollInterval: 50 * time.Millisecond}}
	}
	fc, err := feeds.New(feeds.Config{Feeds: cfgs})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = fc.Run(ctx) }()
	if !o.noFeeds {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if err := fc.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
	}
	alice := identity.Attributes{Username: "alice"}
	pfx := netip.MustParsePrefix("10.0.0.2/32")
	// kid's tablet, found by its encrypted-DNS client id (client_id=kid1).
	kid := identity.Attributes{Username: "kid", DeviceID: "clientid:kid1"}
	kidPfx := netip.MustParsePrefix("10.0.0.9/32")
	ix := sessionindex.Empty().Apply([]*session.Session{{
		ID: session.NewID(identity.Identity{Org: "acme", Attributes: alice}, pfx), Org: "acme",
		Allocations: []netip.Prefix{pfx}, Attributes: alice,
	}, {
		ID: session.NewID(identity.Identity{Org: "acme", Attributes: kid}, kidPfx), Org: "acme",
		Allocations: []netip.Prefix{kidPfx}, Attributes: kid,
	}}, nil)
	st := orgSettings{{Kind: settings.ScopeUsername, Value: "alice"}: mustParse(t, `{"blocked_categories":[3]}`)}
	eng, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View {
		return policy.View{Sessions: ix, Settings: st, Categories: fc.Set()}
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var fs FeedSet = fc
	svc, err := New(Config{Engine: eng, Feeds: fs, Workers: o.workers, File: o.file, APIKeys: o.keys, PProf: o.pprof, CallTimeout: o.callTimeout,
		Region: "eu-test", Version: "test-1", Registerer: reg, Logger: o.log,
		Sizes: indexSizes{ix}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	if err := svc.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	svc.Mount(router)
	httpapi.MountStandard(router, httpapi.StandardConfig{Service: "simulator", Version: "test-1", Gatherer: reg, Info: svc.Info})
	srv, err := httpapi.Listen(httpapi.Config{Address: "127.0.0.1:0"}, router, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx) }()
	return &fixture{t: t, base: "http://" + srv.Addr().String(), svc: svc, reg: reg, feeds: fc}
}

func mustParse(t testing.TB, s string) *settings.Document {
	t.Helper()
	d, err := settings.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (f *fixture) do(req *http.Request) (int, http.Header, map[string]any) {
	f.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &m); err != nil {
			f.t.Fatalf("%s %s: body %q is not a JSON object: %v", req.Method, req.URL, b, err)
		}
	}
	return resp.StatusCode, resp.Header, m
}

func (f *fixture) get(path string, hdr ...string) (int, map[string]any) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.base+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	code, _, m := f.do(req)
	return code, m
}

func TestDomainLookup(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	code, m := f.get("/api/v1/domain?domain=WWW.Bad.Example.")
	if code != 200 || m["domain"] != "www.bad.example" {
		t.Fatalf("%d %v", code, m)
	}
	cats := m["categories"].([]any)
	c := cats[0].(map[string]any)
	if len(cats) != 1 || c["code"] != 3.0 || c["title"] != "malware" || c["feed"] != "test" || c["match"] != "bad.example" {
		t.Fatalf("categories %v", cats)
	}
	if code, m := f.get("/api/v1/domain?domain=shop.example&path=/cart/1"); code != 200 ||
		m["categories"].([]any)[0].(map[string]any)["match"] != "shop.example/cart" {
		t.Fatalf("path lookup: %d %v", code, m)
	}
	if code, m := f.get("/api/v1/domain?domain=clean.example"); code != 200 || len(m["categories"].([]any)) != 0 {
		t.Fatalf("clean: %d %v", code, m)
	}
	if code, m := f.get("/api/v1/domain"); code != 400 || m["error"] == nil {
		t.Fatalf("no domain: %d %v", code, m)
	}
}

func TestSimulate(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	// alice by ip: her own blocked category.
	code, m := f.get("/api/v1/simulate?domain=www.bad.example&ip=10.0.0.2")
	if code != 200 || m["verdict"] != "block" || m["action"] != "nxdomain" || m["reason"] != "category" ||
		m["rule"] != "category:3 feed=test key=bad.example" {
		t.Fatalf("%d %v", code, m)
	}
	id := m["identity"].(map[string]any)
	if id["by"] != "ip" || id["org"] != "acme" || id["username"] != "alice" || id["ip"] != "10.0.0.2" {
		t.Fatalf("identity %v", id)
	}
	if p, ok := id["profile"]; !ok || p != nil {
		t.Fatalf("identity.profile %v, %v: want null", p, ok)
	}
	ans := m["answer"].(map[string]any)
	if ans["rcode"] != "NXDOMAIN" || ans["ede"].(map[string]any)["code"] != 17.0 {
		t.Fatalf("answer %v", ans)
	}
	if layers := m["layers"].([]any); len(layers) != 1 || layers[0] != "username:alice" {
		t.Fatalf("layers %v", layers)
	}
	if _, ok := m["log"]; ok {
		t.Fatal("log without verbose")
	}
	if tr := m["trace"].([]any); len(tr) < 3 || tr[0].(map[string]any)["step"] != "identity" {
		t.Fatalf("trace %v", tr)
	}
	// POST, form-encoded, verbose, with request settings: the same name allowed.
	form := url.Values{"domain": {"www.bad.example"}, "username": {"alice"}, "verbose": {"1"},
		"settings": {`{"allowlist":["bad.example"]}`}}
	req, _ := http.NewRequest(http.MethodPost, f.base+"/api/v1/simulate", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	code, _, m = f.do(req)
	if code != 200 || m["verdict"] != "allow" || m["reason"] != "allowlist" || m["identity"].(map[string]any)["by"] != "username" {
		t.Fatalf("POST: %d %v", code, m)
	}
	if lg, ok := m["log"].([]any); !ok || len(lg) < 5 {
		t.Fatalf("verbose log: %v", m["log"])
	}
	// No identity: the global layer (none here) allows.
	if code, m := f.get("/api/v1/simulate?domain=bad.example"); code != 200 || m["verdict"] != "allow" ||
		m["identity"].(map[string]any)["by"] != "none" {
		t.Fatalf("no identity: %d %v", code, m)
	}
	// Bad input: 400 with an error, never a 500.
	for _, q := range []string{"", "domain=a.example&ip=nope", "domain=a.example&deviceid=xyz",
		"domain=a.example&settings=%7B%22paused%22%3A1%7D", "domain=a.example&profile=1.5"} {
		if code, m := f.get("/api/v1/simulate?" + q); code != 400 || m["error"] == nil {
			t.Errorf("%q: %d %v", q, code, m)
		}
	}
	req, _ = http.NewRequest(http.MethodPost, f.base+"/api/v1/simulate", strings.NewReader(`{"domain":"a"}`))
	req.Header.Set("Content-Type", "application/json")
	if code, _, m := f.do(req); code != 400 || m["error"] == nil {
		t.Fatalf("JSON POST: %d %v", code, m)
	}
}

func TestAPIKeys(t *testing.T) {
	f := newFixture(t, fixtureOpts{keys: []string{"k1", "k2"}})
	for _, p := range []string{"/api/v1/domain?domain=a.example", "/api/v1/simulate?domain=a.example", "/api/v1/codemappings"} {
		if code, m := f.get(p); code != 401 || m["error"] == nil {
			t.Errorf("%s without a key: %d %v", p, code, m)
		}
		if code, _ := f.get(p, "X-API-Key", "k3"); code != 401 {
			t.Errorf("%s with an unknown key: %d", p, code)
		}
		if code, _ := f.get(p, "X-API-Key", "k2"); code != 200 {
			t.Errorf("%s with a key: %d", p, code)
		}
	}
	if code, m := f.get("/api/v1/info"); code != 200 || m["region"] != "eu-test" {
		t.Fatalf("info needs no key: %d %v", code, m)
	}
}

func TestCodeMappingsAndInfo(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	code, m := f.get("/api/v1/codemappings")
	if code != 200 {
		t.Fatalf("%d %v", code, m)
	}
	if codes := m["codes"].([]any); len(codes) != 2 || codes[0].(map[string]any)["title"] != "malware" {
		t.Fatalf("codes %v", codes)
	}
	code, m = f.get("/api/v1/info")
	fs := m["feeds"].([]any)
	if code != 200 || m["version"] != "test-1" || m["sessions"] != 2.0 || len(fs) != 1 || fs[0].(map[string]any)["entries"] != 3.0 {
		t.Fatalf("info %d %v", code, m)
	}
	for _, k := range []string{"settings_documents", "updated_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("info without %s", k)
		}
	}
	// The status page echoes the info payload and links to metrics and API.
	resp, err := http.Get(f.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"eu-test", "/metrics"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("status page without %q", want)
		}
	}

	nf := newFixture(t, fixtureOpts{noFeeds: true})
	req, _ := http.NewRequest(http.MethodGet, nf.base+"/api/v1/codemappings", nil)
	if code, _, m := nf.do(req); code != 204 || m != nil {
		t.Fatalf("without feeds: %d %v", code, m)
	}
}

// TestMetricsNames: the simulator API's metric names, exactly, and they move.
func TestMetricsNames(t *testing.T) {
	f := newFixture(t, fixtureOpts{workers: 3})
	f.get("/api/v1/simulate?domain=a.example&ip=10.0.0.2")
	f.get("/api/v1/domain?domain=a.example")
	if got := testutil.ToFloat64(f.svc.metrics.workers); got != 3 {
		t.Errorf("lua_workers %v", got)
	}
	if got := testutil.ToFloat64(f.svc.metrics.calls.WithLabelValues(CallSimulateUser)); got != 1 {
		t.Errorf("simulate_user calls %v", got)
	}
	if got := testutil.ToFloat64(f.svc.metrics.calls.WithLabelValues(CallInfo)); got < 1 {
		t.Errorf("info calls %v", got)
	}
	resp, err := http.Get(f.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`svc_platform_version_info{version="test-1"} 1`, "svc_pf_simulator_lua_workers 3",
		`svc_pf_simulator_lua_call_total{call="lookup_domain"} 1`, `svc_pf_simulator_lua_call_error_total{call="maintenance"} 0`,
		`svc_pf_simulator_info{region="eu-test"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics without %q", want)
		}
	}
}

func writeScript(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "entry.lua")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOperatorScript: a lua.file wraps a built-in; a script error is a 500
// and a call error; a bad request table from a script is still a 400.
func TestOperatorScript(t *testing.T) {
	file := writeScript(t, `
local svcpf = require("svcpf")
function lookup_domain(req)
  if req.domain == "boom.example" then error("boom") end
  local r = svcpf.lookup_domain(req)
  r.wrapped = true
  return r
end
function simulate_user(req)
  req.ip = "not an ip"
  return svcpf.simulate_user(req)
end
function codemappings() return svcpf.codemappings() end
function maintenance() return {} end
function info() local i = svcpf.info(); i.region = "scripted"; return i end
`)
	f := newFixture(t, fixtureOpts{file: file})
	if code, m := f.get("/api/v1/domain?domain=bad.example"); code != 200 || m["wrapped"] != true {
		t.Fatalf("wrapped: %d %v", code, m)
	}
	if code, m := f.get("/api/v1/domain?domain=boom.example"); code != 500 || !strings.Contains(m["error"].(string), "boom") {
		t.Fatalf("script error: %d %v", code, m)
	}
	if got := testutil.ToFloat64(f.svc.metrics.callErrors.WithLabelValues(CallLookupDomain)); got != 1 {
		t.Errorf("call errors %v", got)
	}
	if code, m := f.get("/api/v1/simulate?domain=a.example"); code != 400 || !strings.Contains(m["error"].(string), "ip") {
		t.Fatalf("bad table from a script: %d %v", code, m)
	}
	if code, m := f.get("/api/v1/info"); code != 200 || m["region"] != "scripted" {
		t.Fatalf("scripted info: %d %v", code, m)
	}
}

// TestBadEntryFile: a worker that cannot load the entry file fails New and
// counts the creation error.
func TestBadEntryFile(t *testing.T) {
	for _, file := range []string{writeScript(t, "function simulate_user(req) return {"), filepath.Join(t.TempDir(), "missing.lua")} {
		reg := prometheus.NewRegistry()
		eng, _ := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return policy.View{} }})
		_, err := New(Config{Engine: eng, Workers: 2, File: file, Registerer: reg})
		if err == nil {
			t.Fatalf("%s: loaded", file)
		}
		mfs, _ := reg.Gather()
		found := false
		for _, mf := range mfs {
			if mf.GetName() == "svc_pf_simulator_lua_worker_create_error_total" && len(mf.GetMetric()) > 0 &&
				mf.GetMetric()[0].GetCounter().GetValue() > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: worker create error not counted (%v)", file, err)
		}
	}
}

// TestQueuedClientLeaves: with one worker busy on a slow call, a client
// that gives up while queued frees its place: its call never runs, and the
// next request is served once the slow one ends.
func TestQueuedClientLeaves(t *testing.T) {
	file := writeScript(t, `
local svcpf = require("svcpf")
function lookup_domain(req)
  if req.domain == "slow.example" then local n = 0; for i = 1, 3000000 do n = n + i end end
  return svcpf.lookup_domain(req)
end
function simulate_user(req) return svcpf.simulate_user(req) end
function codemappings() return svcpf.codemappings() end
function maintenance() return {} end
function info() return svcpf.info() end
`)
	// The slow call must not hit the call bound on a loaded machine under
	// -race (3M iterations took over 5 s there): only its holding the
	// worker matters here.
	f := newFixture(t, fixtureOpts{workers: 1, file: file, callTimeout: time.Minute})
	before := testutil.ToFloat64(f.svc.metrics.calls.WithLabelValues(CallLookupDomain))
	var wg sync.WaitGroup
	wg.Go(func() {
		if code, m := f.get("/api/v1/domain?domain=slow.example"); code != 200 {
			t.Errorf("slow: %d %v", code, m)
		}
	})
	// Wait until the slow call holds the worker.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(f.svc.metrics.calls.WithLabelValues(CallLookupDomain)) == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/api/v1/domain?domain=queued.example", nil)
	_, err := http.DefaultClient.Do(req)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("the queued request ended with %v (the slow call may have finished first)", err)
	}
	wg.Wait()
	if code, _ := f.get("/api/v1/domain?domain=after.example"); code != 200 {
		t.Fatalf("after: %d", code)
	}
	// slow + after ran; the abandoned request did not (when it was queued).
	if got := testutil.ToFloat64(f.svc.metrics.calls.WithLabelValues(CallLookupDomain)) - before; got != 2 && errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v lookup_domain calls ran, want 2: the abandoned request kept its place", got)
	}
}

// TestNATS: the four calls over the micro service, with errors as codes.
func TestNATS(t *testing.T) {
	f := newFixture(t, fixtureOpts{keys: []string{"k"}})
	bus := natstest.Start(t)
	stop, err := f.svc.ServeNATS(NATSConfig{Conn: bus.NC})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	call := func(ep, payload, key string) (map[string]any, string) {
		msg := natsMsg(NATSGroup+"."+ep, payload, key)
		reply, err := bus.NC.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(reply.Data, &m)
		return m, reply.Header.Get("Nats-Service-Error-Code")
	}
	if m, code := call(NATSSimulate, `{"domain":"bad.example","ip":"10.0.0.2"}`, "k"); code != "" || m["verdict"] != "block" {
		t.Fatalf("simulate: %s %v", code, m)
	}
	if m, code := call(NATSSimulate, `{"domain":"bad.example","ip":"x"}`, "k"); code != "400" || m["error"] == nil {
		t.Fatalf("bad ip: %s %v", code, m)
	}
	if _, code := call(NATSDomain, `{"domain":"bad.example"}`, ""); code != "401" {
		t.Fatalf("no key: %s", code)
	}
	if m, code := call(NATSDomain, `{"domain":"bad.example"}`, "k"); code != "" || len(m["categories"].([]any)) != 1 {
		t.Fatalf("domain: %s %v", code, m)
	}
	if m, code := call(NATSCodeMaps, ``, "k"); code != "" || len(m["codes"].([]any)) != 2 {
		t.Fatalf("codemappings: %s %v", code, m)
	}
	if m, code := call(NATSInfo, ``, ""); code != "" || m["region"] != "eu-test" {
		t.Fatalf("info: %s %v", code, m)
	}
	if m, code := call(NATSSimulate, `[1]`, "k"); code != "400" || m["error"] == nil {
		t.Fatalf("not an object: %s %v", code, m)
	}
}

func natsMsg(subject, payload, key string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	if key != "" {
		m.Header.Set("X-API-Key", key)
	}
	return m
}

// TestScriptChangesTheBody: a built-in's result reaches the script as a Go
// object (luapool wraps it); a script that reads, changes, adds, deletes
// and iterates its fields gets the body it made, and the next answer is
// untouched by it.
func TestScriptChangesTheBody(t *testing.T) {
	file := writeScript(t, `
local svcpf = require("svcpf")
function lookup_domain(req) return svcpf.lookup_domain(req) end
function simulate_user(req)
  local r = svcpf.simulate_user(req)
  if req.vhost ~= "edit" then return r end
  r.vhost = req.vhost
  r.identity.note = "seen by " .. r.identity.username
  local n = 0
  for k, v in pairs(r) do n = n + 1 end
  r.fields = n
  table.insert(r.layers, "script")
  r.categories[1].title = string.upper(r.categories[1].title)
  r.settings.filtering = false
  r.trace = nil
  return r
end
function codemappings() return svcpf.codemappings() end
function maintenance() return {} end
function info() return svcpf.info() end
`)
	f := newFixture(t, fixtureOpts{file: file})
	code, m := f.get("/api/v1/simulate?domain=www.bad.example&ip=10.0.0.2&vhost=edit")
	if code != 200 {
		t.Fatalf("%d %v", code, m)
	}
	id := m["identity"].(map[string]any)
	layers := m["layers"].([]any)
	cat := m["categories"].([]any)[0].(map[string]any)
	if m["vhost"] != "edit" || id["note"] != "seen by alice" || m["fields"] != 13.0 ||
		layers[len(layers)-1] != "script" || cat["title"] != "MALWARE" || m["settings"].(map[string]any)["filtering"] != false {
		t.Fatalf("changed body %v", m)
	}
	if _, ok := m["trace"]; ok {
		t.Fatalf("trace not deleted: %v", m)
	}
	if p, ok := id["profile"]; !ok || p != nil {
		t.Fatalf("identity.profile %v, %v: want null", p, ok)
	}
	// The next answer of the same policy: nothing of the change is left in
	// the shared settings document or anywhere else.
	code, m = f.get("/api/v1/simulate?domain=www.bad.example&ip=10.0.0.2")
	if code != 200 || m["settings"].(map[string]any)["filtering"] != true ||
		m["categories"].([]any)[0].(map[string]any)["title"] != "malware" || m["vhost"] != nil || m["trace"] == nil {
		t.Fatalf("unchanged body %d %v", code, m)
	}
}

// TestScriptReadsRenderedParts: identity, categories, layers, answer and
// trace reach a script as rendered JSON (renderParts) and read as the
// tables they were: strings, numbers, booleans and arrays with #.
func TestScriptReadsRenderedParts(t *testing.T) {
	file := writeScript(t, `
local svcpf = require("svcpf")
function lookup_domain(req) return svcpf.lookup_domain(req) end
function simulate_user(req)
  local r = svcpf.simulate_user(req)
  local steps = {}
  for i, e in ipairs(r.trace) do steps[i] = e.step end
  return {first = r.trace[1].step, steps = #r.trace, joined = table.concat(steps, ","),
    by = r.identity.by, profile_nil = r.identity.profile == nil, code = r.categories[1].code + 1,
    rcode = r.answer.rcode, ede = r.answer.ede and r.answer.ede.code or 0, layers = #r.layers,
    layer1 = r.layers[1]}
end
function codemappings() return svcpf.codemappings() end
function maintenance() return {} end
function info() return svcpf.info() end
`)
	f := newFixture(t, fixtureOpts{file: file})
	_, want := newFixture(t, fixtureOpts{}).get("/api/v1/simulate?domain=www.bad.example&ip=10.0.0.2")
	code, m := f.get("/api/v1/simulate?domain=www.bad.example&ip=10.0.0.2")
	if code != 200 {
		t.Fatalf("%d %v", code, m)
	}
	trace := want["trace"].([]any)
	var steps []string
	for _, e := range trace {
		steps = append(steps, e.(map[string]any)["step"].(string))
	}
	ans := want["answer"].(map[string]any)
	ede := 0.0
	if e, ok := ans["ede"].(map[string]any); ok {
		ede = e["code"].(float64)
	}
	layers := want["layers"].([]any)
	if m["first"] != "identity" || m["steps"] != float64(len(trace)) || m["joined"] != strings.Join(steps, ",") ||
		m["by"] != "ip" || m["profile_nil"] != true ||
		m["code"] != want["categories"].([]any)[0].(map[string]any)["code"].(float64)+1 ||
		m["rcode"] != ans["rcode"] || m["ede"] != ede || m["layers"] != float64(len(layers)) || len(layers) == 0 || m["layer1"] != layers[0] {
		t.Fatalf("script read %v\nfrom body %v", m, want)
	}
}

// indexSizes sizes the test's subscriber index as the node sizes its read
// models.
type indexSizes struct{ ix *sessionindex.Index }

func (s indexSizes) SessionCount() int        { return s.ix.Len() }
func (indexSizes) SettingsDocumentCount() int { return 0 }

// TestNATSUnreachableNamed: registering the NATS API while its server
// cannot be reached fails naming the server, not with nats.go's bare
// "timeout".
func TestNATSUnreachableNamed(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	nc, natsURL := natstest.Unreachable(t)
	stop, err := f.svc.ServeNATS(NATSConfig{Conn: nc, Timeout: 200 * time.Millisecond})
	if err == nil {
		_ = stop()
		t.Fatal("ServeNATS without a NATS server: no error")
	}
	if want := "not connected to NATS at " + natsURL; !strings.Contains(err.Error(), want) {
		t.Fatalf("ServeNATS = %v, want an error naming %q", err, want)
	}
}
