package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/collector"
	"github.com/svc-pf/svc-pf/internal/activity/store"
)

// TestPostgresAndDirRetention: with the clock moved forward, no event older
// than retention + 1h can be read, through Events or Summary, before and
// after the collector's drop.
func TestPostgresAndDirRetention(t *testing.T) {
	kinds(t, func(t *testing.T, open func(now time.Time) *store.Store) {
		ctx := context.Background()
		w := open(day0)
		for i := range 72 {
			if err := w.Write(ctx, testBatch("n1", uint64(i+1), day0.Add(time.Duration(i)*time.Hour), time.Second, 10, 2)); err != nil {
				t.Fatal(err)
			}
		}
		retention := 24 * time.Hour
		now := day0.Add(73*time.Hour + 30*time.Minute)
		check := func(s *store.Store) {
			oldest := now.Add(-retention - time.Hour)
			q := activity.EventQuery{Org: "acme", From: day0.Add(-time.Hour), To: now, Limit: 1000}
			for {
				p, err := s.Events(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range p.Events {
					if e.Time.Before(oldest) {
						t.Fatalf("event of %v read at %v with retention %v", e.Time, now, retention)
					}
				}
				if p.Next == nil {
					break
				}
				q.After = p.Next
			}
			sum, err := s.Summary(ctx, activity.SummaryQuery{Org: "acme", From: day0.Add(-time.Hour), To: now, By: activity.ByDomain,
				Top: 10, Interval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if sum.From.Before(oldest) {
				t.Fatalf("summary from %v, before %v", sum.From, oldest)
			}
			// Exactly the hours written from the floor's hour on: 10 events
			// in each of hours 0…71.
			if want := int64(10 * (72 - int(sum.From.Sub(day0).Hours()))); sum.Total != want {
				t.Fatalf("summary total %d from %v, want %d", sum.Total, sum.From, want)
			}
		}
		s, err := store.Open(ctx, storeConfigOf(t, w, now, retention))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(s)
		if _, err := s.DropBefore(ctx, collector.RetentionCutoff(now, retention)); err != nil {
			t.Fatal(err)
		}
		check(s)
	})
}
