package node

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// buildFeed writes (or updates) the feed "f" in dir from an adblock list
// of the given names, code 3.
func buildFeed(t *testing.T, dir string, names ...string) {
	t.Helper()
	list := filepath.Join(t.TempDir(), "list.txt")
	var b strings.Builder
	for _, n := range names {
		b.WriteString("||" + n + "^\n")
	}
	if err := os.WriteFile(list, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := feedbuild.ParseSource("adblock:3:" + list)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := feedbuild.Build(context.Background(), feedbuild.BuildConfig{Dir: dir, Name: "f",
		Titles: map[uint16]string{3: "badware"}, Sources: []feedbuild.Source{src}}); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after 30s", what)
		}
	}
}

// TestNewValidates: a sessions bucket without NATS is refused (nothing
// would follow it); an empty config is a node without feeds.
func TestNewValidates(t *testing.T) {
	if _, err := New(Config{SessionsBucket: "eu"}); err == nil || !strings.Contains(err.Error(), "sessions bucket without NATS") {
		t.Fatalf("bucket without NATS: %v", err)
	}
	if _, err := New(Config{}); err != nil {
		t.Fatalf("an empty config is a node without feeds: %v", err)
	}
}

// TestReadyAndGeneration: the node is not ready until its feed has
// loaded (Ready names the feed), and its generation moves when the feed
// moves to a new version, not on every call.
func TestReadyAndGeneration(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "f")
	n, err := New(Config{Feeds: []feeds.FeedConfig{{Name: "f", URL: dir, PollInterval: 20 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "feed f not loaded yet") {
		t.Fatalf("Ready before the feed loaded: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	buildFeed(t, dir, "one.example")
	waitFor(t, "ready", func() bool { return n.Ready() == nil })
	g1 := n.Generation()
	if g := n.Generation(); g != g1 {
		t.Fatalf("generation moved without a change: %d then %d", g1, g)
	}
	if cats := n.Feeds().Lookup("www.one.example", "", nil); len(cats) != 1 || cats[0].Code != 3 {
		t.Fatalf("lookup: %+v", cats)
	}
	if v := n.View(); v.Categories == nil || v.Sessions != nil || v.Settings != nil {
		t.Fatalf("view of a node without NATS: %+v", v)
	}
	buildFeed(t, dir, "one.example", "two.example")
	waitFor(t, "the feed's second version", func() bool { return n.Feeds().Set().Feeds()[0].Version == 2 })
	if g := n.Generation(); g == g1 {
		t.Fatalf("generation %d unchanged after the feed's new version", g)
	}
	if c := n.Counts(); c != (Counts{}) {
		t.Fatalf("counts without NATS: %+v", c)
	}
}

// TestFeedProblems: a stale feed is named with its failures, the version
// it still serves, its last success and its error; a loaded, fresh one is
// not named.
func TestFeedProblems(t *testing.T) {
	last := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ok, stale feeds.FeedStatus
	ok.Name, ok.Version = "fresh", 4
	stale.Name, stale.Version, stale.Stale, stale.Failures, stale.LastSuccess, stale.LastError = "old", 7, true, 12, last, "dial: refused"
	got := feedProblems([]feeds.FeedStatus{ok, stale})
	want := "feed old failing for longer than its stale_after (12 polls in a row), still serving version 7, last success 2026-01-02T03:04:05Z: dial: refused"
	if got != want {
		t.Fatalf("feedProblems:\n got %q\nwant %q", got, want)
	}
	if got := feedProblems([]feeds.FeedStatus{ok}); got != "" {
		t.Fatalf("a fresh feed is a problem: %q", got)
	}
}

// TestPolicyCacheMetrics: the engine's lookups of compiled policies are
// counted on the node's registry, a miss for the first and a hit after.
func TestPolicyCacheMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	n, err := New(Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	v := n.View()
	for range 3 {
		n.Engine().PolicyFor(&v, netip.MustParseAddr("127.0.0.1"))
	}
	want := `
# HELP svcpf_policy_cache_lookups_total Lookups in the node's cache of compiled policies, by result: hit, or miss (a set of settings documents merged and compiled).
# TYPE svcpf_policy_cache_lookups_total counter
svcpf_policy_cache_lookups_total{result="hit"} 2
svcpf_policy_cache_lookups_total{result="miss"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "svcpf_policy_cache_lookups_total"); err != nil {
		t.Fatal(err)
	}
}
