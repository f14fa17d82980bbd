package api_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/api"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

const (
	testKey      = "changeme-key" // PowerDNS's test_helper default APIKEY
	testPassword = "something"
)

// server is a resolver API on a real HTTP server on 127.0.0.1, with the
// standard pages (status page, /health, /metrics) mounted as the resolver
// mounts them.
type server struct {
	url      string
	counters *stats.Counters
	handler  http.Handler
}

func start(t testing.TB, cfg api.Config) *server {
	t.Helper()
	reg := prometheus.NewRegistry()
	counters, err := stats.New(stats.Config{Registerer: reg, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stats == nil {
		cfg.Stats = counters
	}
	if cfg.Version == "" {
		cfg.Version = "0.0.0-test"
	}
	a, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Register(router)
	httpapi.MountStandard(router, httpapi.StandardConfig{Service: "resolver", Version: cfg.Version, Gatherer: reg})
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	return &server{url: srv.URL, counters: counters, handler: router}
}

func startDefault(t testing.TB) *server {
	return start(t, api.Config{APIKey: testKey, Password: testPassword})
}

// get does a request with PowerDNS's test session headers (the key and an
// Origin) unless hdr replaces them.
func (s *server) do(t testing.TB, method, path string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hdr == nil {
		hdr = map[string]string{"X-API-Key": testKey, "Origin": s.url}
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Request-ID") == "" {
		t.Errorf("%s %s: no X-Request-ID", method, path)
	}
	return resp, body
}

func (s *server) get(t testing.TB, path string) (*http.Response, []byte) {
	t.Helper()
	return s.do(t, http.MethodGet, path, nil)
}

// assertSuccessJSON is test_helper's assert_success_json: a 2xx with the
// content type exactly application/json.
func assertSuccessJSON(t testing.TB, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		t.Fatalf("%s: %d %s", resp.Request.URL, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", resp.Request.URL, ct)
	}
}

func decode[T any](t testing.TB, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return v
}

func names(items []map[string]any) []string {
	var out []string
	for _, e := range items {
		n, _ := e["name"].(string)
		out = append(out, n)
	}
	return out
}

// The tests below port PowerDNS's regression-tests.api (rec-4.8.4) for the
// recursor and these endpoints, assertion by assertion; the Python test
// each comes from is named in its comment.

// test_Discovery.py test_discovery
func TestPDNSDiscovery(t *testing.T) {
	s := startDefault(t)
	resp, body := s.get(t, "/api")
	assertSuccessJSON(t, resp, body)
	if got := decode[[]map[string]any](t, body); len(got) != 1 || len(got[0]) != 2 || got[0]["version"] != 1.0 || got[0]["url"] != "/api/v1" {
		t.Errorf("/api: %s", body)
	}
	resp, body = s.get(t, "/api/v1")
	assertSuccessJSON(t, resp, body)
	got := decode[[]map[string]any](t, body)
	if len(got) != 1 || len(got[0]) != 2 || got[0]["server_url"] != "/api/v1/servers{/server}" {
		t.Fatalf("/api/v1: %s", body)
	}
	if f, ok := got[0]["api_features"].([]any); !ok || len(f) != 0 {
		t.Errorf("/api/v1 api_features: %s", body)
	}
}

// test_Servers.py test_list_servers
func TestPDNSListServers(t *testing.T) {
	s := startDefault(t)
	resp, body := s.get(t, "/api/v1/servers")
	assertSuccessJSON(t, resp, body)
	lst := decode[[]map[string]any](t, body)
	if len(lst) != 1 {
		t.Fatalf("%d servers, only localhost allowed in there", len(lst))
	}
	for _, k := range []string{"id", "daemon_type", "url"} {
		if _, ok := lst[0][k]; !ok {
			t.Errorf("no %q in %s", k, body)
		}
	}
	if lst[0]["id"] != "localhost" {
		t.Errorf("id %v", lst[0]["id"])
	}
}

// test_Servers.py test_servers_localhost
func TestPDNSServersLocalhost(t *testing.T) {
	s := startDefault(t)
	resp, body := s.get(t, "/api/v1/servers/localhost")
	assertSuccessJSON(t, resp, body)
	data := decode[map[string]any](t, body)
	for _, k := range []string{"id", "type", "version", "daemon_type", "url", "zones_url", "config_url"} {
		if _, ok := data[k]; !ok {
			t.Errorf("no %q in %s", k, body)
		}
	}
	if data["id"] != "localhost" || data["type"] != "Server" || data["daemon_type"] != "recursor" {
		t.Errorf("server object %s", body)
	}
}

// test_Servers.py test_read_statistics, the parts for a recursor that the
// statistics API keeps: a malformed request line first must not hurt the
// server; then uptime is listed. (Its MapStatisticItem assertions are not
// ported: the API's items are all StatisticItem.)
func TestPDNSReadStatistics(t *testing.T) {
	s := startDefault(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("GET /binary\x00\x01\xeb HTTP/1.0\r\n")); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	resp, body := s.get(t, "/api/v1/servers/localhost/statistics")
	assertSuccessJSON(t, resp, body)
	data := decode[[]map[string]any](t, body)
	if !slices.Contains(names(data), "uptime") {
		t.Errorf("uptime not in %s", body)
	}
}

// test_Servers.py test_read_one_statistic
func TestPDNSReadOneStatistic(t *testing.T) {
	s := startDefault(t)
	resp, body := s.get(t, "/api/v1/servers/localhost/statistics?statistic=uptime")
	assertSuccessJSON(t, resp, body)
	if !slices.Contains(names(decode[[]map[string]any](t, body)), "uptime") {
		t.Errorf("uptime not in %s", body)
	}
}

// test_Servers.py test_read_one_non_existent_statistic
func TestPDNSReadOneNonExistentStatistic(t *testing.T) {
	s := startDefault(t)
	resp, body := s.get(t, "/api/v1/servers/localhost/statistics?statistic=uptimeAAAA")
	if resp.StatusCode != 422 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if e := decode[map[string]any](t, body); !strings.Contains(e["error"].(string), "Unknown statistic name") {
		t.Errorf("body %s", body)
	}
}

// test_Servers.py test_read_metrics: /metrics has pdns_recursor_uptime.
// PowerDNS sends Basic auth for its webserver password; /metrics here is
// the standard page, which asks for nothing.
func TestPDNSReadMetrics(t *testing.T) {
	s := startDefault(t)
	resp, body := s.do(t, http.MethodGet, "/metrics", map[string]string{"Authorization": basic("whatever", testPassword)})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.Split(line, " ")[0] == "pdns_recursor_uptime" {
			found = true
		}
	}
	if !found {
		t.Errorf("pdns_recursor_uptime is missing")
	}
}

// test_Servers.py test_read_statistics_using_password
func TestPDNSReadStatisticsUsingPassword(t *testing.T) {
	s := startDefault(t)
	resp, body := s.do(t, http.MethodGet, "/api/v1/servers/localhost/statistics", map[string]string{"Authorization": basic("admin", testPassword)})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	assertSuccessJSON(t, resp, body)
}

// test_Basics.py test_unauth
func TestPDNSUnauth(t *testing.T) {
	s := startDefault(t)
	resp, _ := s.do(t, http.MethodGet, "/api/v1/servers/localhost", map[string]string{})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// test_Basics.py test_index_html: the status page.
func TestPDNSIndexHTML(t *testing.T) {
	s := startDefault(t)
	resp, _ := s.do(t, http.MethodGet, "/", map[string]string{"Authorization": basic("admin", testPassword)})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// test_Basics.py test_split_request: a request that arrives in two parts
// is not a 400. (The Python test waits 0.5 s between parts; any pause
// makes two writes.)
func TestPDNSSplitRequest(t *testing.T) {
	s := startDefault(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, part := range []string{"GET / HTTP/1.0\r\n", "Content-Type: text/plain\r\n\r\n"} {
		if _, err := conn.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	status, _, _ := strings.Cut(string(resp), "\r\n")
	if strings.Contains(status, "400") || !strings.HasPrefix(status, "HTTP/1.0 200") {
		t.Fatalf("got unwanted response: %q", status)
	}
}

// test_Basics.py test_cors
func TestPDNSCORS(t *testing.T) {
	s := startDefault(t)
	resp, _ := s.do(t, http.MethodOptions, "/api/v1/servers/localhost", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for k, want := range map[string]string{
		"Access-Control-Allow-Origin":  "*",
		"Access-Control-Allow-Headers": "Content-Type, X-API-Key",
		"Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE, OPTIONS",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// The tests below are svc-pf's own.

// TestStatisticsListing: the API's names, each once and in order, each a
// {"name","type":"StatisticItem","value"} with a decimal string value.
func TestStatisticsListing(t *testing.T) {
	s := startDefault(t)
	s.counters.Shard(0).Question(policy.TransportUDP, false)
	s.counters.Shard(0).Question(policy.TransportTCP, false)
	for _, path := range []string{"/api/v1/servers/localhost/statistics", "/api/v1/servers/localhost/statistics?statistic="} {
		resp, body := s.get(t, path)
		assertSuccessJSON(t, resp, body)
		items := decode[[]map[string]any](t, body)
		var want []string // the counters' items, in order (package stats pins them to PowerDNS's list)
		for _, it := range s.counters.Snapshot() {
			want = append(want, it.Name)
		}
		if got := names(items); !slices.Equal(got, want) {
			t.Fatalf("%s: names %v", path, got)
		}
		for _, it := range items {
			v, isString := it["value"].(string)
			if len(it) != 3 || it["type"] != "StatisticItem" || !isString {
				t.Fatalf("item %v", it)
			}
			if _, err := strconv.ParseUint(v, 10, 64); err != nil {
				t.Errorf("%v: value %q", it["name"], v)
			}
			if it["name"] == "questions" && v != "2" {
				t.Errorf("questions = %q", v)
			}
		}
	}
	resp, body := s.get(t, "/api/v1/servers/localhost/statistics?statistic=tcp-questions")
	assertSuccessJSON(t, resp, body)
	if got := decode[[]map[string]any](t, body); len(got) != 1 || got[0]["name"] != "tcp-questions" || got[0]["type"] != "StatisticItem" || got[0]["value"] != "1" {
		t.Errorf("one statistic: %s", body)
	}
}

func TestServerObject(t *testing.T) {
	s := start(t, api.Config{APIKey: testKey, Version: "1.2.3", ServerID: "ns1"})
	want := map[string]any{
		"type": "Server", "id": "ns1", "daemon_type": "recursor", "version": "1.2.3",
		"url": "/api/v1/servers/ns1", "config_url": "/api/v1/servers/ns1/config{/config_setting}",
		"zones_url": "/api/v1/servers/ns1/zones{/zone}",
	}
	resp, body := s.get(t, "/api/v1/servers/ns1")
	assertSuccessJSON(t, resp, body)
	got := decode[map[string]any](t, body)
	if len(got) != len(want) {
		t.Errorf("server object %s", body)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if resp, _ := s.get(t, "/api/v1/servers/localhost"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("localhost under another id: %d", resp.StatusCode)
	}
}

// TestErrors: status, JSON body, and PowerDNS's headers for each error.
func TestErrors(t *testing.T) {
	s := startDefault(t)
	noKey := map[string]string{}
	for _, tt := range []struct {
		method, path string
		hdr          map[string]string
		status       int
		msg          string
	}{
		{"GET", "/api/v1/servers/other", nil, 404, "Not Found"},
		{"GET", "/api/v1/servers/other/statistics", nil, 404, "Not Found"},
		{"GET", "/api/v1/servers/other/statistics?statistic=uptime", nil, 404, "Not Found"},
		{"GET", "/api/v1/servers/localhost/statistics?statistic=UPTIME", nil, 422, "Unknown statistic name"},
		{"GET", "/api/v1/servers/localhost/config", nil, 404, "no such endpoint"},
		{"GET", "/api/v1/servers/localhost/statistics/", nil, 404, "no such endpoint"},
		{"POST", "/api/v1/servers/localhost/statistics", nil, 405, "not allowed"},
		{"GET", "/api", noKey, 401, "Unauthorized"},
		{"GET", "/api/v1", noKey, 401, "Unauthorized"},
		{"GET", "/api/v1/servers", noKey, 401, "Unauthorized"},
		{"GET", "/api/v1/servers/localhost/statistics", noKey, 401, "Unauthorized"},
		{"GET", "/api/v1/servers/other/statistics", noKey, 401, "Unauthorized"},
		{"GET", "/api/v1/servers/localhost/statistics", map[string]string{"X-API-Key": testKey + "x"}, 401, "Unauthorized"},
		{"GET", "/api/v1/servers/localhost/statistics", map[string]string{"X-API-Key": strings.ToUpper(testKey)}, 401, "Unauthorized"},
		{"GET", "/api/v1/servers/localhost/statistics?api-key=wrong", noKey, 401, "Unauthorized"},
		{"GET", "/api/v1/servers/localhost/statistics", map[string]string{"Authorization": basic("admin", "wrong")}, 401, "Unauthorized"},
		// The password is for the server object and the statistics only.
		{"GET", "/api/v1/servers", map[string]string{"Authorization": basic("admin", testPassword)}, 401, "Unauthorized"},
		{"GET", "/api", map[string]string{"Authorization": basic("admin", testPassword)}, 401, "Unauthorized"},
	} {
		resp, body := s.do(t, tt.method, tt.path, tt.hdr)
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q %s", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			continue
		}
		if e := decode[httpapi.ErrorBody](t, body); !strings.Contains(e.Error, tt.msg) {
			t.Errorf("%s %s: error %q, want %q", tt.method, tt.path, e.Error, tt.msg)
		}
		if tt.status == 401 {
			if got := resp.Header.Get("WWW-Authenticate"); got != `X-API-Key realm="PowerDNS"` {
				t.Errorf("%s %s: WWW-Authenticate %q", tt.method, tt.path, got)
			}
			if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
				t.Errorf("%s %s: no CORS header on a 401", tt.method, tt.path)
			}
		}
	}
}

// TestKeyLocations: the key in the header or the query, the password by
// Basic auth where PowerDNS allows it, and security headers once in.
func TestKeyLocations(t *testing.T) {
	s := startDefault(t)
	for _, tt := range []struct {
		path string
		hdr  map[string]string
	}{
		{"/api/v1/servers/localhost/statistics", map[string]string{"X-API-Key": testKey}},
		{"/api/v1/servers/localhost/statistics?api-key=" + url.QueryEscape(testKey), map[string]string{}},
		{"/api/v1/servers/localhost/statistics?api-key=wrong", map[string]string{"X-API-Key": testKey}},
		{"/api/v1/servers/localhost/statistics", map[string]string{"X-API-Key": "wrong", "Authorization": basic("any", testPassword)}},
		{"/api/v1/servers/localhost", map[string]string{"Authorization": basic("admin", testPassword)}},
		{"/api?api-key=" + testKey, map[string]string{}},
	} {
		resp, body := s.do(t, http.MethodGet, tt.path, tt.hdr)
		assertSuccessJSON(t, resp, body)
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%s: headers %v", tt.path, resp.Header)
		}
	}
}

// TestNoKeyConfigured: without api.key nothing gets in, as in PowerDNS,
// not even with the password.
func TestNoKeyConfigured(t *testing.T) {
	s := start(t, api.Config{Password: testPassword})
	for _, hdr := range []map[string]string{
		{}, {"X-API-Key": ""}, {"Authorization": basic("admin", testPassword)},
	} {
		if resp, _ := s.do(t, http.MethodGet, "/api/v1/servers/localhost/statistics", hdr); resp.StatusCode != 401 {
			t.Errorf("%v: %d", hdr, resp.StatusCode)
		}
	}
	if resp, _ := s.do(t, http.MethodGet, "/api/v1/servers/localhost/statistics?api-key=", map[string]string{}); resp.StatusCode != 401 {
		t.Errorf("empty api-key: %d", resp.StatusCode)
	}
	// A CORS preflight carries no credentials: it is answered regardless.
	if resp, _ := s.do(t, http.MethodOptions, "/api/v1/servers/localhost/statistics", map[string]string{}); resp.StatusCode != 200 {
		t.Errorf("OPTIONS: %d", resp.StatusCode)
	}
}

func TestHead(t *testing.T) {
	s := startDefault(t)
	resp, body := s.do(t, http.MethodHead, "/api/v1/servers/localhost/statistics", nil)
	if resp.StatusCode != 200 || len(body) != 0 {
		t.Errorf("HEAD: %d, %d bytes", resp.StatusCode, len(body))
	}
}

func TestNewValidates(t *testing.T) {
	c, err := stats.New(stats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []api.Config{
		{Version: "1"},
		{Stats: c},
		{Stats: c, Version: "1", ServerID: "a/b"},
		{Stats: c, Version: "1", ServerID: ".."},
		{Stats: c, Version: "1", ServerID: "local host"},
		{Stats: c, Version: "1", ServerID: "{server}"},
		{Stats: c, Version: "1", ServerID: strings.Repeat("x", 65)},
	} {
		if _, err := api.New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if _, err := api.New(api.Config{Stats: c, Version: "1"}); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

func basic(user, pw string) string {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.SetBasicAuth(user, pw)
	return req.Header.Get("Authorization")
}
