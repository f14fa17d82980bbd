package feeds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// clientEnv is one feed directory, served over HTTP or read from disk, and a
// client of it.
type clientEnv struct {
	d   *feedDir
	srv *feedServer // nil when the client reads the directory
	c   *testClient
}

var sourceModes = []string{"http", "dir"}

func newClientEnv(t *testing.T, mode string, tweak func(*Config)) *clientEnv {
	t.Helper()
	e := &clientEnv{d: newFeedDir(t, "ads")}
	url := e.d.dir
	if mode == "http" {
		e.srv = newFeedServer(t, e.d.dir)
		url = e.srv.url()
	}
	e.c = newTestClient(t, []FeedConfig{{Name: "ads", URL: url}}, tweak)
	return e
}

// requests returns the HTTP requests since the last call (none for a
// directory).
func (e *clientEnv) requests() []string {
	if e.srv == nil {
		return nil
	}
	return e.srv.requests()
}

func forModes(t *testing.T, fn func(t *testing.T, mode string)) {
	for _, mode := range sourceModes {
		t.Run(mode, func(t *testing.T) { fn(t, mode) })
	}
}

func TestFirstLoad(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("ads.example.com", 1), putLine("example.org/shop", 2), putLine("gone.example", 3))
		e.d.delta(putLine("tracker.example.net", 2), delLine("gone.example"))
		e.d.delta(putLine("ads.example.com", 1, 3))
		if e.c.Ready() {
			t.Fatal("ready before the first poll")
		}
		e.c.mustPoll()
		if !e.c.Ready() {
			t.Fatal("not ready after loading the only feed")
		}
		expectCodes(t, e.c, "x.ads.example.com", "ads:1", "ads:3")
		expectCodes(t, e.c, "example.org/shop/cart", "ads:2")
		expectCodes(t, e.c, "example.org/blog")
		expectCodes(t, e.c, "tracker.example.net", "ads:2")
		expectCodes(t, e.c, "gone.example")
		st := e.c.Status()[0]
		if st.Version != 3 || st.Latest != 3 || st.Entries != 3 || st.LoadedAt.IsZero() || st.LastError != "" {
			t.Fatalf("status %+v", st)
		}
		if v := e.c.gauge(e.c.m.version, "ads"); v != 3 {
			t.Fatalf("svcpf_feed_version = %v", v)
		}
		if v := e.c.gauge(e.c.m.entries, "ads"); v != 3 {
			t.Fatalf("svcpf_feed_entries = %v", v)
		}
		if v := e.c.gauge(e.c.m.lastSuccess, "ads"); v == 0 {
			t.Fatal("svcpf_feed_last_success_timestamp_seconds not set")
		}
		if mode == "http" {
			want := []string{"feed.json OK", "feed-codes.json OK", "snapshot_1.gz OK", "delta_2.gz OK", "delta_3.gz OK"}
			if got := e.requests(); !slices.Equal(got, want) {
				t.Fatalf("requests %v, want %v", got, want)
			}
		}
	})
}

func TestDeltaApplied(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("ads.example.com", 1), putLine("keep.example.com", 2))
		e.c.mustPoll()
		before := e.c.Set()
		e.requests()

		e.d.delta(putLine("ads.example.com", 3), putLine("new.example.com", 4))
		e.c.mustPoll()
		expectCodes(t, e.c, "ads.example.com", "ads:3")
		expectCodes(t, e.c, "new.example.com", "ads:4")
		expectCodes(t, e.c, "keep.example.com", "ads:2")
		if got := before.Lookup("ads.example.com", "", nil); len(got) != 1 || got[0].Code != 1 {
			t.Fatalf("a Set held across the update changed: %v", got)
		}
		if mode == "http" {
			// The snapshot is not fetched again: only the new delta.
			want := []string{"feed.json OK", "feed-codes.json Not Modified", "delta_2.gz OK"}
			if got := e.requests(); !slices.Equal(got, want) {
				t.Fatalf("requests %v, want %v", got, want)
			}
		}
	})
}

