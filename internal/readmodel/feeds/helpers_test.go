package feeds

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// put and del are the lines of a test feed.
func putLine(key string, codes ...uint16) feed.Line {
	name, p, err := feed.ParseKey(key)
	if err != nil {
		panic(err)
	}
	return feed.Line{Name: name, Path: p, Codes: codes}
}

func delLine(key string) feed.Line {
	l := putLine(key)
	l.Remove = true
	return l
}

func gzLines(lines ...feed.Line) []byte {
	var raw []byte
	for _, l := range lines {
		raw = feed.AppendLine(raw, l)
	}
	return gzBytes(raw)
}

func gzBytes(raw []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		panic(err)
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// feedDir builds a feed directory the way `svc-pf feed build` does: files
// first, feed.json last by atomic rename.
type feedDir struct {
	catchUp   []feed.Version                // the manifest's catch_up, as feed build writes it
	contents  map[int64]map[string][]uint16 // each version's full key set, when its file decodes
	noLineage bool                          // publish manifests without content_sha256 and base_sha256, as feed build did before them
	t         testing.TB
	dir       string
	name      string
	versions  []feed.Version // the manifest's, oldest first
	next      int64
	codes     []feed.Code
	now       func() time.Time // created_at of new versions
}

func newFeedDir(t testing.TB, name string) *feedDir {
	return &feedDir{t: t, dir: t.TempDir(), name: name, next: 1, now: time.Now, contents: map[int64]map[string][]uint16{},
		codes: []feed.Code{{Code: 1, Title: "Ads"}, {Code: 2, Title: "Tracking"}, {Code: 3, Title: "Malware"}, {Code: 4, Title: "Adult"}}}
}

func (d *feedDir) write(file string, data []byte) {
	d.t.Helper()
	tmp := filepath.Join(d.dir, "."+file+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, file)); err != nil {
		d.t.Fatal(err)
	}
}

func (d *feedDir) remove(file string) {
	d.t.Helper()
	if err := os.Remove(filepath.Join(d.dir, file)); err != nil {
		d.t.Fatal(err)
	}
}

// snapshot adds the next version as a snapshot, which drops the versions
// before it from the manifest (their files stay), and publishes.
func (d *feedDir) snapshot(lines ...feed.Line) feed.Version {
	d.versions = nil
	return d.addRaw(feed.TypeSnapshot, gzLines(lines...), len(lines))
}

// delta adds the next version as a delta and publishes.
func (d *feedDir) delta(lines ...feed.Line) feed.Version {
	return d.addRaw(feed.TypeDelta, gzLines(lines...), len(lines))
}

// addRaw adds the next version with the given file bytes (which may be
// broken on purpose), lists their true SHA-256 and its lineage, and
// publishes.
func (d *feedDir) addRaw(typ string, data []byte, entries int) feed.Version {
	d.t.Helper()
	v := d.version(typ, d.next, data, entries)
	d.next++
	d.versions = append(d.versions, v)
	d.publish()
	return v
}

// catchUpDelta writes the next version's delta as feed build writes it
// beside a snapshot, without listing or publishing it: the caller puts it
// in catchUp and then adds the snapshot.
func (d *feedDir) catchUpDelta(lines ...feed.Line) feed.Version {
	d.t.Helper()
	return d.version(feed.TypeDelta, d.next, gzLines(lines...), len(lines))
}

// version writes the file of version n and returns its manifest entry:
// the content checksum as feed build gives it, over the content of version
// n-1 for a delta; none when the file does not decode (a broken version,
// which nothing may build on either).
func (d *feedDir) version(typ string, n int64, data []byte, entries int) feed.Version {
	d.t.Helper()
	v := feed.Version{Version: n, Type: typ, File: feed.FileName(typ, n), SHA256: sha256Hex(data),
		Entries: entries, CreatedAt: d.now().UTC()}
	d.write(v.File, data)
	prev, ok := d.contents[n-1]
	if typ == feed.TypeDelta && ok {
		v.BaseSHA256 = contentSum(prev)
	}
	next := map[string][]uint16{}
	if typ == feed.TypeDelta {
		next = maps.Clone(prev)
	}
	err := decodeFile(data, typ == feed.TypeDelta, 1<<30, false, func(l feed.Line) error {
		if l.Remove {
			delete(next, l.Key())
		} else {
			next[l.Key()] = l.Codes
		}
		return nil
	})
	delete(d.contents, n)
	if err == nil && (typ == feed.TypeSnapshot || ok) {
		d.contents[n] = next
		v.ContentSHA256 = contentSum(next)
	}
	return v
}

// contentSum is feed.ContentSHA256 of a key set.
func contentSum(c map[string][]uint16) string {
	lines := make([]feed.Line, 0, len(c))
	for k, codes := range c {
		name, p, err := feed.ParseKey(k)
		if err != nil {
			panic(err)
		}
		lines = append(lines, feed.Line{Name: name, Path: p, Codes: codes})
	}
	return feed.ContentSHA256(lines)
}

// replaceLast rewrites the newest version's file, checksum and entries (a
// publisher fixing a bad build) and publishes.
func (d *feedDir) replaceLast(lines ...feed.Line) {
	d.t.Helper()
	last := &d.versions[len(d.versions)-1]
	*last = d.version(last.Type, last.Version, gzLines(lines...), len(lines))
	d.publish()
}

