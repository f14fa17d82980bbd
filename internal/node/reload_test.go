package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

func writeZone(t *testing.T, path string, serial int, trigger string) {
	t.Helper()
	tmp := path + ".tmp"
	body := "$TTL 60\n@ SOA ns.op.rpz. h.op.rpz. " + strconv.Itoa(serial) + " 3600 600 86400 60\n" + trigger + " CNAME .\n"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReloadZonesAndFeeds: a running node swaps its RPZ zones and its
// feeds on commit, not before; the new zone set is the one polled
// afterwards; an invalid list changes nothing; Generation moves.
func TestReloadZonesAndFeeds(t *testing.T) {
	dir := t.TempDir()
	zoneA, zoneB := filepath.Join(dir, "a.rpz"), filepath.Join(dir, "b.rpz")
	writeZone(t, zoneA, 1, "a.test")
	writeZone(t, zoneB, 1, "b.test")
	feedDir := filepath.Join(dir, "feed")
	buildFeed(t, feedDir, "bad.test")
	reg := prometheus.NewRegistry()
	n, err := New(Config{RPZ: []rpz.ZoneConfig{{Name: "a", File: zoneA, PollInterval: 100 * time.Millisecond}}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	zones := func() []string {
		var out []string
		for _, s := range n.Status().RPZ {
			out = append(out, s.Name)
		}
		return out
	}
	gen := n.Generation()

	if _, err := n.PrepareRPZ([]rpz.ZoneConfig{{Name: "A", File: zoneA}}); err == nil {
		t.Fatal("an invalid zone name was accepted")
	}
	commit, err := n.PrepareRPZ([]rpz.ZoneConfig{{Name: "b", File: zoneB, PollInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if got := zones(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("zones before commit: %v", got)
	}
	commit()
	if got := zones(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("zones after commit: %v", got)
	}
	if n.Generation() == gen {
		t.Fatal("Generation did not move with the zones")
	}
	if c := testutil.CollectAndCount(reg, "svcpf_rpz_serial"); c != 1 {
		t.Fatalf("%d svcpf_rpz_serial series after swapping a for b, want 1", c)
	}
	// The new set is the one polled: a new serial of b loads.
	writeZone(t, zoneB, 2, "b2.test")
	waitFor(t, "zone b's serial 2", func() bool { return n.Status().RPZ[0].Serial == 2 })

	// Feeds: the same two steps.
	if _, err := n.PrepareFeeds([]feeds.FeedConfig{{Name: "f"}}); err == nil {
		t.Fatal("a feed without a URL was accepted")
	}
	fcommit, err := n.PrepareFeeds([]feeds.FeedConfig{{Name: "f", URL: feedDir, PollInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Status().Feeds) != 0 {
		t.Fatal("feeds changed before commit")
	}
	fcommit()
	// The first load may already have finished by now (it starts at
	// commit), so the check is the invariant: ready implies loaded.
	if n.Ready() == nil && len(n.View().Categories.Lookup("bad.test", "", nil)) != 1 {
		t.Fatal("ready before the new feed loaded")
	}
	waitFor(t, "the added feed's categories", func() bool { return len(n.View().Categories.Lookup("bad.test", "", nil)) == 1 })
	waitFor(t, "ready with the added feed", func() bool { return n.Ready() == nil })
}
