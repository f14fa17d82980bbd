package feedbuild

import (
	"context"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// listServer serves one list at /list.txt, as a real list server does: an
// ETag and Last-Modified, 304 to a matching If-None-Match. Tests change
// its body and its behaviour between builds.
type listServer struct {
	*httptest.Server
	mu     sync.Mutex
	body   string
	status int // non-zero: answer every request with it
	etag   bool
	// handle, when set, serves the request instead (stalls, size).
	handle func(w http.ResponseWriter, r *http.Request)

	requests    atomic.Int64
	conditional atomic.Int64 // requests carrying If-None-Match
	imsOnly     atomic.Int64 // requests carrying If-Modified-Since
}

func newListServer(t *testing.T, body string) *listServer {
	s := &listServer{body: body, etag: true}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *listServer) set(body string, status int) {
	s.mu.Lock()
	s.body, s.status = body, status
	s.mu.Unlock()
}

func (s *listServer) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	if r.Header.Get("If-None-Match") != "" {
		s.conditional.Add(1)
	}
	if r.Header.Get("If-Modified-Since") != "" {
		s.imsOnly.Add(1)
	}
	s.mu.Lock()
	body, status, etag, handle := s.body, s.status, s.etag, s.handle
	s.mu.Unlock()
	if handle != nil {
		handle(w, r)
		return
	}
	if status != 0 {
		http.Error(w, "no", status)
		return
	}
	tag := fmt.Sprintf(`"%s"`, sha256Hex([]byte(body))[:16])
	if etag {
		w.Header().Set("ETag", tag)
	}
	w.Header().Set("Last-Modified", "Sun, 01 Nov 2026 00:00:00 GMT")
	if etag && r.Header.Get("If-None-Match") == tag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if !etag && r.Header.Get("If-Modified-Since") == "Sun, 01 Nov 2026 00:00:00 GMT" {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write([]byte(body))
}

func (s *listServer) url() string { return s.URL + "/list.txt" }

// fastFetcher retries within milliseconds, so that the tests' retries cost
// no time; the timeouts stay far above what a loopback fetch takes.
func fastFetcher(t *testing.T, cfg FetchConfig) *Fetcher {
	t.Helper()
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 3
	}
	f, err := NewFetcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// urlBuild builds dir from one domains source at u (code 1).
func urlBuild(t *testing.T, dir string, f *Fetcher, u string) (*BuildResult, error) {
	t.Helper()
	src, err := ParseSource("domains:1:" + u)
	if err != nil {
		t.Fatal(err)
	}
	return Build(context.Background(), BuildConfig{Dir: dir, Name: "lists", Fetcher: f, Sources: []Source{src}})
}

// mustURLBuild is urlBuild that must succeed, with its one source's outcome.
func mustURLBuild(t *testing.T, dir string, f *Fetcher, u string) (*BuildResult, *FetchOutcome) {
	t.Helper()
	res, err := urlBuild(t, dir, f, u)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if len(res.Sources) != 1 || res.Sources[0].Fetch == nil {
		t.Fatalf("want one URL source's outcome, got %+v", res.Sources)
	}
	return res, res.Sources[0].Fetch
}

// feedContent is the feed in dir as a node reads it.
func feedContent(t *testing.T, dir string) Content {
	t.Helper()
	_, c, err := loadFeed(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func checkContent(t *testing.T, dir string, want Content) {
	t.Helper()
	if got := feedContent(t, dir); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("the feed holds %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
}

// TestURLSourceConditional: a changed list writes a new version; an
// unchanged one is asked for with If-None-Match, answered 304, and writes
// nothing; a server that gives only Last-Modified gets If-Modified-Since.
func TestURLSourceConditional(t *testing.T) {
	srv := newListServer(t, names(0, 20))
	dir := filepath.Join(t.TempDir(), "lists")
	f := fastFetcher(t, FetchConfig{})

	res, o := mustURLBuild(t, dir, f, srv.url())
	if o.Result != FetchUpdated || o.Stale || res.Written.Version != 1 {
		t.Fatalf("first build: %+v, version %d", o, res.Written.Version)
	}
	checkContent(t, dir, contentOf(t, names(0, 20), []uint16{1}))

	res, o = mustURLBuild(t, dir, f, srv.url())
	if o.Result != FetchNotModified || o.Stale || res.Written.Version != 0 || res.Manifest.Latest() != 1 {
		t.Fatalf("unchanged list: %+v, wrote version %d", o, res.Written.Version)
	}
	if n := srv.conditional.Load(); n != 1 {
		t.Fatalf("%d requests carried If-None-Match, want 1 (the second)", n)
	}

	srv.set(names(0, 21), 0)
	res, o = mustURLBuild(t, dir, f, srv.url())
	if o.Result != FetchUpdated || res.Written.Version != 2 || res.Added != 1 {
		t.Fatalf("changed list: %+v, version %d, %d added", o, res.Written.Version, res.Added)
	}
	checkContent(t, dir, contentOf(t, names(0, 21), []uint16{1}))

	// A list that changes on the server but not in what it imports (a
	// comment) is fetched in full and still writes no version.
	srv.set("# new header\n"+names(0, 21), 0)
	res, o = mustURLBuild(t, dir, f, srv.url())
	if o.Result != FetchUpdated || res.Written.Version != 0 || res.Manifest.Latest() != 2 {
		t.Fatalf("same content, new bytes: %+v, wrote version %d", o, res.Written.Version)
	}

	// Last-Modified alone.
	srv.mu.Lock()
	srv.etag = false
	srv.mu.Unlock()
	ims := filepath.Join(t.TempDir(), "lists")
	mustURLBuild(t, ims, f, srv.url())
	before := srv.imsOnly.Load()
	if _, o = mustURLBuild(t, ims, f, srv.url()); o.Result != FetchNotModified || srv.imsOnly.Load() != before+1 {
		t.Fatalf("Last-Modified only: %+v, If-Modified-Since sent %d times", o, srv.imsOnly.Load()-before)
	}
}

// TestURLSourceFailureKeepsLastGood: a 500 is retried (Attempts requests)
// and a 404 is not; both keep the last good copy, and the feed stays as it
// was. A failure before any good copy fails the build, writing nothing.
func TestURLSourceFailureKeepsLastGood(t *testing.T) {
	good := names(0, 10)
	srv := newListServer(t, good)
	dir := filepath.Join(t.TempDir(), "lists")
	f := fastFetcher(t, FetchConfig{Attempts: 3})
	mustURLBuild(t, dir, f, srv.url())

	for _, tc := range []struct {
		status   int
		requests int64
		want     string
	}{
		{http.StatusInternalServerError, 3, "HTTP 500 Internal Server Error (after 3 attempts)"},
		{http.StatusServiceUnavailable, 3, "HTTP 503"},
		{http.StatusNotFound, 1, "HTTP 404 Not Found: check the URL (a 4xx is not retried)"},
		{http.StatusForbidden, 1, "HTTP 403"},
	} {
		srv.set(names(100, 10), tc.status)
		before := srv.requests.Load()
		res, o := mustURLBuild(t, dir, f, srv.url())
		if got := srv.requests.Load() - before; got != tc.requests {
			t.Errorf("HTTP %d: %d requests, want %d", tc.status, got, tc.requests)
		}
		if o.Result != FetchFailed || !o.Stale || !strings.Contains(o.Err, tc.want) || o.GoodAt.IsZero() {
			t.Errorf("HTTP %d: outcome %+v, want failed, stale, %q", tc.status, o, tc.want)
		}
		if res.Written.Version != 0 || res.Total.Imported != 10 {
			t.Errorf("HTTP %d: wrote version %d from %d entries; want none, the last good 10", tc.status, res.Written.Version, res.Total.Imported)
		}
		if !strings.Contains(o.String(), "using the last good copy of") {
			t.Errorf("HTTP %d: feed build would print %q", tc.status, o.String())
		}
	}
	checkContent(t, dir, contentOf(t, good, []uint16{1}))

	// The server heals: the next build takes the new list.
	srv.set(names(100, 10), 0)
	if res, o := mustURLBuild(t, dir, f, srv.url()); o.Result != FetchUpdated || res.Written.Version != 2 {
		t.Fatalf("after healing: %+v, version %d", o, res.Written.Version)
	}
	checkContent(t, dir, contentOf(t, names(100, 10), []uint16{1}))

	// No last good copy: the build fails naming the source, and writes
	// no feed.
	fresh := filepath.Join(t.TempDir(), "fresh")
	srv.set("", http.StatusNotFound)
	res, err := urlBuild(t, fresh, f, srv.url())
	if err == nil || !strings.Contains(err.Error(), "domains:1:"+srv.url()) || !strings.Contains(err.Error(), "no last good copy") {
		t.Fatalf("first fetch failing: %v", err)
	}
	if res == nil || len(res.Sources) != 1 || res.Sources[0].Fetch.Result != FetchFailed || res.Sources[0].Fetch.Stale {
		t.Fatalf("first fetch failing: result %+v", res)
	}
	if _, err := os.Stat(filepath.Join(fresh, "feed.json")); !os.IsNotExist(err) {
		t.Fatalf("feed.json after a failed first build: %v", err)
	}
}

// TestURLSourceStall: a server that stops sending mid-body is cut by the
// idle timeout (each attempt), the last good copy stays, and the build
// returns.
func TestURLSourceStall(t *testing.T) {
	good := names(0, 10)
	srv := newListServer(t, good)
	dir := filepath.Join(t.TempDir(), "lists")
	f := fastFetcher(t, FetchConfig{IdleTimeout: 200 * time.Millisecond, Attempts: 2})
	mustURLBuild(t, dir, f, srv.url())

	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv.mu.Lock()
	srv.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		_, _ = w.Write([]byte(names(50, 5)))
		w.(http.Flusher).Flush()
		select { // the stall: nothing more until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}
	srv.mu.Unlock()
	before := srv.requests.Load()
	res, o := mustURLBuild(t, dir, f, srv.url())
	if o.Result != FetchFailed || !o.Stale || !strings.Contains(o.Err, "the server sent nothing for the idle timeout") {
		t.Fatalf("stalled: %+v", o)
	}
	if n := srv.requests.Load() - before; n != 2 {
		t.Fatalf("stalled: %d requests, want 2 (a stall is transient: retried)", n)
	}
	if res.Written.Version != 0 {
		t.Fatalf("stalled: wrote version %d", res.Written.Version)
	}

	// A server that never sends its headers is cut the same way.
	srv.mu.Lock()
	srv.handle = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	srv.mu.Unlock()
	if _, o := mustURLBuild(t, dir, f, srv.url()); o.Result != FetchFailed || !o.Stale || !strings.Contains(o.Err, "timeout awaiting response headers") {
		t.Fatalf("no headers: %+v", o)
	}
	checkContent(t, dir, contentOf(t, good, []uint16{1}))
	checkNoTemp(t, CacheDirFor(dir))
}

// TestURLSourceRefused: a body that imports nothing, that does not parse,
// or that lost more than max_shrink of its entries is refused; the last
// good copy stays. A shrink within max_shrink is taken.
func TestURLSourceRefused(t *testing.T) {
	good := names(0, 10)
	srv := newListServer(t, good)
	dir := filepath.Join(t.TempDir(), "lists")
	f := fastFetcher(t, FetchConfig{}) // max_shrink 0.5
	mustURLBuild(t, dir, f, srv.url())
	for _, tc := range []struct {
		name, body, want string
	}{
		{"an HTML error page", "<html>\n<body>Service temporarily unavailable</body>\n</html>\n", "imports nothing"},
		{"binary garbage", "\x00\x01\x02\xff\xfe garbage\n\x1f\x8b\x08\x00", "imports nothing"},
		{"a line over 1 MiB", strings.Repeat("x", 2<<20), "does not parse as domains"},
		{"4 of 10 entries", names(0, 4), "shrank from 10 to 4 entries, more than max_shrink 0.50"},
	} {
		srv.set(tc.body, 0)
		res, o := mustURLBuild(t, dir, f, srv.url())
		if o.Result != FetchRefused || !o.Stale || !strings.Contains(o.Err, tc.want) {
			t.Errorf("%s: %+v, want refused, stale, %q", tc.name, o, tc.want)
		}
		if res.Written.Version != 0 {
			t.Errorf("%s: wrote version %d", tc.name, res.Written.Version)
		}
	}
	checkContent(t, dir, contentOf(t, good, []uint16{1}))

	srv.set(names(0, 6), 0) // 40 % fewer: within max_shrink
	if res, o := mustURLBuild(t, dir, f, srv.url()); o.Result != FetchUpdated || res.Written.Version != 2 {
		t.Fatalf("shrink within max_shrink: %+v, version %d", o, res.Written.Version)
	}
	checkContent(t, dir, contentOf(t, names(0, 6), []uint16{1}))
	// The baseline is the last good import: 6 now, so 3 passes.
	srv.set(names(0, 3), 0)
	if _, o := mustURLBuild(t, dir, f, srv.url()); o.Result != FetchUpdated {
		t.Fatalf("half of the new baseline: %+v", o)
	}
}

// TestURLSourceSizeCap: a list over max_bytes is refused, announced
// (Content-Length) or not (chunked: the stream is cut past the cap), and
// is not retried.
func TestURLSourceSizeCap(t *testing.T) {
	good := names(0, 10)
	srv := newListServer(t, good)
	dir := filepath.Join(t.TempDir(), "lists")
	f := fastFetcher(t, FetchConfig{MaxBytes: 4096})
	mustURLBuild(t, dir, f, srv.url())

	// The over-size body: 64 MiB, of which the client must take no more
	// than the cap before it hangs up (what the server could write meanwhile
	// is bounded by the sockets' buffers, a few MiB at most).
	const total = 64 << 20
	chunk := []byte(strings.Repeat(names(1000, 1000), 2))[:32<<10]
	for _, chunked := range []bool{false, true} {
		var sent atomic.Int64
		srv.mu.Lock()
		srv.handle = func(w http.ResponseWriter, r *http.Request) {
			if !chunked {
				w.Header().Set("Content-Length", fmt.Sprint(total))
			}
			for sent.Load() < total {
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		}
		srv.mu.Unlock()
		before := srv.requests.Load()
		res, o := mustURLBuild(t, dir, f, srv.url())
		if o.Result != FetchFailed || !o.Stale || !strings.Contains(o.Err, "larger than max_bytes") {
			t.Fatalf("chunked %v: %+v", chunked, o)
		}
		if n := srv.requests.Load() - before; n != 1 {
			t.Fatalf("chunked %v: %d requests; an over-size list is not retried", chunked, n)
		}
		if res.Written.Version != 0 {
			t.Fatalf("chunked %v: wrote version %d", chunked, res.Written.Version)
		}
		// The handler ends once its writes fail (the client is gone).
		eventuallyStops := time.Now().Add(10 * time.Second)
		for last := int64(-1); sent.Load() != last && time.Now().Before(eventuallyStops); time.Sleep(50 * time.Millisecond) {
			last = sent.Load()
		}
		if got := sent.Load(); got >= total/4 {
			t.Fatalf("chunked %v: the server wrote %d of %d bytes: the client did not stop reading at the cap", chunked, got, total)
		}
	}
	checkContent(t, dir, contentOf(t, good, []uint16{1}))
	checkNoTemp(t, CacheDirFor(dir))
}

// TestURLSourceTLS: a server with a certificate of an unknown CA is
// refused (and not retried); with its CA in ca_file it is fetched.
func TestURLSourceTLS(t *testing.T) {
	var requests atomic.Int64
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(names(0, 5)))
	}))
	t.Cleanup(ts.Close)
	u := ts.URL + "/list.txt"
	dir := filepath.Join(t.TempDir(), "lists")

	res, err := urlBuild(t, dir, fastFetcher(t, FetchConfig{}), u)
	if err == nil || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), "set ca_file") {
		t.Fatalf("an unknown CA: %v", err)
	}
	if res.Sources[0].Fetch.Attempts != 1 {
		t.Fatalf("an unknown CA was tried %d times; a refused certificate is not retried", res.Sources[0].Fetch.Attempts)
	}
	if requests.Load() != 0 {
		t.Fatalf("the server got %d requests through an untrusted TLS connection", requests.Load())
	}

	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, o := mustURLBuild(t, dir, fastFetcher(t, FetchConfig{CAFile: ca}), u); o.Result != FetchUpdated {
		t.Fatalf("with ca_file: %+v", o)
	}
	checkContent(t, dir, contentOf(t, names(0, 5), []uint16{1}))

	if _, err := NewFetcher(FetchConfig{CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil || !strings.Contains(err.Error(), "ca_file") {
		t.Fatalf("a missing ca_file: %v", err)
	}
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFetcher(FetchConfig{CAFile: ca}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a ca_file without certificates: %v", err)
	}
}

// TestURLSourceMixed: a URL source beside a file source; the cache keeps
// only what current sources use.
func TestURLSourceMixed(t *testing.T) {
	srv := newListServer(t, names(0, 5))
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "lists")
	file := writeList(t, tmp, "own.txt", "own.example\n")
	f := fastFetcher(t, FetchConfig{})
	srcs := func(args ...string) []Source {
		var out []Source
		for _, a := range args {
			s, err := ParseSource(a)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	build(t, BuildConfig{Dir: dir, Name: "lists", Fetcher: f, Sources: srcs("domains:1:"+srv.url(), "domains:2:"+srv.url(), "domains:3:"+file)})
	checkContent(t, dir, contentOf(t, names(0, 5), []uint16{1, 2}, "own.example\n", []uint16{3}))
	if n := len(mustReadDir(t, CacheDirFor(dir))); n != 4 {
		t.Fatalf("the cache holds %d files, want 4 (two sources: metadata and body each)", n)
	}
	build(t, BuildConfig{Dir: dir, Name: "lists", Fetcher: f, Sources: srcs("domains:1:"+srv.url(), "domains:3:"+file)})
	if n := len(mustReadDir(t, CacheDirFor(dir))); n != 2 {
		t.Fatalf("the cache holds %d files after a source was removed, want 2", n)
	}
}

func checkNoTemp(t *testing.T, dir string) {
	t.Helper()
	for _, name := range mustReadDir(t, dir) {
		if strings.HasPrefix(name, tmpPrefix) {
			t.Fatalf("%s left in %s", name, dir)
		}
	}
}

func TestFetchConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  FetchConfig
		want string
	}{
		{FetchConfig{MaxBytes: -1}, "max_bytes: -1 is negative"},
		{FetchConfig{Timeout: -time.Second}, "timeout: -1s is negative"},
		{FetchConfig{IdleTimeout: -time.Second}, "idle_timeout:"},
		{FetchConfig{Attempts: -1}, "attempts: -1 is negative"},
		{FetchConfig{MaxShrink: 1.5}, "max_shrink: 1.5 is not a share from 0 to 1"},
		{FetchConfig{MaxShrink: -0.1}, "max_shrink:"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
		if _, err := NewFetcher(tc.cfg); err == nil {
			t.Errorf("NewFetcher(%+v) accepted it", tc.cfg)
		}
	}
	if err := (FetchConfig{}).Validate(); err != nil {
		t.Fatalf("the zero config (the defaults): %v", err)
	}
}