func (d *feedDir) manifest() feed.Manifest {
	m := feed.Manifest{V: feed.FormatVersion, Name: d.name, Versions: slices.Clone(d.versions), CatchUp: slices.Clone(d.catchUp)}
	if d.noLineage {
		for _, vs := range [][]feed.Version{m.Versions, m.CatchUp} {
			for i := range vs {
				vs[i].ContentSHA256, vs[i].BaseSHA256 = "", ""
			}
		}
	}
	return m
}

func (d *feedDir) publish() {
	d.t.Helper()
	d.writeManifest(d.manifest())
}

func (d *feedDir) writeManifest(m feed.Manifest) {
	d.t.Helper()
	codes, err := json.Marshal(feed.Codes{V: feed.FormatVersion, Codes: d.codes})
	if err != nil {
		d.t.Fatal(err)
	}
	d.write(feed.CodesFile, codes)
	data, err := json.Marshal(m)
	if err != nil {
		d.t.Fatal(err)
	}
	d.write(feed.ManifestFile, data)
}

// feedServer serves a feed directory over HTTP on 127.0.0.1 with ETags, and
// records what was asked. fault, when set, may answer a request instead.
type feedServer struct {
	t    testing.TB
	dir  string
	addr string
	srv  *httptest.Server

	mu     sync.Mutex
	log    []string // "file status"
	fault  func(w http.ResponseWriter, r *http.Request) bool
	noETag bool
}

func newFeedServer(t testing.TB, dir string) *feedServer {
	s := &feedServer{t: t, dir: dir}
	s.srv = httptest.NewServer(s)
	s.addr = s.srv.Listener.Addr().String()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *feedServer) url() string { return "http://" + s.addr + "/feeds/x" } // no slash: New adds it

func (s *feedServer) stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

// restart serves again on the same address, as a server back from an outage.
func (s *feedServer) restart() {
	s.t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the old socket may take a moment to go
		if l, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
}

func (s *feedServer) setFault(f func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// statusRecorder records a request in the server's log when its status
// is sent, before any of the body: the client can have the whole reply
// (and the test go on to read the log) before the handler returns.
type statusRecorder struct {
	http.ResponseWriter
	status int
	record func(status int)
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	if r.record != nil {
		r.record(code)
		r.record = nil
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.record != nil {
		r.WriteHeader(http.StatusOK)
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() { r.ResponseWriter.(http.Flusher).Flush() }

func (s *feedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	file := path.Base(r.URL.Path)
	record := func(status int) {
		s.mu.Lock()
		s.log = append(s.log, file+" "+http.StatusText(status))
		s.mu.Unlock()
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK, record: record}
	defer func() {
		if rec.record != nil { // nothing written: net/http sends 200
			rec.record(http.StatusOK)
		}
	}()
	s.mu.Lock()
	fault, noETag := s.fault, s.noETag
	s.mu.Unlock()
	if fault != nil && fault(rec, r) {
		return
	}
	p := filepath.Join(s.dir, file)
	data, err := os.ReadFile(p)
	if err != nil {
		http.NotFound(rec, r)
		return
	}
	st, err := os.Stat(p)
	if err != nil {
		http.NotFound(rec, r)
		return
	}
	if !noETag {
		rec.Header().Set("ETag", `"`+sha256Hex(data)[:16]+`"`)
	}
	http.ServeContent(rec, r, file, st.ModTime(), bytes.NewReader(data))
}

// requests returns the requests since the last call.
func (s *feedServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.log
	s.log = nil
	return out
}

// fakeClock is a settable Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// logBuffer collects log output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

// testClient is a Client with a private registry and captured logs.
type testClient struct {
	*Client
	t    testing.TB
	reg  *prometheus.Registry
	logs *logBuffer
}

func newTestClient(t testing.TB, feeds []FeedConfig, tweak func(*Config)) *testClient {
	t.Helper()
	logs := &logBuffer{}
	reg := prometheus.NewRegistry()
	cfg := Config{
		Feeds:        feeds,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer:   reg,
		FetchTimeout: 10 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testClient{Client: c, t: t, reg: reg, logs: logs}
}

// pollAll polls every feed once, as Run would, and returns their errors.
func (c *testClient) pollAll() error {
	var errs []error
	for _, f := range c.feeds {
		errs = append(errs, c.poll(context.Background(), f))
	}
	return errors.Join(errs...)
}

func (c *testClient) mustPoll() {
	c.t.Helper()
	if err := c.pollAll(); err != nil {
		c.t.Fatalf("poll: %v", err)
	}
}

// codes is what the current Set gives name[/path], as "feed:code" strings.
func (c *testClient) codes(key string) []string {
	name, p := key, ""
	if i := strings.IndexByte(key, '/'); i >= 0 {
		name, p = key[:i], key[i:]
	}
	var out []string
	for _, cat := range c.Set().Lookup(name, p, nil) {
		out = append(out, cat.Feed+":"+strconv.Itoa(int(cat.Code)))
	}
	return out
}

func (c *testClient) version(name string) int64 {
	for _, st := range c.Status() {
		if st.Name == name {
			return st.Version
		}
	}
	c.t.Fatalf("no feed %s", name)
	return 0
}

func (c *testClient) failures(name string, r reason) float64 {
	return testutil.ToFloat64(c.m.failures.WithLabelValues(name, r.String()))
}

func (c *testClient) gauge(g *prometheus.GaugeVec, name string) float64 {
	return testutil.ToFloat64(g.WithLabelValues(name))
}

func expectCodes(t testing.TB, c *testClient, key string, want ...string) {
	t.Helper()
	if got := c.codes(key); !slices.Equal(got, want) {
		t.Fatalf("codes of %s = %v, want %v", key, got, want)
	}
}
