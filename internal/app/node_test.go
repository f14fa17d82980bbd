package app

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// TestAllFollowsAFeed: `svc-pf all` with a top-level `feeds:` entry loads a
// feed built from a real list (uBlock badware) from a local directory, the
// node's /health says ready only then, its /metrics carries the feed's
// version, and a lookup finds a listed name with the list's code.
func TestAllFollowsAFeed(t *testing.T) {
	dir := badwareFeed(t)
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: dir, PollInterval: 100 * time.Millisecond}}
	all := startAll(t, cfg)

	base := "http://" + all.Node.Addr().String()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("/health")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node never ready: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `svcpf_feed_version{feed="badware"} 1`) {
		t.Fatalf("metrics without the feed's version:\n%s", body)
	}
	// ||7zip.es^$doc is in the list.
	cats := all.Node.Models.Feeds().Lookup("download.7zip.es", "", nil)
	if len(cats) != 1 || cats[0].Code != 3 || cats[0].Title != "badware" || cats[0].Key() != "7zip.es" {
		t.Fatalf("lookup: %+v", cats)
	}
}

// badwareFeed builds a feed directory from a real list (uBlock badware,
// read in place from ../shared/data/feeds): code 3, title "badware".
func badwareFeed(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "badware")
	src, err := feedbuild.ParseSource("adblock:3:" + filepath.Join("..", "..", "..", "shared", "data", "feeds", "badware.min.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := feedbuild.Build(context.Background(), feedbuild.BuildConfig{Dir: dir, Name: "badware",
		Titles: map[uint16]string{3: "badware"}, Sources: []feedbuild.Source{src}}); err != nil {
		t.Fatalf("building the feed from ../shared/data/feeds (CI has ../shared beside the repository): %v", err)
	}
	return dir
}