func TestSeveralDeltasInOnePoll(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("a.example", 1))
		e.c.mustPoll()
		e.requests()
		e.d.delta(putLine("b.example", 2))
		e.d.delta(putLine("a.example", 3), putLine("c.example", 3))
		e.d.delta(delLine("b.example"))
		e.c.mustPoll()
		if v := e.c.version("ads"); v != 4 {
			t.Fatalf("version %d, want 4", v)
		}
		expectCodes(t, e.c, "a.example", "ads:3")
		expectCodes(t, e.c, "b.example")
		expectCodes(t, e.c, "c.example", "ads:3")
		if mode == "http" {
			want := []string{"feed.json OK", "feed-codes.json Not Modified", "delta_2.gz OK", "delta_3.gz OK", "delta_4.gz OK"}
			if got := e.requests(); !slices.Equal(got, want) {
				t.Fatalf("requests %v, want %v", got, want)
			}
		}
	})
}

func TestNewSnapshot(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("a.example", 1))
		e.d.delta(putLine("b.example", 2))
		e.c.mustPoll()
		e.requests()
		// The publisher compacts: version 3 is a snapshot, and the
		// manifest no longer lists 1 and 2.
		e.d.snapshot(putLine("b.example", 2), putLine("c.example", 3))
		e.c.mustPoll()
		if v := e.c.version("ads"); v != 3 {
			t.Fatalf("version %d, want 3", v)
		}
		expectCodes(t, e.c, "a.example")
		expectCodes(t, e.c, "b.example", "ads:2")
		expectCodes(t, e.c, "c.example", "ads:3")
		if mode == "http" {
			want := []string{"feed.json OK", "feed-codes.json Not Modified", "snapshot_3.gz OK"}
			if got := e.requests(); !slices.Equal(got, want) {
				t.Fatalf("requests %v, want %v", got, want)
			}
		}
	})
}

// TestBehindTheSnapshot: a node that held version 1 while the publisher
// went on to a new snapshot (4) and a delta (5) loads the snapshot and the
// delta, not the deltas it missed.
func TestBehindTheSnapshot(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("a.example", 1))
		e.c.mustPoll()
		e.requests()
		e.d.delta(putLine("b.example", 2))
		e.d.delta(putLine("c.example", 3))
		e.d.snapshot(putLine("a.example", 1), putLine("b.example", 2), putLine("c.example", 3))
		e.d.delta(delLine("a.example"), putLine("d.example", 4))
		e.c.mustPoll()
		if v := e.c.version("ads"); v != 5 {
			t.Fatalf("version %d, want 5", v)
		}
		expectCodes(t, e.c, "a.example")
		expectCodes(t, e.c, "d.example", "ads:4")
		if mode == "http" {
			want := []string{"feed.json OK", "feed-codes.json Not Modified", "snapshot_4.gz OK", "delta_5.gz OK"}
			if got := e.requests(); !slices.Equal(got, want) {
				t.Fatalf("requests %v, want %v", got, want)
			}
		}
	})
}

// TestCatchUpToASnapshot: a node one or two versions before a new snapshot
// applies the manifest's catch-up deltas (as feed build writes them: delta
// S-1 and delta S beside snapshot S) instead of downloading the snapshot,
// and then holds the snapshot's version as the manifest lists it, so the
// next poll downloads nothing.
func TestCatchUpToASnapshot(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.d.snapshot(putLine("a.example", 1)) // 1
	e.c.mustPoll()
	d2 := e.d.delta(putLine("b.example", 2)) // 2, which the node misses
	// Version 3 is a snapshot; delta_3 (the change from 2) is written beside it.
	e.d.catchUp = []feed.Version{d2, e.d.catchUpDelta(putLine("c.example", 3))}
	e.d.snapshot(putLine("a.example", 1), putLine("b.example", 2), putLine("c.example", 3))
	e.requests()
	e.c.mustPoll()
	want := []string{"feed.json OK", "feed-codes.json Not Modified", "delta_2.gz OK", "delta_3.gz OK"}
	if got := e.requests(); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	if v := e.c.version("ads"); v != 3 {
		t.Fatalf("version %d, want 3", v)
	}
	expectCodes(t, e.c, "b.example", "ads:2")
	expectCodes(t, e.c, "c.example", "ads:3")
	e.c.mustPoll()
	want = []string{"feed.json Not Modified", "feed-codes.json Not Modified"}
	if got := e.requests(); !slices.Equal(got, want) {
		t.Fatalf("after catching up: requests %v, want %v (the snapshot's version is held as listed)", got, want)
	}
}

