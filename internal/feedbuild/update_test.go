package feedbuild

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

func TestValidateFeedSources(t *testing.T) {
	ok := FeedSourceConfig{Name: "threats", Dir: "feeds/threats", Interval: time.Hour, Sources: []string{"adblock:3:https://lists.example/list.txt"}}
	with := func(f func(*FeedSourceConfig)) []FeedSourceConfig {
		c := ok
		c.Sources = []string{"hosts:3:https://lists.example/hosts"}
		c.Name, c.Dir = "other", "feeds/other"
		f(&c)
		return []FeedSourceConfig{ok, c}
	}
	for _, tc := range []struct {
		name string
		list []FeedSourceConfig
		want string
	}{
		{"bad URL", with(func(c *FeedSourceConfig) { c.Sources = []string{"adblock:3:https:///list.txt"} }), `feed_sources[1].sources[0]: source "adblock:3:https:///list.txt": URL "https:///list.txt" names no host`},
		{"unsupported scheme", with(func(c *FeedSourceConfig) { c.Sources = []string{"adblock:3:ftp://x/list.txt"} }), `feed_sources[1].sources[0]: source "adblock:3:ftp://x/list.txt": scheme "ftp" is not supported`},
		{"bad format", with(func(c *FeedSourceConfig) { c.Sources = []string{"json:3:https://x/l"} }), `feed_sources[1].sources[0]: source "json:3:https://x/l": unknown format "json"`},
		{"bad code", with(func(c *FeedSourceConfig) { c.Sources = []string{"hosts:x:https://x/l"} }), `feed_sources[1].sources[0]: source "hosts:x:https://x/l":`},
		{"same source twice", with(func(c *FeedSourceConfig) { c.Sources = []string{"hosts:3:https://x/h", "hosts:3:https://x/h"} }), `feed_sources[1].sources[1]: "hosts:3:https://x/h" is sources[0] again`},
		{"no source", with(func(c *FeedSourceConfig) { c.Sources = nil }), "feed_sources[1].sources: empty"},
		{"negative interval", with(func(c *FeedSourceConfig) { c.Interval = -time.Minute }), "feed_sources[1].interval: -1m0s is not a positive interval of at least 10ms"},
		{"tiny interval", with(func(c *FeedSourceConfig) { c.Interval = time.Microsecond }), "feed_sources[1].interval: 1µs"},
		{"missing dir", with(func(c *FeedSourceConfig) { c.Dir = "" }), "feed_sources[1].dir: missing"},
		{"same dir", with(func(c *FeedSourceConfig) { c.Dir = "feeds/./threats" }), `feed_sources[1].dir: "feeds/./threats" is already built by feed_sources[0]`},
		{"duplicate name", with(func(c *FeedSourceConfig) { c.Name = "threats" }), `feed_sources[1].name: "threats" is already used by feed_sources[0]`},
		{"bad name", with(func(c *FeedSourceConfig) { c.Name = "a b" }), `feed_sources[1].name: "a b": want 1 to 64 letters`},
		{"bad max_shrink", with(func(c *FeedSourceConfig) { c.Fetch.MaxShrink = 2 }), "feed_sources[1].fetch.max_shrink: 2 is not a share"},
		{"bad ca_file", with(func(c *FeedSourceConfig) { c.Fetch.CAFile = "/nonexistent/ca.pem" }), "feed_sources[1].fetch.ca_file: open /nonexistent/ca.pem"},
	} {
		err := ValidateFeedSources(tc.list)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if _, err := NewUpdater(UpdaterConfig{Feeds: tc.list}); err == nil {
			t.Errorf("%s: NewUpdater accepted it", tc.name)
		}
	}
	if err := ValidateFeedSources([]FeedSourceConfig{ok, {Name: "local", Dir: "feeds/local", Sources: []string{"csv:-:own.csv"}}}); err != nil {
		t.Fatalf("a valid list: %v", err)
	}
}

