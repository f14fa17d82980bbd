package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
)

// Summaries against counts worked out here from the batches written, for
// every dimension, over one whole day, some hours of it and two days, with
// many ties (the top is cut among keys of equal count by their text).
func TestPostgresAndDirSummaryMatchesTheEvents(t *testing.T) {
	kinds(t, func(t *testing.T, open func(now time.Time) *store.Store) {
		ctx := context.Background()
		s := open(day0.Add(50 * time.Hour))
		r := rand.New(rand.NewPCG(3, 4))
		var batches []*activity.Batch
		for seq := uint64(1); seq <= 6; seq++ {
			b := &activity.Batch{Node: "sum", Boot: 1, Seq: seq}
			for range 500 {
				u := r.IntN(12)
				v := []string{"block", "allow", "redirect"}[r.IntN(3)]
				var cats []uint16
				if r.IntN(5) > 0 {
					cats = []uint16{uint16(1 + r.IntN(4)), 9}
				}
				b.Events = append(b.Events, activity.Event{Time: day0.Add(time.Duration(r.Int64N(int64(48 * time.Hour)))),
					Node: "sum", Org: []string{"acme", "acme", "other"}[r.IntN(3)], SessionID: "s" + strconv.Itoa(u), Username: "u" + strconv.Itoa(u),
					DeviceID: "d" + strconv.Itoa(u%3), Location: "l", QName: "n" + strconv.Itoa(r.IntN(40)) + ".example.", QType: 1,
					Transport: "udp", Verdict: v, Action: "a", Reason: []string{"category", "blocklist", "default"}[r.IntN(3)],
					Categories: cats, Sampled: r.IntN(6) == 0})
			}
			for range 20 {
				u := r.IntN(12)
				b.Counts = append(b.Counts, activity.Count{Start: day0.Add(time.Duration(r.IntN(48*60)) * time.Minute), Seconds: 60,
					Org: "acme", SessionID: "s" + strconv.Itoa(u), Username: "u" + strconv.Itoa(u), DeviceID: "d" + strconv.Itoa(u%3),
					Location: "l", Reason: "default", Category: uint16(r.IntN(3)), N: uint64(1 + r.IntN(50))})
			}
			batches = append(batches, b)
		}
		if _, err := s.WriteBatches(ctx, batches); err != nil {
			t.Fatal(err)
		}
		ranges := [][2]time.Time{
			{day0, day0.Add(24 * time.Hour)},
			{day0.Add(3 * time.Hour), day0.Add(7 * time.Hour)},
			{day0.Add(20 * time.Hour), day0.Add(48 * time.Hour)},
			{day0, day0.Add(48 * time.Hour)},
		}
		for _, rg := range ranges {
			for _, by := range []activity.Dimension{activity.ByCategory, activity.ByDomain, activity.BySubscriber, activity.ByReason} {
				for _, top := range []int{1, 3, 100} {
					got, err := s.Summary(ctx, activity.SummaryQuery{Org: "acme", From: rg[0], To: rg[1], By: by, Top: top})
					if err != nil {
						t.Fatal(err)
					}
					want := expectSummary(batches, rg[0], rg[1], by, top)
					if g, w := fmtSummary(got), fmtSummary(want); g != w {
						t.Fatalf("%v–%v by %s top %d:\n got %s\nwant %s", rg[0], rg[1], by, top, g, w)
					}
				}
			}
		}
	})
}

func fmtSummary(s activity.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "total %d blocked %d other %d:", s.Total, s.Blocked, s.Other)
	for _, r := range s.Rows {
		fmt.Fprintf(&b, " [%q %q %q %q %d %d]", r.Key, r.Username, r.DeviceID, r.Location, r.Count, r.Blocked)
	}
	return b.String()
}

// expectSummary is the summary as docs/activity.md defines it, counted
// from the batches.
func expectSummary(bs []*activity.Batch, from, to time.Time, by activity.Dimension, top int) activity.Summary {
	rows := map[[4]string]*activity.SummaryRow{}
	var sum activity.Summary
	add := func(k [4]string, n int64, blocked bool) {
		r := rows[k]
		if r == nil {
			r = &activity.SummaryRow{Key: k[0], Username: k[1], DeviceID: k[2], Location: k[3]}
			rows[k] = r
		}
		r.Count += n
		sum.Total += n
		if blocked {
			r.Blocked += n
			sum.Blocked += n
		}
	}
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	for _, b := range bs {
		for _, e := range b.Events {
			if e.Org != "acme" || !in(e.Time) || (e.Sampled && by != activity.ByDomain) {
				continue
			}
			bl := e.Verdict == "block" || e.Verdict == "redirect"
			switch by {
			case activity.ByDomain:
				add([4]string{e.QName}, 1, bl)
			case activity.ByCategory:
				c := 0
				if len(e.Categories) > 0 {
					c = int(e.Categories[0])
				}
				add([4]string{strconv.Itoa(c)}, 1, bl)
			case activity.BySubscriber:
				add([4]string{e.SessionID, e.Username, e.DeviceID, e.Location}, 1, bl)
			case activity.ByReason:
				add([4]string{e.Reason}, 1, bl)
			}
		}
		for _, c := range b.Counts {
			if c.Org != "acme" || !in(c.Start) {
				continue
			}
			switch by {
			case activity.ByCategory:
				add([4]string{strconv.Itoa(int(c.Category))}, int64(c.N), false)
			case activity.BySubscriber:
				add([4]string{c.SessionID, c.Username, c.DeviceID, c.Location}, int64(c.N), false)
			case activity.ByReason:
				add([4]string{c.Reason}, int64(c.N), false)
			}
		}
	}
	keys := make([][4]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [4]string) int {
		if ra, rb := rows[a].Count, rows[b].Count; ra != rb {
			if ra > rb {
				return -1
			}
			return 1
		}
		return strings.Compare(strings.Join(a[:], "\x00"), strings.Join(b[:], "\x00"))
	})
	sum.Other = sum.Total
	for _, k := range keys[:min(top, len(keys))] {
		sum.Rows = append(sum.Rows, *rows[k])
		sum.Other -= rows[k].Count
	}
	return sum
}