// TestTwoVersionsBehind: the manifest still lists every delta after the
// held version, so only those are fetched.
func TestTwoVersionsBehind(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.d.snapshot(putLine("a.example", 1))
	e.d.delta(putLine("b.example", 2))
	e.c.mustPoll()
	e.requests()
	e.d.delta(putLine("c.example", 3))
	e.d.delta(putLine("d.example", 4))
	e.c.mustPoll()
	want := []string{"feed.json OK", "feed-codes.json Not Modified", "delta_3.gz OK", "delta_4.gz OK"}
	if got := e.requests(); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	expectCodes(t, e.c, "d.example", "ads:4")
	expectCodes(t, e.c, "b.example", "ads:2")
}

func TestUnchangedPollsDoNotDownload(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.d.snapshot(putLine("a.example", 1))
	e.c.mustPoll()
	e.requests()
	set := e.c.Set()
	fetched := func() float64 { return testutil.ToFloat64(e.c.m.fetchedBytes.WithLabelValues("ads")) }
	before := fetched()
	for range 3 {
		e.c.mustPoll()
	}
	if after := fetched(); after != before {
		t.Fatalf("unchanged polls read %v bytes", after-before)
	}
	want := slices.Repeat([]string{"feed.json Not Modified", "feed-codes.json Not Modified"}, 3)
	if got := e.requests(); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	if e.c.Set() != set {
		t.Fatal("an unchanged poll published a new Set")
	}
}

// TestLastModifiedOnly: a server without ETags still answers 304 to
// If-Modified-Since, once the file's date is old enough to trust.
func TestLastModifiedOnly(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.srv.noETag = true
	e.d.snapshot(putLine("a.example", 1))
	old := time.Now().Add(-time.Minute)
	for _, f := range []string{feed.ManifestFile, feed.CodesFile} {
		if err := os.Chtimes(filepath.Join(e.d.dir, f), old, old); err != nil {
			t.Fatal(err)
		}
	}
	e.c.mustPoll()
	e.requests()
	e.c.mustPoll()
	want := []string{"feed.json Not Modified", "feed-codes.json Not Modified"}
	if got := e.requests(); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}

	// A manifest replaced within the second it was served keeps its
	// HTTP date: such a recent date is not trusted, so nothing is missed.
	e.d.delta(putLine("b.example", 2))
	e.c.mustPoll()
	e.d.delta(putLine("c.example", 3))
	e.c.mustPoll()
	if v := e.c.version("ads"); v != 3 {
		t.Fatalf("version %d, want 3", v)
	}
}

func TestUnchangedDirectoryPublishesNothing(t *testing.T) {
	e := newClientEnv(t, "dir", nil)
	e.d.snapshot(putLine("a.example", 1))
	e.c.mustPoll()
	set := e.c.Set()
	e.c.mustPoll()
	if e.c.Set() != set {
		t.Fatal("an unchanged poll published a new Set")
	}
}

// TestEmptySnapshot: a snapshot the manifest calls empty is applied.
func TestEmptySnapshot(t *testing.T) {
	e := newClientEnv(t, "dir", nil)
	e.d.snapshot(putLine("a.example", 1))
	e.c.mustPoll()
	e.d.snapshot()
	e.c.mustPoll()
	if st := e.c.Status()[0]; st.Version != 2 || st.Entries != 0 {
		t.Fatalf("status %+v", st)
	}
	expectCodes(t, e.c, "a.example")
}

