package feeds

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestReconfigureWhileRunning: a running client given a new list keeps
// the unchanged feed's loaded version without refetching it, loads the
// added one, drops the removed one (its lookups and series), and refuses
// an invalid list without changing anything.
func TestReconfigureWhileRunning(t *testing.T) {
	a, b := newFeedDir(t, "a"), newFeedDir(t, "b")
	a.snapshot(putLine("a.test", 1))
	b.snapshot(putLine("b.test", 3))
	fa := FeedConfig{Name: "a", URL: a.dir, PollInterval: 20 * time.Millisecond}
	fb := FeedConfig{Name: "b", URL: b.dir, PollInterval: 20 * time.Millisecond}
	c := newTestClient(t, []FeedConfig{fa}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "feed a loaded", func() bool { return slices.Equal(c.codes("a.test"), []string{"a:1"}) })
	heldA := c.Set().feeds[0]

	commit, err := c.Reconfigure([]FeedConfig{fa, fb})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.codes("b.test"), nil) || len(c.Status()) != 1 {
		t.Fatal("Reconfigure applied before commit")
	}
	commit()
	if got := c.Set().feeds[0]; got != heldA {
		t.Fatal("the unchanged feed a was not kept across the reconfiguration")
	}
	expectCodes(t, c, "a.test", "a:1")
	waitFor(t, "feed b loaded", func() bool { return slices.Equal(c.codes("b.test"), []string{"b:3"}) })
	if st := c.Status(); len(st) != 2 || st[0].Name != "a" || st[1].Name != "b" || st[1].Version != 1 {
		t.Fatalf("status after adding b: %+v", st)
	}
	// Both pollers run: a new version of a arrives.
	a.snapshot(putLine("a.test", 2))
	waitFor(t, "feed a's next version", func() bool { return slices.Equal(c.codes("a.test"), []string{"a:2"}) })

	for _, bad := range [][]FeedConfig{{fa, fa}, {{Name: "", URL: a.dir}}, {{Name: "x", URL: "ftp://x/"}}} {
		if _, err := c.Reconfigure(bad); err == nil {
			t.Fatalf("Reconfigure(%+v) accepted", bad)
		}
	}
	if st := c.Status(); len(st) != 2 {
		t.Fatalf("a refused list changed the feeds: %+v", st)
	}

	commit, err = c.Reconfigure([]FeedConfig{fb})
	if err != nil {
		t.Fatal(err)
	}
	commit()
	expectCodes(t, c, "a.test")
	expectCodes(t, c, "b.test", "b:3")
	if st := c.Status(); len(st) != 1 || st[0].Name != "b" {
		t.Fatalf("status after removing a: %+v", st)
	}
	mfs, err := c.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "feed" && l.GetValue() == "a" {
					t.Errorf("%s still has a series for the removed feed a", mf.GetName())
				}
			}
		}
	}
	if !c.Ready() {
		t.Error("not ready with every configured feed loaded")
	}
}

// TestReconfigureBeforeRun: a list changed before Run starts is the one
// Run follows.
func TestReconfigureBeforeRun(t *testing.T) {
	a := newFeedDir(t, "a")
	a.snapshot(putLine("a.test", 1))
	c := newTestClient(t, nil, nil)
	commit, err := c.Reconfigure([]FeedConfig{{Name: "a", URL: a.dir, PollInterval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	commit()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor(t, "feed a loaded", func() bool { return slices.Equal(c.codes("a.test"), []string{"a:1"}) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := c.logs.count("level=ERROR"); n != 0 {
		t.Errorf("%d errors logged", n)
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
