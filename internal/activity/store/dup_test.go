package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
)

// Two batches with one ID in one call (a republished batch grouped with
// its first copy): the first is stored, the second skipped, and a later
// call with the ID again stores nothing.
func TestPostgresAndDirDuplicateInOneCall(t *testing.T) {
	kinds(t, func(t *testing.T, open func(now time.Time) *store.Store) {
		ctx := context.Background()
		s := open(day0.Add(time.Hour))
		a := testBatch("dup1", 5, day0.Add(time.Minute), time.Millisecond, 10, 2)
		b := testBatch("dup1", 5, day0.Add(time.Minute), time.Millisecond, 1, 2)
		c := testBatch("dup1", 6, day0.Add(2*time.Minute), time.Millisecond, 3, 2)
		n, err := s.WriteBatches(ctx, []*activity.Batch{a, b, c})
		if err != nil || n != 13 {
			t.Fatalf("stored %d, %v; want 13", n, err)
		}
		if n, err := s.WriteBatches(ctx, []*activity.Batch{c, a}); err != nil || n != 0 {
			t.Fatalf("stored %d again, %v; want 0", n, err)
		}
		p, err := s.Events(ctx, activity.EventQuery{Org: "acme", From: day0, To: day0.Add(time.Hour), Limit: 100})
		if err != nil || len(p.Events) != 13 {
			t.Fatalf("%d events, %v; want 13", len(p.Events), err)
		}
	})
}