func TestTitlesChangeWithoutAVersion(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.d.snapshot(putLine("a.example", 1))
	e.c.mustPoll()
	e.d.codes = []feed.Code{{Code: 1, Title: "Advertising"}}
	e.d.publish()
	e.c.mustPoll()
	got := e.c.Set().Lookup("a.example", "", nil)
	if len(got) != 1 || got[0].Title != "Advertising" {
		t.Fatalf("lookup %+v", got)
	}
	if v := e.c.version("ads"); v != 1 {
		t.Fatalf("version %d", v)
	}
	if codes := e.c.Set().Codes(); !slices.Equal(codes, []CodeInfo{{Code: 1, Title: "Advertising", Feed: "ads"}}) {
		t.Fatalf("codes %+v", codes)
	}
}

func TestMissingCodesFileMeansNoTitles(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.d.snapshot(putLine("a.example", 1))
	e.d.remove(feed.CodesFile)
	e.c.mustPoll()
	got := e.c.Set().Lookup("a.example", "", nil)
	if len(got) != 1 || got[0].Code != 1 || got[0].Title != "" {
		t.Fatalf("lookup %+v", got)
	}
	e.c.mustPoll()
	if n := e.c.logs.count("no feed-codes.json"); n != 1 {
		t.Fatalf("logged the missing codes file %d times, want once", n)
	}
}

// TestRebuiltDirectory: the directory was rebuilt and has reached the
// version the node holds with other contents; the checksum shows it, and
// the node reloads from the snapshot.
func TestRebuiltDirectory(t *testing.T) {
	forModes(t, func(t *testing.T, mode string) {
		e := newClientEnv(t, mode, nil)
		e.d.snapshot(putLine("a.example", 1))
		e.d.delta(putLine("b.example", 2))
		e.c.mustPoll()
		e.d.versions, e.d.next = nil, 1
		e.d.snapshot(putLine("x.example", 1))
		e.d.delta(putLine("y.example", 2))
		e.d.delta(putLine("z.example", 3))
		e.c.mustPoll()
		if v := e.c.version("ads"); v != 3 {
			t.Fatalf("version %d, want 3", v)
		}
		expectCodes(t, e.c, "a.example")
		expectCodes(t, e.c, "b.example")
		expectCodes(t, e.c, "z.example", "ads:3")
	})
}

// TestBackwardsThenRollback: an older manifest is first taken for a stale
// mirror (a failure; the node keeps its version), and followed once it has
// persisted for RollbackAfter (a rebuilt or rolled-back directory).
func TestBackwardsThenRollback(t *testing.T) {
	clock := newFakeClock()
	e := newClientEnv(t, "http", func(c *Config) { c.Clock = clock.Now; c.RollbackAfter = time.Minute })
	e.d.snapshot(putLine("a.example", 1))
	older := e.d.manifest()
	e.d.delta(putLine("b.example", 2))
	e.c.mustPoll()

	e.d.writeManifest(older)
	for range 3 {
		if err := e.c.pollAll(); reasonOf(err) != reasonBackwards {
			t.Fatalf("poll: %v, want a backwards failure", err)
		}
		clock.Advance(20 * time.Second)
	}
	expectCodes(t, e.c, "b.example", "ads:2")
	if n := e.c.failures("ads", reasonBackwards); n != 3 {
		t.Fatalf("backwards failures %v", n)
	}
	clock.Advance(time.Second) // now a minute since the first older manifest
	e.c.mustPoll()
	if v := e.c.version("ads"); v != 1 {
		t.Fatalf("version %d, want 1", v)
	}
	expectCodes(t, e.c, "b.example")
	expectCodes(t, e.c, "a.example", "ads:1")
	if v := e.c.gauge(e.c.m.version, "ads"); v != 1 {
		t.Fatalf("svcpf_feed_version = %v", v)
	}
}

