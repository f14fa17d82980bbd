package node

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// TestWaiting: Waiting names the first part of the policy data not
// loaded yet — the sessions bucket, then the settings bucket, then the
// feeds — and Missing lists each; both are empty once everything has
// loaded, and stay so when NATS goes away (the read models keep their
// data), while Ready is the one that would report a stale feed.
func TestWaiting(t *testing.T) {
	bus := natstest.Start(t)
	dir := filepath.Join(t.TempDir(), "f")
	n, err := New(Config{NATS: bus.NC, Feeds: []feeds.FeedConfig{{Name: "f", URL: dir, PollInterval: 20 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if w, m := n.Waiting(), n.Missing(); w != PartSessions ||
		!slices.Equal(m, []string{"the sessions bucket", "the settings bucket", "feed f"}) {
		t.Fatalf("before anything: Waiting %q, Missing %q", w, m)
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
	natstest.CreateBucket(t, bus.JS, session.Bucket)
	waitFor(t, "sessions loaded", func() bool { return n.Waiting() == PartSettings })
	natstest.CreateBucket(t, bus.JS, settings.Bucket)
	waitFor(t, "settings loaded", func() bool { return n.Waiting() == PartFeeds })
	if m := n.Missing(); !slices.Equal(m, []string{"feed f"}) {
		t.Fatalf("Missing with the feed alone: %q", m)
	}
	buildFeed(t, dir, "one.example")
	waitFor(t, "everything loaded", func() bool { return n.Waiting() == "" })
	if m := n.Missing(); m != nil {
		t.Fatalf("Missing once loaded: %q", m)
	}
	bus.StopServer()
	time.Sleep(200 * time.Millisecond) // the watches notice
	if w, m := n.Waiting(), n.Missing(); w != "" || m != nil {
		t.Fatalf("after NATS went away: Waiting %q, Missing %q", w, m)
	}
}
