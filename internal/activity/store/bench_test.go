package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// benchEvents is how many events BenchmarkStore writes before it reads:
// SVCPF_ACTIVITY_BENCH_EVENTS (default 1 000 000; the documented figures
// say which).
func benchEvents(b *testing.B) int {
	n := 1_000_000
	if v := os.Getenv("SVCPF_ACTIVITY_BENCH_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// realisticBatches yields batches of 1000 events of one organisation over
// one day: 1000 subscribers, 50 000 names drawn with a Zipf skew, 8
// categories; 80 % blocks, 15 % sampled plain allows, 5 % allowlisted;
// and 20 plain-allow counts per batch; one node.
func realisticBatches(n int, yield func(*activity.Batch) error) error {
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(r, 1.1, 1, 49_999)
	reasons := []string{"category", "blocklist"}
	step := 86_400_000_000_000 / int64(n)
	seq := uint64(0)
	for i := 0; i < n; {
		seq++
		b := &activity.Batch{Node: "n1", Boot: 9, Seq: seq}
		for j := 0; j < 1000 && i < n; j, i = j+1, i+1 {
			u := r.IntN(1000)
			v, sampled, reason := "block", false, reasons[r.IntN(2)]
			switch x := r.IntN(20); {
			case x < 3: // a sampled plain allow
				v, sampled, reason = "allow", true, "default"
			case x < 4:
				v, reason = "allow", "allowlist"
			}
			b.Events = append(b.Events, activity.Event{Time: day0.Add(time.Duration(int64(i) * step)), Node: "n1", Org: "acme",
				SessionID: "s" + strconv.Itoa(u), Username: "user" + strconv.Itoa(u), DeviceID: "dev" + strconv.Itoa(u),
				Client: fmt.Sprintf("10.0.%d.%d", u/256, u%256), QName: "name" + strconv.FormatUint(zipf.Uint64(), 10) + ".example.",
				QType: 1, Transport: "udp", Verdict: v, Action: "nxdomain", Reason: reason, Sampled: sampled,
				Categories: []uint16{uint16(1 + r.IntN(8))}, LatencyUS: uint32(50 + r.IntN(5000)), Policy: "p" + strconv.Itoa(u%5)})
		}
		// The plain allows' counts: one a minute for some subscribers.
		for j := range 20 {
			u := r.IntN(1000)
			b.Counts = append(b.Counts, activity.Count{Start: b.Events[j].Time.Truncate(time.Minute), Seconds: 60, Org: "acme",
				SessionID: "s" + strconv.Itoa(u), Username: "user" + strconv.Itoa(u), DeviceID: "dev" + strconv.Itoa(u),
				Reason: "default", N: uint64(1 + r.IntN(100))})
		}
		if err := yield(b); err != nil {
			return err
		}
	}
	return nil
}

// benchGroup is how many messages one WriteBatches takes: the collector's
// default Fetch.
const benchGroup = 64

// BenchmarkStore writes benchEvents events (one batch of 1000 per message,
// benchGroup messages per transaction, as the collector groups them), then
// times the reports: a summary over the day by each dimension, the first
// page of one subscriber's events and of the organisation's. It reports events/s written and bytes per
// stored event.
func BenchmarkStore(b *testing.B) {
	for _, kind := range []string{"dir", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			var url, dir string
			if kind == "dir" {
				dir = filepath.Join(b.TempDir(), "activity")
				url = "dir:" + dir
			} else {
				url = storetest.URL(b, storetest.Postgres)
			}
			s, err := store.Open(ctx, store.Config{URL: url})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			n := benchEvents(b)
			start := time.Now()
			var group []*activity.Batch
			err = realisticBatches(n, func(bt *activity.Batch) error {
				group = append(group, bt)
				if len(group) == benchGroup {
					_, err := s.WriteBatches(ctx, group)
					group = group[:0]
					return err
				}
				return nil
			})
			if err == nil && len(group) > 0 {
				_, err = s.WriteBatches(ctx, group)
			}
			if err != nil {
				b.Fatal(err)
			}
			rate := float64(n) / time.Since(start).Seconds()
			var perEvent float64
			if kind == "dir" {
				var size int64
				for _, suf := range []string{"", "-wal"} {
					if fi, err := os.Stat(filepath.Join(dir, "2026-11-28.db"+suf)); err == nil {
						size += fi.Size()
						b.Logf("bytes: file%s %d", suf, fi.Size())
					}
				}
				perEvent = float64(size) / float64(n)
			} else {
				perEvent = pgBytes(b, url) / float64(n)
			}
			b.ResetTimer()
			dims := []activity.Dimension{activity.ByCategory, activity.ByDomain, activity.BySubscriber, activity.ByReason}
			sumT := make([]time.Duration, len(dims))
			var pageT, orgT time.Duration
			for b.Loop() {
				for i, by := range dims {
					t0 := time.Now()
					sum, err := s.Summary(ctx, activity.SummaryQuery{Org: "acme", From: day0, To: day0.Add(24 * time.Hour), By: by, Top: 10})
					if err != nil || sum.Total < int64(n)*3/4 || len(sum.Rows) == 0 {
						b.Fatalf("summary by %s: %v, total %d", by, err, sum.Total)
					}
					sumT[i] += time.Since(t0)
				}
				t0 := time.Now()
				p, err := s.Events(ctx, activity.EventQuery{Org: "acme", From: day0, To: day0.Add(24 * time.Hour), Username: "user7", Limit: 100})
				if err != nil || len(p.Events) != 100 {
					b.Fatalf("events: %v, %d", err, len(p.Events))
				}
				t1 := time.Now()
				p, err = s.Events(ctx, activity.EventQuery{Org: "acme", From: day0, To: day0.Add(24 * time.Hour), Limit: 100})
				if err != nil || len(p.Events) != 100 {
					b.Fatalf("events: %v, %d", err, len(p.Events))
				}
				pageT += t1.Sub(t0)
				orgT += time.Since(t1)
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			for i, by := range dims {
				b.ReportMetric(ms(sumT[i]), "summary-"+string(by)+"-ms")
			}
			b.ReportMetric(ms(pageT), "page-subscriber-ms")
			b.ReportMetric(ms(orgT), "page-org-ms")
			b.ReportMetric(rate, "written-events/s")
			b.ReportMetric(perEvent, "bytes/event")
		})
	}
}