// TestSecondRollbackWaitsAgain: after a rollback, a directory that goes
// back once more is again taken for a stale mirror for RollbackAfter, not
// followed at once because the first one was.
func TestSecondRollbackWaitsAgain(t *testing.T) {
	clock := newFakeClock()
	e := newClientEnv(t, "dir", func(c *Config) { c.Clock = clock.Now; c.RollbackAfter = time.Minute })
	e.d.snapshot(putLine("a.example", 1))
	v1 := e.d.manifest()
	e.d.delta(putLine("b.example", 2))
	v2 := e.d.manifest()
	e.d.delta(putLine("c.example", 3))
	e.c.mustPoll()

	e.d.writeManifest(v2)
	if err := e.c.pollAll(); reasonOf(err) != reasonBackwards {
		t.Fatalf("poll: %v, want a backwards failure", err)
	}
	clock.Advance(time.Minute)
	e.c.mustPoll()
	if v := e.c.version("ads"); v != 2 {
		t.Fatalf("version %d after the rollback, want 2", v)
	}
	e.d.writeManifest(v1)
	if err := e.c.pollAll(); reasonOf(err) != reasonBackwards {
		t.Fatalf("poll after the rollback: %v, want a backwards failure", err)
	}
	expectCodes(t, e.c, "b.example", "ads:2")
}

func TestDelay(t *testing.T) {
	clock := newFakeClock()
	d := newFeedDir(t, "ads")
	d.now = clock.Now
	c := newTestClient(t, []FeedConfig{{Name: "ads", URL: d.dir, Delay: time.Hour}}, func(c *Config) { c.Clock = clock.Now })
	d.snapshot(putLine("a.example", 1))
	c.mustPoll()
	if c.Ready() || c.version("ads") != 0 {
		t.Fatal("a version younger than the delay was applied")
	}
	if st := c.Status()[0]; st.Latest != 1 || st.LastError != "" {
		t.Fatalf("status while waiting %+v", st)
	}
	clock.Advance(time.Hour)
	c.mustPoll()
	if !c.Ready() || c.version("ads") != 1 {
		t.Fatal("the version was not applied once old enough")
	}

	clock.Advance(time.Minute)
	d.delta(putLine("b.example", 2)) // created at +61m
	clock.Advance(30 * time.Minute)
	d.delta(putLine("c.example", 3)) // created at +91m
	clock.Advance(30 * time.Minute)
	c.mustPoll() // +121m: delta 2 is 60m old, delta 3 30m
	if v := c.version("ads"); v != 2 {
		t.Fatalf("version %d, want 2 (3 is not old enough)", v)
	}
	if st := c.Status()[0]; st.Latest != 3 {
		t.Fatalf("latest %d", st.Latest)
	}
	if n := c.logs.count("wait for the feed's delay"); n != 2 {
		t.Fatalf("logged the held-back versions %d times, want once each for versions 1 and 3", n)
	}
	clock.Advance(30 * time.Minute)
	c.mustPoll()
	if v := c.version("ads"); v != 3 {
		t.Fatalf("version %d, want 3", v)
	}
}

// TestZeroDelayIgnoresClockSkew: with no delay, a created_at ahead of the
// node's clock does not hold a version back.
func TestZeroDelayIgnoresClockSkew(t *testing.T) {
	d := newFeedDir(t, "ads")
	d.now = func() time.Time { return time.Now().Add(time.Hour) }
	c := newTestClient(t, []FeedConfig{{Name: "ads", URL: d.dir}}, nil)
	d.snapshot(putLine("a.example", 1))
	c.mustPoll()
	if c.version("ads") != 1 {
		t.Fatal("not applied")
	}
}