// gauge is the value of a metric with exactly these labels, or -1.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// eventually polls cond every 20ms for up to 20s: the loop runs every
// 100ms, so a healthy run needs well under a second.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUpdaterEndToEnd: feed_sources with a 100ms interval against a real
// list server, and a node's feed client following the directory. The node
// sees the list's new domain after it changes; rounds with an unchanged
// list (304) write no version; a failing server leaves the feed as it was,
// says so in Status, Problems and the metrics, and heals without a
// restart.
func TestUpdaterEndToEnd(t *testing.T) {
	srv := newListServer(t, "||a.threat.example^\n||b.threat.example^\n")
	dir := filepath.Join(t.TempDir(), "threats")
	source := "adblock:3:" + srv.url()
	reg := prometheus.NewRegistry()
	u, err := NewUpdater(UpdaterConfig{Registerer: reg, Feeds: []FeedSourceConfig{{
		Name: "threats", Dir: dir, Interval: 100 * time.Millisecond, Titles: map[uint16]string{3: "badware"},
		Sources: []string{source},
		Fetch:   FetchConfig{Attempts: 2, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	node, err := feeds.New(feeds.Config{Feeds: []feeds.FeedConfig{{Name: "threats", URL: dir, PollInterval: 50 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = node.Run(ctx) }()
	has := func(name string) bool {
		cats := node.Lookup(name, "", nil)
		return len(cats) == 1 && cats[0].Code == 3 && cats[0].Title == "badware"
	}
	eventually(t, "the node to see a.threat.example", func() bool { return has("www.a.threat.example") })

	// Unchanged rounds: conditional requests answered 304, no version.
	eventually(t, "three conditional requests", func() bool { return srv.conditional.Load() >= 3 })
	if v := readManifest(t, dir).Latest(); v != 1 {
		t.Fatalf("an unchanged list wrote version %d", v)
	}
	if got := gauge(t, reg, "svcpf_feed_source_fetch_total", map[string]string{"feed": "threats", "source": source, "result": "not_modified"}); got < 2 {
		t.Fatalf("svcpf_feed_source_fetch_total{result=not_modified} = %v", got)
	}
	if got := gauge(t, reg, "svcpf_feed_source_last_success_timestamp_seconds", map[string]string{"feed": "threats", "source": source}); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("svcpf_feed_source_last_success_timestamp_seconds = %v", got)
	}

	srv.set("||a.threat.example^\n||b.threat.example^\n||new.threat.example^\n", 0)
	eventually(t, "the node to see new.threat.example", func() bool { return has("new.threat.example") })
	if v := readManifest(t, dir).Latest(); v != 2 {
		t.Fatalf("one change wrote version %d, want 2", v)
	}

	// The server fails: the feed keeps its content, the source is stale.
	srv.set("", http.StatusBadGateway)
	eventually(t, "the source to be stale", func() bool {
		return gauge(t, reg, "svcpf_feed_source_stale", map[string]string{"feed": "threats", "source": source}) == 1
	})
	st := u.Status()[0].Sources[0]
	if !st.Stale || st.ConsecutiveFailures < 1 || !strings.Contains(st.LastError, "HTTP 502") || st.LastResult != FetchFailed {
		t.Fatalf("status while failing: %+v", st)
	}
	p := u.Problems()
	if len(p) != 1 || !strings.Contains(p[0], "source "+source) || !strings.Contains(p[0], "the feed uses its last good copy") ||
		!strings.Contains(p[0], "check the URL and the server") {
		t.Fatalf("problems while failing: %q", p)
	}
	if !has("new.threat.example") || readManifest(t, dir).Latest() != 2 {
		t.Fatal("a failing source changed the feed")
	}

	// (Two of three entries: a shrink within max_shrink.)
	srv.set("||a.threat.example^\n||b.threat.example^\n", 0)
	eventually(t, "the feed to heal", func() bool { return !has("new.threat.example") && has("a.threat.example") })
	eventually(t, "no problem left", func() bool { return len(u.Problems()) == 0 })
	if got := gauge(t, reg, "svcpf_feed_source_stale", map[string]string{"feed": "threats", "source": source}); got != 0 {
		t.Fatalf("svcpf_feed_source_stale after healing = %v", got)
	}
}

// TestUpdaterRunOnce: one round; an error names the feed and the stale
// source, and a build without a last good copy fails.
func TestUpdaterRunOnce(t *testing.T) {
	srv := newListServer(t, names(0, 5))
	tmp := t.TempDir()
	cfg := UpdaterConfig{Feeds: []FeedSourceConfig{
		{Name: "a", Dir: filepath.Join(tmp, "a"), Sources: []string{"domains:1:" + srv.url()}, Fetch: FetchConfig{Attempts: 1}},
	}}
	u, err := NewUpdater(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.RunOnce(context.Background()); err != nil {
		t.Fatalf("a good round: %v", err)
	}
	srv.set("", http.StatusInternalServerError)
	err = u.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "feed a: built from the last good copy of domains:1:"+srv.url()) {
		t.Fatalf("a stale round: %v", err)
	}
	if s := u.Status()[0]; s.ConsecutiveFailures != 0 || s.Version != 1 || s.Sources[0].ConsecutiveFailures != 1 {
		t.Fatalf("status after a stale round: %+v", s)
	}
	cfg.Feeds[0].Dir = filepath.Join(tmp, "b")
	if u, err = NewUpdater(cfg); err != nil {
		t.Fatal(err)
	}
	err = u.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no last good copy") {
		t.Fatalf("a failed first round: %v", err)
	}
	if p := u.Problems(); len(p) != 2 || !strings.Contains(p[0], "feed a (") || !strings.Contains(p[0], "it has no version from this process yet") || !strings.Contains(p[1], "the feed is not built without it") {
		t.Fatalf("problems after a failed first round: %q", p)
	}
}
