package feedbuild

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// serveFixture builds feed "ads" in <tmp>/feeds/ads and returns the
// parent directory and the feed's content.
func serveFixture(t *testing.T) (string, Content) {
	t.Helper()
	tmp := t.TempDir()
	parent := filepath.Join(tmp, "feeds")
	src := writeList(t, tmp, "l", "||ads.example.com^\n||example.org/dl/^$all\n")
	build(t, BuildConfig{Dir: filepath.Join(parent, "ads"), Name: "ads", Titles: map[uint16]string{1: "advertising"},
		Sources: []Source{{Format: FormatAdblock, Codes: []uint16{1}, Path: src}}})
	writeList(t, tmp, "l", "||ads.example.com^\n||example.org/dl/^$all\n||more.example^\n")
	build(t, BuildConfig{Dir: filepath.Join(parent, "ads"), Name: "ads",
		Sources: []Source{{Format: FormatAdblock, Codes: []uint16{1}, Path: src}}})
	if err := os.WriteFile(filepath.Join(tmp, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return parent, Content{"ads.example.com": {1}, "example.org/dl/": {1}, "more.example": {1}}
}

// rawGet sends a request line as written, without the client's cleaning.
func rawGet(t *testing.T, addr, target string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestServe(t *testing.T) {
	parent, want := serveFixture(t)
	feedDir := filepath.Join(parent, "ads")
	// Both forms at once: the parent (feeds inside it) and the feed itself.
	srv, err := NewServer(ServerConfig{Dirs: []string{parent, feedDir}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	manifest, _ := os.ReadFile(filepath.Join(feedDir, feed.ManifestFile))
	sum := sha256.Sum256(manifest)
	resp, err := http.Get(ts.URL + "/ads/feed.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || string(body) != string(manifest) || etag != `"`+hex.EncodeToString(sum[:])+`"` ||
		resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("feed.json: %d %q etag %s type %s", resp.StatusCode, body, etag, resp.Header.Get("Content-Type"))
	}
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/ads/feed.json", nil)
	req.Header.Set("If-None-Match", etag)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d, want 304", resp.StatusCode)
	}

	m := readManifest(t, feedDir)
	for _, v := range m.Versions {
		resp, err := http.Get(ts.URL + "/ads/" + v.File)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || sha256Hex(body) != v.SHA256 || resp.Header.Get("ETag") != `"`+v.SHA256+`"` ||
			resp.Header.Get("Content-Type") != "application/gzip" || resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%s: %d, etag %s, type %s", v.File, resp.StatusCode, resp.Header.Get("ETag"), resp.Header.Get("Content-Type"))
		}
	}

	// A replaced file gets a new ETag (a rename gives it a new inode).
	if err := writeAtomic(feedDir, feed.ManifestFile, append(manifest, ' ')); err != nil {
		t.Fatal(err)
	}
	resp, _ = http.Get(ts.URL + "/ads/feed.json")
	resp.Body.Close()
	if resp.Header.Get("ETag") == etag {
		t.Fatal("the ETag did not change with the file")
	}

	// The feed as a node reads it over HTTP equals the directory.
	f, got, err := loadFeed(ts.URL + "/ads")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, slices.Equal) || titleOf(f, 1) != "advertising" {
		t.Fatalf("over HTTP: %v, title %q", got, titleOf(f, 1))
	}
	if _, _, err := loadFeed(ts.URL + "/nofeed/"); err == nil {
		t.Fatal("a missing feed loaded")
	}

	// A symbolic link out of the directory is not followed.
	if err := os.Symlink(filepath.Join(parent, "..", "secret"), filepath.Join(feedDir, "snapshot_99.gz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(parent, ".."), filepath.Join(parent, "escape")); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(ts.URL, "http://")
	for target, code := range map[string]int{
		"/ads/feed-codes.json":               200,
		"/ads/delta_2.gz":                    200,
		"/ads/feed.json?x=1":                 200,
		"http://x/ads/feed.json":             200, // absolute form
		"/ads/":                              404, // no listing
		"/ads":                               404,
		"/":                                  404,
		"/ads/../secret":                     404,
		"/ads/../ads/feed.json":              404, // not cleaned into something else either
		"/ads/./feed.json":                   404,
		"/ads//feed.json":                    404,
		"/../secret":                         404,
		"/ads/..%2fsecret":                   404,
		"/ads/%2e%2e/secret":                 404,
		"/%2e%2e/secret":                     404,
		"/ads/..%5csecret":                   404,
		"/ads/feed.json/../../../etc/passwd": 404,
		"/ads/%66eed.json":                   404, // only the plain spelling
		"/ads/snapshot_99.gz":                404, // the link out of the directory
		"/escape/secret":                     404, // a feed that is a link out of the parent
		"/ads/.feedbuild.lock":               404,
		"/ads/.feedbuild-state.json":         404,
		"/ads/snapshot_1.gz/x":               404,
		"/feeds/ads/feed.json":               404,
		"/ads/delta_1000.gz":                 404,
		"/ads/SNAPSHOT_1.GZ":                 404,
		"/ads/" + strings.Repeat("a", 300):   404,
	} {
		if got := rawGet(t, addr, target); got != code {
			t.Errorf("GET %q: %d, want %d", target, got, code)
		}
	}

	resp, err = http.Post(ts.URL+"/ads/feed.json", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
}

// TestServeRunStops: Run binds, serves, and returns when its context ends.
func TestServeRunStops(t *testing.T) {
	parent, _ := serveFixture(t)
	srv, err := NewServer(ServerConfig{Dirs: []string{parent}, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(a net.Addr) { addrc <- a }) }()
	addr := <-addrc
	if code := rawGet(t, addr.String(), "/ads/feed.json"); code != 200 {
		t.Fatalf("GET: %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := net.Dial("tcp", addr.String()); err == nil {
		t.Fatal("still listening")
	}
}

func TestNewServerRefuses(t *testing.T) {
	file := writeList(t, t.TempDir(), "f", "x")
	for _, dirs := range [][]string{nil, {"/nonexistent/feeds"}, {file}} {
		if _, err := NewServer(ServerConfig{Dirs: dirs}); err == nil {
			t.Errorf("NewServer(%q) accepted", dirs)
		}
	}
}

// TestServeNamedFeeds: a config file's feeds are served under their own
// names (whatever the directory's base name), parents' feed directories
// under theirs, a named feed before a parent's feed of the same name;
// SetServed swaps the whole set for the next request; a directory that
// does not exist yet answers 404 until it appears.
func TestServeNamedFeeds(t *testing.T) {
	parent, _ := serveFixture(t)
	adsDir := filepath.Join(parent, "ads")
	other := filepath.Join(t.TempDir(), "other")
	build(t, BuildConfig{Dir: other, Name: "other",
		Sources: []Source{{Format: FormatDomains, Codes: []uint16{2}, Path: writeList(t, t.TempDir(), "l", "o.example\n")}}})
	later := filepath.Join(t.TempDir(), "later")

	srv, err := NewServer(ServerConfig{Feeds: []ServedFeed{{Name: "threats", Dir: adsDir}, {Name: "ads", Dir: other}, {Name: "later", Dir: later}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	manifestOf := func(dir string) string {
		b, err := os.ReadFile(filepath.Join(dir, feed.ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	expect := func(path string, code int, body string) {
		t.Helper()
		if c, b := get(path); c != code || code == 200 && b != body {
			t.Errorf("GET %s: %d %.60q, want %d %.60q", path, c, b, code, body)
		}
	}
	expect("/threats/feed.json", 200, manifestOf(adsDir))
	expect("/ads/feed.json", 200, manifestOf(other)) // the name, not the base name
	expect("/other/feed.json", 404, "")
	expect("/later/feed.json", 404, "")
	if missing := srv.served.Load().Missing(); !slices.Equal(missing, []string{later}) {
		t.Errorf("missing %v, want %v", missing, []string{later})
	}
	if err := os.CopyFS(later, os.DirFS(other)); err != nil {
		t.Fatal(err)
	}
	expect("/later/feed.json", 200, manifestOf(other))

	// A parent, and a named feed shadowing one of its feeds.
	v, err := ResolveServed([]ServedFeed{{Name: "ads", Dir: other}}, []string{parent})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServed(v)
	expect("/threats/feed.json", 404, "")
	expect("/ads/feed.json", 200, manifestOf(other))
	v, err = ResolveServed(nil, []string{parent})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServed(v)
	expect("/ads/feed.json", 200, manifestOf(adsDir))
	expect("/feeds/feed.json", 404, "") // a parent is not a feed
}

// TestResolveServedRefuses: each error names its key; a directory that
// does not exist is not one.
func TestResolveServedRefuses(t *testing.T) {
	file := writeList(t, t.TempDir(), "f", "x")
	for _, tt := range []struct {
		feeds   []ServedFeed
		parents []string
		want    []string
	}{
		{nil, nil, []string{"feeds and parents: both empty"}},
		{[]ServedFeed{{Name: "", Dir: "/x"}}, nil, []string{"feeds[0].name is required"}},
		{[]ServedFeed{{Name: "a/b", Dir: "/x"}, {Name: "..x", Dir: "/y"}, {Name: "x..y", Dir: "/z"}}, nil,
			[]string{`feeds[0].name "a/b"`, `feeds[1].name "..x"`, `feeds[2].name "x..y"`}},
		{[]ServedFeed{{Name: "a", Dir: "/x"}, {Name: "a", Dir: ""}}, nil, []string{`feeds[1].name "a": also feeds[0]'s`, "feeds[1].dir is required"}},
		{nil, []string{"/x", ""}, []string{"parents[1] is empty"}},
		{[]ServedFeed{{Name: "a", Dir: file}}, []string{file}, []string{"feeds[0].dir " + file + " is not a directory", "parents[0] " + file + " is not a directory"}},
	} {
		_, err := ResolveServed(tt.feeds, tt.parents)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("ResolveServed(%v, %q): %v, want %q", tt.feeds, tt.parents, err, w)
			}
		}
	}
	if _, err := ResolveServed([]ServedFeed{{Name: "a.b_c-1", Dir: "/nonexistent/feeds/a"}}, []string{"/nonexistent/feeds"}); err != nil {
		t.Errorf("directories that do not exist yet: %v", err)
	}
	if _, err := NewServer(ServerConfig{Dirs: []string{t.TempDir()}, Parents: []string{t.TempDir()}}); err == nil {
		t.Error("NewServer accepted --dir and parents together")
	}
}