func TestTwoFeedsUniteCodes(t *testing.T) {
	a, b := newFeedDir(t, "ads"), newFeedDir(t, "security")
	b.codes = []feed.Code{{Code: 1, Title: "Advertising"}, {Code: 5, Title: "Phishing"}}
	a.snapshot(putLine("ads.example.com", 1), putLine("example.com/login", 2))
	b.snapshot(putLine("example.com", 1, 5))
	srv := newFeedServer(t, b.dir)
	c := newTestClient(t, []FeedConfig{{Name: "ads", URL: a.dir}, {Name: "security", URL: srv.url()}}, nil)
	c.mustPoll()
	got := c.Set().Lookup("x.ads.example.com", "/", nil)
	want := []feed.Category{
		{Code: 1, Title: "Ads", Feed: "ads", Name: "ads.example.com"},
		{Code: 1, Title: "Advertising", Feed: "security", Name: "example.com"},
		{Code: 5, Title: "Phishing", Feed: "security", Name: "example.com"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lookup\n got %+v\nwant %+v", got, want)
	}
	got = c.Set().Lookup("example.com.", "/login/x", got[:0])
	if len(got) != 3 || got[0].Key() != "example.com/login" || got[0].Code != 2 || got[1].Key() != "example.com" {
		t.Fatalf("lookup with a path %+v", got)
	}
	codes := c.Set().Codes()
	if len(codes) != 6 || codes[0] != (CodeInfo{Code: 1, Title: "Ads", Feed: "ads"}) || codes[5] != (CodeInfo{Code: 5, Title: "Phishing", Feed: "security"}) {
		t.Fatalf("codes %+v", codes)
	}
	feeds := c.Set().Feeds()
	if len(feeds) != 2 || feeds[0].Name != "ads" || feeds[1].Name != "security" || feeds[1].Entries != 1 {
		t.Fatalf("feeds %+v", feeds)
	}
}

// TestReadyNeedsEveryFeed: a feed that never loads keeps the node not
// ready, and Status says why.
func TestReadyNeedsEveryFeed(t *testing.T) {
	a := newFeedDir(t, "ads")
	a.snapshot(putLine("a.example", 1))
	missing := filepath.Join(t.TempDir(), "nothing-here")
	c := newTestClient(t, []FeedConfig{{Name: "ads", URL: a.dir}, {Name: "later", URL: missing}}, nil)
	if err := c.pollAll(); err == nil {
		t.Fatal("no error for a missing directory")
	}
	if c.Ready() {
		t.Fatal("ready with a feed never loaded")
	}
	expectCodes(t, c, "a.example", "ads:1") // the loaded feed serves meanwhile
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady = %v", err)
	}
	st := c.Status()
	if st[1].Name != "later" || st[1].Version != 0 || st[1].Failures != 1 || !strings.Contains(st[1].LastError, "feed.json") {
		t.Fatalf("status %+v", st[1])
	}
	if js := string(mustMarshal(t, st[1])); !strings.Contains(js, `"name":"later","version":0,"entries":0,"latest":0`) || strings.Contains(js, "loaded_at") {
		t.Fatalf("status JSON %s", js)
	}

	later := &feedDir{t: t, dir: missing, name: "later", next: 1, now: time.Now, contents: map[int64]map[string][]uint16{}}
	if err := os.Mkdir(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	later.snapshot(putLine("b.example", 2))
	c.mustPoll()
	if !c.Ready() || c.WaitReady(context.Background()) != nil {
		t.Fatal("not ready with every feed loaded")
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNoFeedsIsReady(t *testing.T) {
	c := newTestClient(t, nil, nil)
	if !c.Ready() || len(c.Set().Lookup("a.example", "", nil)) != 0 || len(c.Status()) != 0 {
		t.Fatal("a client without feeds")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"no name", Config{Feeds: []FeedConfig{{URL: "/x"}}}, "feeds[0]: name is required"},
		{"bad name", Config{Feeds: []FeedConfig{{Name: "my feed", URL: "/x"}}}, "letters, digits"},
		{"long name", Config{Feeds: []FeedConfig{{Name: strings.Repeat("a", 65), URL: "/x"}}}, "1 to 64"},
		{"duplicate", Config{Feeds: []FeedConfig{{Name: "a", URL: "/x"}, {Name: "a", URL: "/y"}}}, "feeds[1]: name \"a\" is already used by feeds[0]"},
		{"no url", Config{Feeds: []FeedConfig{{Name: "a"}}}, "url: required"},
		{"scheme", Config{Feeds: []FeedConfig{{Name: "a", URL: "ftp://h/x/"}}}, "scheme \"ftp\""},
		{"no host", Config{Feeds: []FeedConfig{{Name: "a", URL: "http:///x/"}}}, "names no host"},
		{"query", Config{Feeds: []FeedConfig{{Name: "a", URL: "https://h/x/?a=b"}}}, "remove the query"},
		{"bad url", Config{Feeds: []FeedConfig{{Name: "a", URL: "http://h:x/"}}}, "not a URL"},
		{"file host", Config{Feeds: []FeedConfig{{Name: "a", URL: "file://h/x"}}}, "names no host"},
		{"interval", Config{Feeds: []FeedConfig{{Name: "a", URL: "/x", PollInterval: -time.Second}}}, "poll_interval -1s is not positive"},
		{"delay", Config{Feeds: []FeedConfig{{Name: "a", URL: "/x", Delay: -time.Second}}}, "delay -1s is negative"},
		{"timeout", Config{FetchTimeout: -1}, "FetchTimeout"},
		{"limit", Config{Limits: Limits{FileBytes: -1}}, "negative limit"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: New = %v, want an error containing %q", c.name, err, c.err)
		}
	}
	c, err := New(Config{Feeds: []FeedConfig{
		{Name: "a", URL: "https://feeds.example/ads"},
		{Name: "b", URL: "file:///srv/feeds/b"},
		{Name: "c", URL: "relative/dir", PollInterval: time.Minute, Delay: time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if hs := c.feeds[0].src.(*httpSource); hs.base.String() != "https://feeds.example/ads/" {
		t.Fatalf("base %s", hs.base)
	}
	if ds := c.feeds[1].src.(*dirSource); ds.dir != "/srv/feeds/b" {
		t.Fatalf("dir %s", ds.dir)
	}
	if ds := c.feeds[2].src.(*dirSource); !filepath.IsAbs(ds.dir) {
		t.Fatalf("dir %s is not absolute", ds.dir)
	}
	if c.feeds[0].cfg.PollInterval != DefaultPollInterval || c.feeds[2].cfg.PollInterval != time.Minute {
		t.Fatal("poll intervals")
	}
}

func TestRunTwiceAndStop(t *testing.T) {
	d := newFeedDir(t, "ads")
	d.snapshot(putLine("a.example", 1))
	c := newTestClient(t, []FeedConfig{{Name: "ads", URL: d.dir, PollInterval: time.Hour}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err == nil {
		t.Fatal("a second Run was accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentLookupDuringUpdates runs the poller and readers together
// (run it with -race): every Set a reader sees is one whole version.
func TestConcurrentLookupDuringUpdates(t *testing.T) {
	d := newFeedDir(t, "ads")
	d.snapshot(putLine("v.example", 1), putLine("w.example", 1))
	srv := newFeedServer(t, d.dir)
	c := newTestClient(t, []FeedConfig{{Name: "ads", URL: srv.url(), PollInterval: time.Millisecond}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()

	const last = 30
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			dst := make([]feed.Category, 0, 4)
			seen := uint16(0)
			for !stop.Load() {
				set := c.Set()
				v := set.Lookup("v.example", "", dst[:0])
				w := set.Lookup("a.w.example", "", nil)
				if len(v) != len(w) || (len(v) == 1 && v[0].Code != w[0].Code) {
					errs <- fmt.Errorf("one Set answered %v and %v", v, w)
					return
				}
				if len(v) == 1 {
					if v[0].Code < seen {
						errs <- fmt.Errorf("version went from %d to %d", seen, v[0].Code)
						return
					}
					seen = v[0].Code
				}
			}
		})
	}
	for i := uint16(2); i <= last; i++ {
		d.delta(putLine("v.example", i), putLine("w.example", i))
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.version("ads") != last && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	cancel()
	<-runDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v := c.version("ads"); v != last {
		t.Fatalf("version %d, want %d", v, last)
	}
}

func TestBackoff(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{{0, s}, {1, s}, {2, 2 * s}, {3, 4 * s}, {10, 30 * s}} {
		if got := backoff(s, 30*s, c.failures); got != c.want {
			t.Errorf("backoff after %d failures = %s, want %s", c.failures, got, c.want)
		}
	}
	if got := backoff(time.Minute, 30*s, 5); got != time.Minute {
		t.Errorf("backoff below the interval: %s", got)
	}
	for range 100 {
		if j := jitter(s); j < 900*time.Millisecond || j >= 1100*time.Millisecond {
			t.Fatalf("jitter %s", j)
		}
	}
}
