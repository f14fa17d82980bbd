package store_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
)

// Pages of an organisation's events (many subscribers: read in time
// order by windows, then merged per subscriber past an hour of scanning)
// against the events written: every event once, newest first, whatever
// the page size and filters, with another organisation's events in
// between and gaps of hours.
func TestPostgresAndDirPagesOfManySubscribers(t *testing.T) {
	kinds(t, func(t *testing.T, open func(now time.Time) *store.Store) {
		ctx := context.Background()
		s := open(day0.Add(50 * time.Hour))
		r := rand.New(rand.NewPCG(5, 6))
		var bs []*activity.Batch
		used := map[int64]bool{}
		for seq := uint64(1); seq <= 4; seq++ {
			b := &activity.Batch{Node: "pg", Boot: 1, Seq: seq}
			for range 400 {
				ms := r.Int64N(48 * 3600 * 1000)
				if r.IntN(2) == 0 {
					ms = 20*3600*1000 + r.Int64N(120_000) // a dense two minutes
				}
				if used[ms] {
					continue
				}
				used[ms] = true
				u := r.IntN(30)
				org := "acme"
				if r.IntN(3) == 0 {
					org = "other"
				}
				b.Events = append(b.Events, activity.Event{Time: day0.Add(time.Duration(ms) * time.Millisecond), Node: "pg", Org: org,
					SessionID: "s" + strconv.Itoa(u), Username: "u" + strconv.Itoa(u), QName: "q" + strconv.FormatInt(ms, 10) + ".",
					Transport: "udp", Verdict: []string{"block", "allow"}[r.IntN(2)], Reason: "category"})
			}
			bs = append(bs, b)
		}
		if _, err := s.WriteBatches(ctx, bs); err != nil {
			t.Fatal(err)
		}
		for _, verdict := range []string{"", "block"} {
			var want []string
			for _, b := range bs {
				for _, e := range b.Events {
					if e.Org == "acme" && (verdict == "" || e.Verdict == verdict) {
						want = append(want, e.QName)
					}
				}
			}
			slices.SortFunc(want, func(a, b string) int {
				x, _ := strconv.ParseInt(a[1:len(a)-1], 10, 64)
				y, _ := strconv.ParseInt(b[1:len(b)-1], 10, 64)
				return int(y - x)
			})
			for _, limit := range []int{1, 7, 100, 1000} {
				q := activity.EventQuery{Org: "acme", From: day0, To: day0.Add(48 * time.Hour), Verdict: verdict, Limit: limit}
				var got []string
				for pages := 0; ; pages++ {
					if pages > len(want)+1 {
						t.Fatal("pages do not end")
					}
					p, err := s.Events(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range p.Events {
						got = append(got, e.QName)
					}
					if p.Next == nil {
						break
					}
					q.After = p.Next
				}
				if !slices.Equal(got, want) {
					t.Fatalf("verdict %q limit %d: %d events read, want %d (first difference at %d)", verdict, limit, len(got), len(want),
						firstDiff(got, want))
				}
			}
		}
	})
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
