package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// TestAllFeedSources: under `svc-pf all`, feed_sources: builds the feed
// the node follows through feeds:, from a real list server; when the
// server fails, the node listener's /health names the source and what to
// do (the node stays ready, its feed unchanged) and /metrics says the
// source is stale; when it heals, so does /health.
func TestAllFeedSources(t *testing.T) {
	var failing atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "||a.threat.example^\n")
	}))
	t.Cleanup(ts.Close)
	dir := filepath.Join(t.TempDir(), "threats")
	source := "adblock:3:" + ts.URL + "/list.txt"
	cfg := testAllConfig(t)
	cfg.FeedSources = []feedbuild.FeedSourceConfig{{Name: "threats", Dir: dir, Interval: 100 * time.Millisecond,
		Titles: map[uint16]string{3: "badware"}, Sources: []string{source},
		Fetch: feedbuild.FetchConfig{Attempts: 1}}}
	cfg.Feeds = []feeds.FeedConfig{{Name: "threats", URL: dir, PollInterval: 50 * time.Millisecond}}
	all := startAll(t, cfg)
	base := "http://" + all.Node.Addr().String()
	get := func(path string) (int, string) { return httpGet(t, base+path) }
	type health struct {
		Status      string `json:"status"`
		FeedSources struct {
			Status   string   `json:"status"`
			Problems []string `json:"problems"`
		} `json:"feed_sources"`
	}
	waitHealth := func(what string, cond func(int, health) bool) health {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			code, body := get("/health")
			var h health
			if err := json.Unmarshal([]byte(body), &h); err != nil {
				t.Fatalf("/health: %v: %s", err, body)
			}
			if cond(code, h) {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %d %s", what, code, body)
			}
		}
	}
	waitHealth("the node ready with feed_sources ok", func(code int, h health) bool {
		return code == 200 && h.FeedSources.Status == "ok"
	})
	if cats := all.Node.Models.Feeds().Lookup("www.a.threat.example", "", nil); len(cats) != 1 || cats[0].Title != "badware" {
		t.Fatalf("the node's lookup: %+v", cats)
	}

	failing.Store(true)
	h := waitHealth("feed_sources failing", func(code int, h health) bool { return code == 200 && len(h.FeedSources.Problems) > 0 })
	if p := h.FeedSources.Problems[0]; !strings.Contains(p, "source "+source) || !strings.Contains(p, "HTTP 503") ||
		!strings.Contains(p, "the feed uses its last good copy") || !strings.HasPrefix(h.FeedSources.Status, "failing") {
		t.Fatalf("/health while failing: %+v", h)
	}
	if _, body := get("/metrics"); !strings.Contains(body, fmt.Sprintf(`svcpf_feed_source_stale{feed="threats",source=%q} 1`, source)) {
		t.Fatalf("/metrics has no stale source:\n%s", body)
	}
	if cats := all.Node.Models.Feeds().Lookup("a.threat.example", "", nil); len(cats) != 1 {
		t.Fatalf("the node's lookup while the source fails: %+v", cats)
	}

	failing.Store(false)
	waitHealth("feed_sources healed", func(code int, h health) bool { return code == 200 && h.FeedSources.Status == "ok" })
}

func TestAllValidatesFeedSources(t *testing.T) {
	cfg := testAllConfig(t)
	cfg.FeedSources = []feedbuild.FeedSourceConfig{{Name: "a", Dir: "x", Sources: []string{"adblock:1:https://x/l"}},
		{Name: "b", Interval: time.Microsecond, Sources: []string{"adblock:1:https://x/l"}}}
	err := cfg.Validate()
	for _, want := range []string{"feed_sources[1].interval: 1µs", "feed_sources[1].dir: missing"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
}

// TestFeedSourcesDocExample: the feed_sources example of docs/feeds.md
// decodes strictly into `feed update`'s configuration and validates, and
// its feed_sources: list does the same at the top level of `svc-pf all`.
func TestFeedSourcesDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/feeds.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Feeds that update themselves")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/feeds.md has no yaml example under Feeds that update themselves")
	}
	cfg := DefaultFeedUpdateConfig()
	if err := config.Decode([]byte(block), &cfg); err != nil {
		t.Fatalf("the example: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the example: %v", err)
	}
	f := cfg.FeedSources[0]
	if len(cfg.FeedSources) != 1 || f.Name != "threats" || f.Interval != time.Hour || len(f.Sources) != 3 || f.Titles[3] != "badware" ||
		f.Fetch.MaxShrink != 0.5 || f.Fetch.IdleTimeout != 30*time.Second {
		t.Fatalf("the example decodes to %+v", cfg)
	}
	_, list, _ := strings.Cut(block, "feed_sources:")
	all := DefaultAllConfig()
	if err := config.Decode([]byte("feed_sources:"+list), &all); err != nil || len(all.FeedSources) != 1 {
		t.Fatalf("feed_sources: under svc-pf all: %v", err)
	}
	if err := feedbuild.ValidateFeedSources(all.FeedSources); err != nil {
		t.Fatal(err)
	}
}
