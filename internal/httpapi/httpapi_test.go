package httpapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestRouter(t *testing.T) (*Router, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	r, err := NewRouter(RouterConfig{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle(http.MethodGet, "/things/{id}", func(w http.ResponseWriter, req *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"id": req.PathValue("id")})
	})
	r.Handle(http.MethodDelete, "/things/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	r.Handle(http.MethodGet, "/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	r.Handle(http.MethodPost, "/echo", func(w http.ResponseWriter, req *http.Request) {
		var v map[string]any
		if err := DecodeJSON(w, req, 64, &v); err != nil {
			var be *BodyError
			errors.As(err, &be)
			WriteError(w, be.Status, be.Error())
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
	return r, reg
}

func do(t *testing.T, h http.Handler, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorOf(t *testing.T, rec *httptest.ResponseRecorder) ErrorBody {
	t.Helper()
	var e ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
		t.Fatalf("body %q is not a JSON error: %v", rec.Body, err)
	}
	return e
}

func TestRouting(t *testing.T) {
	r, _ := newTestRouter(t)

	rec := do(t, r, "GET", "/things/a", "", nil)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(rec.Body.String(), `"a"`) {
		t.Fatalf("GET: %d %q %q", rec.Code, rec.Header(), rec.Body)
	}

	rec = do(t, r, "GET", "/nothing/here", "", nil)
	if rec.Code != 404 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("unknown path: %d %v", rec.Code, rec.Header())
	}
	errorOf(t, rec)

	rec = do(t, r, "POST", "/things/a", "", nil)
	if rec.Code != 405 || rec.Header().Get("Allow") != "DELETE, GET, HEAD" {
		t.Fatalf("405: %d Allow=%q", rec.Code, rec.Header().Get("Allow"))
	}
	if e := errorOf(t, rec); !strings.Contains(e.Error, "POST") {
		t.Fatalf("405 message %q", e.Error)
	}

	if rec = do(t, r, "HEAD", "/things/a", "", nil); rec.Code != 200 {
		t.Fatalf("HEAD: %d", rec.Code)
	}
}

// TestUncleanPaths: ServeMux would redirect a path that is not in clean
// form with a 307, an HTML body and no request id; the Router answers a JSON
// 404 with the usual headers instead, for every method.
func TestUncleanPaths(t *testing.T) {
	r, _ := newTestRouter(t)
	for _, p := range []string{"//things/a", "/things/x/../a", "/things/./a", "/./panic", "/things/a/..", "/things//a", "/echo/.", "/.."} {
		for _, m := range []string{"GET", "POST", "DELETE"} {
			rec := do(t, r, m, p, "", map[string]string{"X-Request-ID": "req-u"})
			if rec.Code != 404 || rec.Header().Get("Content-Type") != "application/json" ||
				rec.Header().Get("X-Request-ID") != "req-u" || rec.Header().Get("Location") != "" {
				t.Errorf("%s %s: %d %q", m, p, rec.Code, rec.Header())
				continue
			}
			if e := errorOf(t, rec); e.Error != "no such endpoint: "+p {
				t.Errorf("%s %s: error %q", m, p, e.Error)
			}
		}
	}
	// The check is on the escaped path, as ServeMux's: an escaped dot
	// segment is data for the handler. A trailing slash is clean: the path
	// goes to the mux, whose catch-all answers the 404.
	if rec := do(t, r, "GET", "/things/%2E%2E", "", nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"id":".."`) {
		t.Errorf("GET /things/%%2E%%2E: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, r, "GET", "/things/a/", "", nil); rec.Code != 404 || rec.Header().Get("X-Request-ID") == "" {
		t.Errorf("GET /things/a/: %d %q", rec.Code, rec.Header())
	}
}

// TestSubtreePatternsRefused: ServeMux answers a subtree pattern's path
// without its trailing slash with an HTML redirect, so Handle refuses them.
func TestSubtreePatternsRefused(t *testing.T) {
	r, _ := newTestRouter(t)
	for _, p := range []string{"/dir/", "/files/{path...}"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handle(%q) did not panic", p)
				}
			}()
			r.Handle(http.MethodGet, p, func(http.ResponseWriter, *http.Request) {})
		}()
	}
	if rec := do(t, r, "GET", "/dir", "", nil); rec.Code != 404 || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET /dir: %d %q", rec.Code, rec.Header())
	}
}

func TestRoutesListed(t *testing.T) {
	r, _ := newTestRouter(t)
	got := r.Routes()
	want := []Route{{"POST", "/echo"}, {"GET", "/panic"}, {"DELETE", "/things/{id}"}, {"GET", "/things/{id}"}}
	if len(got) != len(want) {
		t.Fatalf("routes %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("routes %v, want %v", got, want)
		}
	}
}

func TestRequestID(t *testing.T) {
	r, _ := newTestRouter(t)
	rec := do(t, r, "GET", "/things/a", "", map[string]string{"X-Request-ID": "abc-123"})
	if got := rec.Header().Get("X-Request-ID"); got != "abc-123" {
		t.Fatalf("echoed id %q", got)
	}
	rec = do(t, r, "GET", "/things/a", "", nil)
	gen := rec.Header().Get("X-Request-ID")
	if len(gen) != 32 {
		t.Fatalf("generated id %q", gen)
	}
	if other := do(t, r, "GET", "/things/a", "", nil).Header().Get("X-Request-ID"); other == gen {
		t.Fatal("two requests got the same generated id")
	}
	// Unprintable or huge ids are replaced, never echoed.
	rec = do(t, r, "GET", "/things/a", "", map[string]string{"X-Request-ID": strings.Repeat("x", 200)})
	if len(rec.Header().Get("X-Request-ID")) != 32 {
		t.Fatalf("oversized id echoed: %q", rec.Header().Get("X-Request-ID"))
	}
}

func TestPanicBecomes500(t *testing.T) {
	r, reg := newTestRouter(t)
	rec := do(t, r, "GET", "/panic", "", map[string]string{"X-Request-ID": "req-9"})
	if rec.Code != 500 {
		t.Fatalf("status %d", rec.Code)
	}
	e := errorOf(t, rec)
	if e.RequestID != "req-9" || !strings.Contains(e.Detail, "boom") {
		t.Fatalf("500 body %+v", e)
	}
	mfs, _ := reg.Gather()
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "svcpf_http_requests_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == "/panic" && labels["code"] == "500" && m.Counter.GetValue() == 1 {
				found = true
			}
		}
	}
	if !found {
		t.Fatal("the 500 was not counted")
	}
}

func TestDecodeJSON(t *testing.T) {
	r, _ := newTestRouter(t)
	for _, tt := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"a":1}`, 200, ""},
		{``, 400, "empty body"},
		{`{"a":`, 400, "invalid JSON"},
		{`[1]`, 400, "must be an object"},
		{`{"a":1} {}`, 400, "trailing data"},
		{`{"a":"` + strings.Repeat("x", 100) + `"}`, 413, "larger than 64 bytes"},
	} {
		rec := do(t, r, "POST", "/echo", tt.body, nil)
		if rec.Code != tt.status {
			t.Errorf("%q: status %d, want %d (%s)", tt.body, rec.Code, tt.status, rec.Body)
			continue
		}
		if tt.msg != "" && !strings.Contains(errorOf(t, rec).Error, tt.msg) {
			t.Errorf("%q: body %s, want %q", tt.body, rec.Body, tt.msg)
		}
	}

	// A declared Content-Length over the limit is refused unread; at the
	// limit the body is read.
	for _, tt := range []struct {
		length int64
		status int
	}{{65, 413}, {64, 200}} {
		body := &countingReader{r: strings.NewReader(`{"a":"` + strings.Repeat("x", 56) + `"}`)}
		req := httptest.NewRequest("POST", "/echo", body)
		req.ContentLength = tt.length
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		if rec.Code != tt.status || (tt.status == 413) != (body.n == 0) {
			t.Errorf("Content-Length %d: status %d, %d bytes read; want %d", tt.length, rec.Code, body.n, tt.status)
		}
		if tt.status == 413 && errorOf(t, rec).Error != "request body larger than 64 bytes" {
			t.Errorf("Content-Length %d: %s", tt.length, rec.Body)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestStandardPages(t *testing.T) {
	r, reg := newTestRouter(t)
	notReady := errors.New("loading")
	MountStandard(r, StandardConfig{
		Service: "demo", Version: "v1", Gatherer: reg,
		Ready: func() error { return notReady },
		Info:  func() any { return map[string]int{"orgs": 3} },
		Links: map[string]string{"API": "/openapi.yaml"},
	})
	rec := do(t, r, "GET", "/health", "", nil)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "loading") {
		t.Fatalf("health while loading: %d %s", rec.Code, rec.Body)
	}
	notReady = nil
	if rec = do(t, r, "GET", "/health", "", nil); rec.Code != 200 {
		t.Fatalf("health: %d", rec.Code)
	}
	rec = do(t, r, "GET", "/", "", nil)
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") ||
		!strings.Contains(rec.Body.String(), `&#34;orgs&#34;: 3`) || !strings.Contains(rec.Body.String(), `href="/openapi.yaml"`) {
		t.Fatalf("status page: %d %q\n%s", rec.Code, rec.Header(), rec.Body)
	}
	rec = do(t, r, "GET", "/metrics", "", nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "svcpf_http_requests_total") ||
		strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("metrics: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec = do(t, r, "POST", "/", "", nil); rec.Code != 405 {
		t.Fatalf("POST /: %d", rec.Code)
	}
}

func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	r, _ := newTestRouter(t)
	srv, err := Listen(Config{Address: "127.0.0.1:0", TLS: TLSConfig{CertFile: certFile, KeyFile: keyFile}}, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://" + srv.Addr().String() + "/things/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || !strings.Contains(string(body), `"x"`) {
		t.Fatalf("TLS GET: %d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{Address: "nohostport"},
		{Address: "127.0.0.1:0", TLS: TLSConfig{CertFile: "x"}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := Listen(Config{Address: "127.0.0.1:0", TLS: TLSConfig{CertFile: "/nonexistent", KeyFile: "/nonexistent"}}, http.NotFoundHandler(), nil); err == nil {
		t.Error("missing certificate files accepted")
	}
}

func writeSelfSigned(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add(`{"a":1}`)
	f.Add(`{"a":`)
	f.Add(`[] []`)
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "/", strings.NewReader(body))
		var v map[string]any
		err := DecodeJSON(httptest.NewRecorder(), req, 1<<10, &v)
		if err != nil {
			var be *BodyError
			if !errors.As(err, &be) || be.Status < 400 || be.Status > 499 {
				t.Fatalf("%q: error %v is not a 4xx BodyError", body, err)
			}
		}
	})
}

// TestStalledBodyIsCut: a client that sends part of a body and then stops
// loses its connection after BodyStallTimeout, while the handler gets an
// error instead of waiting; a body that keeps arriving slowly is read whole.
func TestStalledBodyIsCut(t *testing.T) {
	r, err := NewRouter(RouterConfig{BodyStallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 4)
	r.Handle(http.MethodPost, "/echo", func(w http.ResponseWriter, req *http.Request) {
		var v map[string]any
		err := DecodeJSON(w, req, 1<<20, &v)
		got <- err
		if err != nil {
			WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	send := func(parts []string, pause time.Duration, declared int) (string, time.Duration) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		fmt.Fprintf(conn, "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", declared)
		for _, p := range parts {
			if _, err := conn.Write([]byte(p)); err != nil {
				break
			}
			time.Sleep(pause)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, _ := io.ReadAll(conn)
		return string(resp), time.Since(start)
	}

	// Stalled: 10 of 30 declared bytes, then nothing.
	resp, took := send([]string{`{"a":"0123`}, 0, 30)
	if took > 5*time.Second {
		t.Fatalf("a stalled body held the connection for %v", took)
	}
	if err := <-got; err == nil {
		t.Fatalf("the handler read a stalled body without an error; response %q", resp)
	}
	// Slow but steady: each part within the stall timeout, 1 s in all.
	body := `{"a":"0123456789"}`
	var parts []string
	for i := 0; i < len(body); i += 3 {
		parts = append(parts, body[i:min(i+3, len(body))])
	}
	resp, _ = send(parts, 150*time.Millisecond, len(body))
	if err := <-got; err != nil || !strings.Contains(resp, "200 OK") {
		t.Fatalf("a slow steady body was cut: %v; response %q", err, resp)
	}
}

// TestGuardRunsBeforeRouting: the guard sees every request of a registered
// path before its method is looked at, and of an unknown path before the
// 404, so a refusal never tells which paths or methods exist; a request it
// lets through carries what it put in the context.
func TestGuardRunsBeforeRouting(t *testing.T) {
	type key struct{}
	r, err := NewRouter(RouterConfig{Guard: func(w http.ResponseWriter, req *http.Request) (*http.Request, bool) {
		if req.Header.Get("Authorization") != "yes" {
			WriteError(w, http.StatusUnauthorized, "no")
			return nil, false
		}
		return req.WithContext(context.WithValue(req.Context(), key{}, "caller")), true
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle(http.MethodGet, "/things/{id}", func(w http.ResponseWriter, req *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"caller": req.Context().Value(key{})})
	})
	for _, c := range []struct{ method, path string }{{"GET", "/things/a"}, {"POST", "/things/a"}, {"GET", "/nothing"}, {"GET", "//things/a"}} {
		rec := do(t, r, c.method, c.path, "", nil)
		if rec.Code != 401 || rec.Header().Get("X-Request-ID") == "" {
			t.Errorf("%s %s without the header: %d %q", c.method, c.path, rec.Code, rec.Header())
		}
	}
	ok := map[string]string{"Authorization": "yes"}
	if rec := do(t, r, "GET", "/things/a", "", ok); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"caller"`) {
		t.Errorf("GET with the header: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, r, "POST", "/things/a", "", ok); rec.Code != 405 {
		t.Errorf("POST with the header: %d", rec.Code)
	}
	if rec := do(t, r, "GET", "/nothing", "", ok); rec.Code != 404 {
		t.Errorf("unknown path with the header: %d", rec.Code)
	}
}
