package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// smallFeed builds a feed directory named g from a two-line list:
// bad.example is code 3 (malware).
func smallFeed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	csv := filepath.Join(dir, "src.csv")
	if err := os.WriteFile(csv, []byte("bad.example,3\nads.example,7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := feedbuild.ParseSource("csv:-:" + csv)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "g")
	if _, err := feedbuild.Build(context.Background(), feedbuild.BuildConfig{Dir: out, Name: "g",
		Titles: map[uint16]string{3: "malware", 7: "ads"}, Sources: []feedbuild.Source{src}}); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitHealth polls base's /health until it answers want, for at most
// limit, and returns the body.
func waitHealth(t *testing.T, base string, want int, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		code, body := httpGet(t, base+"/health")
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/health still %d after %v, want %d: %s", base, code, limit, want, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// breakManifest replaces dir's feed.json by one that is not JSON and
// returns a function that puts the good one back.
func breakManifest(t *testing.T, dir string) (repair func()) {
	t.Helper()
	manifest := filepath.Join(dir, "feed.json")
	good, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(manifest, good, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// staleError checks a 503 /health body: it names feed g, its failure and
// the version still served.
func staleError(t *testing.T, body string) {
	t.Helper()
	var h map[string]any
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("/health body %q: %v", body, err)
	}
	if e, _ := h["error"].(string); h["status"] != "unavailable" || !strings.Contains(e, "feed g failing") ||
		!strings.Contains(e, "feed.json") || !strings.Contains(e, "serving version 1") {
		t.Fatalf("/health body does not name the feed and its error: %s", body)
	}
}

// TestStandaloneSimulatorFeedHealthAndMetrics: a standalone `svc-pf
// simulator` (NATS, a feed directory on disk) shows its read models'
// svcpf_feed_* and svcpf_readmodel_* on its own /metrics; when the feed's
// manifest is corrupted its /health turns 503 after stale_after, naming
// the feed and the error, while the simulator keeps answering from the
// last good version; and it turns 200 again once the manifest is repaired,
// without a restart.
func TestStandaloneSimulatorFeedHealthAndMetrics(t *testing.T) {
	bus := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, b := range []string{session.Bucket, settings.Bucket} {
		if _, err := bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b}); err != nil {
			t.Fatal(err)
		}
	}
	dir := smallFeed(t)
	cfg := DefaultSimulatorConfig()
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.NATS.URL = bus.Srv.ClientURL()
	cfg.Feeds = []feeds.FeedConfig{{Name: "g", URL: dir, PollInterval: 100 * time.Millisecond, StaleAfter: time.Second}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	nc, _, err := connectNode(ctx, cfg.NATS, "svc-pf simulator", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sn, err := startSimulatorNode(cfg, nc, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sn.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	base := "http://" + sn.Addr().String()
	get := func(path string) (int, string) { return httpGet(t, base+path) }
	waitHealth(t, base, http.StatusOK, 30*time.Second)

	_, metrics := get("/metrics")
	for _, want := range []string{`svcpf_feed_version{feed="g"} 1`, `svcpf_feed_entries{feed="g"} 2`,
		`svcpf_readmodel_ready{bucket="sessions"} 1`, `svcpf_readmodel_ready{bucket="settings"} 1`,
		"svc_pf_simulator_lua_workers 2", "svcpf_http_"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics without %q", want)
		}
	}

	// Break the feed: a manifest that is not JSON.
	repair := breakManifest(t, dir)
	staleError(t, waitHealth(t, base, http.StatusServiceUnavailable, 60*time.Second))
	// Meanwhile the last good version still answers.
	if code, b := get("/api/v1/domain?domain=www.bad.example"); code != 200 || !strings.Contains(b, `"match":"bad.example"`) {
		t.Fatalf("lookup while the feed fails: %d %s", code, b)
	}
	if _, m := get("/metrics"); !strings.Contains(m, `svcpf_feed_update_failures_total{feed="g",reason="manifest"}`) {
		t.Errorf("/metrics without the feed's manifest failures")
	}

	// Heal it: the next poll succeeds (the backoff is at most a minute).
	repair()
	waitHealth(t, base, http.StatusOK, 90*time.Second)
}

// TestAllHealthReportsAStaleFeed: under `svc-pf all` the node listener
// (which the resolver's API shares) and the simulator's answer /health
// from the same read models by the same rule: 503 naming a feed failing
// for longer than its stale_after, 200 once it heals. The node's /metrics
// carries the feed's series, the simulator's its own.
func TestAllHealthReportsAStaleFeed(t *testing.T) {
	dir := smallFeed(t)
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "g", URL: dir, PollInterval: 100 * time.Millisecond, StaleAfter: time.Second}}
	all := startAll(t, cfg)
	bases := []string{"http://" + all.Node.Addr().String(), "http://" + all.Simulator.Addr().String()}
	for _, base := range bases {
		waitHealth(t, base, http.StatusOK, 30*time.Second)
	}
	if _, m := httpGet(t, bases[0]+"/metrics"); !strings.Contains(m, `svcpf_feed_version{feed="g"} 1`) {
		t.Errorf("the node's /metrics without the feed's version")
	}
	if _, m := httpGet(t, bases[1]+"/metrics"); !strings.Contains(m, "svc_pf_simulator_lua_workers") {
		t.Errorf("the simulator's /metrics without its own series")
	}
	repair := breakManifest(t, dir)
	for _, base := range bases {
		staleError(t, waitHealth(t, base, http.StatusServiceUnavailable, 60*time.Second))
	}
	repair()
	for _, base := range bases {
		waitHealth(t, base, http.StatusOK, 90*time.Second)
	}
}
