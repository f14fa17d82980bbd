package feeds

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// TestLookupRule is the feeds' lookup rule as Set.Lookup applies it (the
// table `svc-pf feed lookup` was once checked against on its own copy of
// the rule): the name, else the nearest parent; among a name's entries the
// longest path prefix, else the name's own.
func TestLookupRule(t *testing.T) {
	b := NewBuilder(5)
	for key, codes := range map[string][]uint16{
		"example.com":              {1},
		"ads.example.com/banner":   {2},
		"ads.example.com/banner/x": {3},
		"paths.example.org/a":      {4},
		"example.org":              {5},
	} {
		name, path, _ := strings.Cut(key, "/")
		if path != "" {
			path = "/" + path
		}
		b.Set(feed.Line{Name: name, Path: path, Codes: codes})
	}
	s := &Set{feeds: []*loadedFeed{{name: "f", index: b.Index(), codes: newCodeTable(&feed.Codes{})}}}
	for _, tc := range []struct {
		name, path, key string
		codes           []uint16
	}{
		{"example.com", "", "example.com", []uint16{1}},
		{"www.example.com", "/", "example.com", []uint16{1}},
		{"ads.example.com", "/banner/x/y", "ads.example.com/banner/x", []uint16{3}},
		{"ads.example.com", "/banner/", "ads.example.com/banner", []uint16{2}},
		{"ads.example.com", "/bannerx", "ads.example.com/banner", []uint16{2}}, // a byte prefix
		{"ads.example.com", "/other", "example.com", []uint16{1}},              // no path entry applies: the parent
		{"ads.example.com", "", "example.com", []uint16{1}},
		{"paths.example.org", "/b", "example.org", []uint16{5}},
		{"x.paths.example.org", "/a", "paths.example.org/a", []uint16{4}}, // a parent's path entries apply too
		{"x.paths.example.org", "/b", "example.org", []uint16{5}},
		{"example.net", "", "", nil},
	} {
		var key string
		var codes []uint16
		for _, c := range s.Lookup(tc.name, tc.path, nil) {
			key = c.Name + c.Path
			codes = append(codes, c.Code)
		}
		if key != tc.key || !slices.Equal(codes, tc.codes) {
			t.Errorf("Lookup(%q, %q) = %q %v, want %q %v", tc.name, tc.path, key, codes, tc.key, tc.codes)
		}
	}
}

// TestLoad reads a directory once, from disk and over HTTP, as the node's
// Client would hold it after its first poll, and refuses what a one-shot
// reader must: a missing directory, a snapshot that repeats a key, content
// other than the manifest's content_sha256.
func TestLoad(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("ads.example.com", 1), putLine("example.org/shop", 2), putLine("gone.example", 3))
		e.d.delta(putLine("tracker.example.net", 2), delLine("gone.example"))
		url := e.d.dir
		if e.srv != nil {
			url = e.srv.url()
		}
		l, err := Load(context.Background(), LoadConfig{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		e.c.mustPoll()
		if l.Manifest.Latest() != 2 || l.Index().Len() != 3 || titleOf(l.Set, 2) != "Tracking" || l.ContentSHA256 != e.d.versions[1].ContentSHA256 {
			t.Fatalf("version %d, %d keys, title %q, content %s", l.Manifest.Latest(), l.Index().Len(), titleOf(l.Set, 2), l.ContentSHA256)
		}
		for _, key := range []string{"x.ads.example.com", "example.org/shop/1", "tracker.example.net", "gone.example"} {
			name, path, _ := strings.Cut(key, "/")
			if path != "" {
				path = "/" + path
			}
			got, want := l.Set.Lookup(name, path, nil), e.c.Lookup(name, path, nil)
			for i := range want {
				want[i].Feed = l.Manifest.Name // the node labels the feed with its config name
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: Load gives %v, the node %v", key, got, want)
			}
		}
	})

	if _, err := Load(context.Background(), LoadConfig{URL: t.TempDir()}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an empty directory: %v, want fs.ErrNotExist", err)
	}

	d := newFeedDir(t, "dup")
	d.snapshot(putLine("a.example", 1), putLine("a.example", 2))
	if _, err := Load(context.Background(), LoadConfig{URL: d.dir}); err == nil || !strings.Contains(err.Error(), "repeats keys") {
		t.Errorf("a snapshot that repeats a key: %v", err)
	}

	d = newFeedDir(t, "sum")
	d.snapshot(putLine("a.example", 1))
	m := d.manifest()
	m.Versions[0].ContentSHA256 = strings.Repeat("0", 64)
	d.writeManifest(m)
	if _, err := Load(context.Background(), LoadConfig{URL: d.dir}); err == nil || !strings.Contains(err.Error(), "content_sha256") {
		t.Errorf("a wrong content_sha256: %v", err)
	}
}

// titleOf is the title s gives code, or "".
func titleOf(s *Set, code uint16) string {
	for _, c := range s.Codes() {
		if c.Code == code {
			return c.Title
		}
	}
	return ""
}
