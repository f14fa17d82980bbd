package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

var day0 = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)

// testBatch is a batch of n events of org acme over subs subscribers,
// one every step from start, half of them blocks, with a plain-allow count.
func testBatch(node string, seq uint64, start time.Time, step time.Duration, n, subs int) *activity.Batch {
	b := &activity.Batch{Node: node, Boot: 7, Seq: seq}
	for i := range n {
		v, r := "allow", "allowlist"
		if i%2 == 0 {
			v, r = "block", "category"
		}
		u := fmt.Sprintf("u%d", i%subs)
		b.Events = append(b.Events, activity.Event{Time: start.Add(time.Duration(i) * step), Node: node, Org: "acme",
			SessionID: "s-" + u, Username: u, DeviceID: "d-" + u, Client: fmt.Sprintf("192.0.2.%d", i%subs),
			QName: fmt.Sprintf("n%d.example.com.", i%7), QType: 1, Transport: "udp", Verdict: v, Action: "nxdomain",
			Reason: r, Rule: "r", Categories: []uint16{uint16(1 + i%3)}, LatencyUS: 120, Policy: "p1"})
	}
	b.Counts = append(b.Counts, activity.Count{Start: start.Truncate(time.Minute), Seconds: 60, Org: "acme",
		SessionID: "s-u0", Username: "u0", DeviceID: "d-u0", Reason: "default", Category: 0, N: 1000})
	return b
}

func openDir(t *testing.T, dir string, now time.Time) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), store.Config{URL: "dir:" + dir, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	urls[s] = "dir:" + dir
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// kinds runs fn on a day-file store and on a PostgreSQL one (skipped
// without SVCPF_TEST_POSTGRES_URL).
func kinds(t *testing.T, fn func(t *testing.T, open func(now time.Time) *store.Store)) {
	t.Run("dir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "activity")
		fn(t, func(now time.Time) *store.Store { return openDir(t, dir, now) })
	})
	t.Run("postgres", func(t *testing.T) {
		url := storetest.URL(t, storetest.Postgres)
		fn(t, func(now time.Time) *store.Store { return openURL(t, url, now) })
	})
}

// urls remembers each test store's URL, to open it again with another
// configuration.
var urls = map[*store.Store]string{}

func storeConfigOf(t *testing.T, s *store.Store, now time.Time, retention time.Duration) store.Config {
	return store.Config{URL: urls[s], Retention: retention, Now: func() time.Time { return now }, ReadOnly: true}
}

func openURL(t *testing.T, url string, now time.Time) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), store.Config{URL: url, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	urls[s] = url
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestPostgresAndDirWriteReadOnce(t *testing.T) {
	kinds(t, testWriteReadOnce)
}

func testWriteReadOnce(t *testing.T, open func(now time.Time) *store.Store) {
	ctx := context.Background()
	s := open(day0.Add(30 * time.Hour))
	b := testBatch("n1", 1, day0.Add(23*time.Hour+59*time.Minute), 100*time.Millisecond, 2000, 10) // spans midnight
	for range 2 {
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var all []activity.StoredEvent
	q := activity.EventQuery{Org: "acme", From: day0, To: day0.Add(48 * time.Hour), Limit: 333}
	for {
		p, err := s.Events(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Events...)
		if p.Next == nil {
			break
		}
		q.After = p.Next
	}
	if len(all) != 2000 {
		t.Fatalf("read %d events, want 2000", len(all))
	}
	for i := 1; i < len(all); i++ {
		if !all[i].Time.Before(all[i-1].Time) {
			t.Fatalf("not newest first at %d: %v then %v", i, all[i-1].Time, all[i].Time)
		}
	}
	if all[0].Time != b.Events[1999].Time.Truncate(time.Millisecond) || all[0].QName != b.Events[1999].QName {
		t.Fatalf("newest %+v, want %+v", all[0], b.Events[1999])
	}
	sum, err := s.Summary(ctx, activity.SummaryQuery{Org: "acme", From: day0, To: day0.Add(48 * time.Hour), By: activity.ByReason, Top: 10})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Total != 3000 || sum.Blocked != 1000 {
		t.Fatalf("summary %+v", sum)
	}
	p, err := s.Events(ctx, activity.EventQuery{Org: "acme", From: day0, To: day0.Add(48 * time.Hour), Limit: 1000, Username: "u3", Verdict: "allow"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 200 {
		t.Fatalf("u3 allows: %d", len(p.Events))
	}
}
