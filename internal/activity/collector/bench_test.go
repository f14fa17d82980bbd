package collector_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/collector"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// BenchmarkCollector is the collector end to end: SVCPF_ACTIVITY_BENCH_EVENTS
// events (default 200 000) are published to the ACTIVITY stream of an
// embedded NATS server as batches of 1000 (1000 subscribers, 50 000
// names with a Zipf skew, 15 % sampled allows), then one collector is
// started and timed until it has stored them all, into day files and into
// PostgreSQL. It reports events/s stored.
func BenchmarkCollector(b *testing.B) {
	n := 200_000
	if v := os.Getenv("SVCPF_ACTIVITY_BENCH_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	for _, kind := range []string{"dir", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			var rate float64
			for b.Loop() {
				rate = collectOnce(b, kind, n)
			}
			b.ReportMetric(rate, "stored-events/s")
		})
	}
}

func collectOnce(b *testing.B, kind string, n int) float64 {
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	url := "dir:" + filepath.Join(b.TempDir(), "activity")
	if kind == "postgres" {
		url = storetest.URL(b, storetest.Postgres)
	}
	s, err := store.Open(ctx, store.Config{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bus := natstest.Start(b)
	if _, err := activity.EnsureStream(ctx, bus.JS, activity.DefaultConfig().Stream); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(r, 1.1, 1, 49_999)
	day := time.Now().UTC().Truncate(24 * time.Hour)
	step := int64(24*time.Hour) / int64(n)
	var buf []byte
	for i, seq := 0, uint64(1); i < n; seq++ {
		bt := &activity.Batch{Node: "n1", Boot: 3, Seq: seq}
		for j := 0; j < 1000 && i < n; j, i = j+1, i+1 {
			u := r.IntN(1000)
			v, sampled := "block", r.IntN(20) < 3
			if sampled {
				v = "allow"
			}
			bt.Events = append(bt.Events, activity.Event{Time: day.Add(time.Duration(int64(i) * step)), Node: "n1", Org: "acme",
				SessionID: "s" + strconv.Itoa(u), Username: "user" + strconv.Itoa(u), Client: fmt.Sprintf("10.0.%d.%d", u/256, u%256),
				QName: "name" + strconv.FormatUint(zipf.Uint64(), 10) + ".example.", QType: 1, Transport: "udp", Verdict: v,
				Action: "nxdomain", Reason: "category", Categories: []uint16{uint16(1 + r.IntN(8))}, LatencyUS: uint32(r.IntN(5000)),
				Sampled: sampled})
		}
		msg := nats.NewMsg(activity.Subject)
		buf = activity.AppendBatch(buf[:0], bt)
		msg.Data = append([]byte(nil), buf...)
		msg.Header.Set(nats.MsgIdHdr, bt.ID())
		if _, err := bus.JS.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
		if seq%500 == 0 || i == n {
			select {
			case <-bus.JS.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publishing did not complete")
			}
		}
	}
	reg := prometheus.NewRegistry()
	c, err := collector.New(collector.Config{JS: bus.JS, Activity: activity.DefaultConfig(), Store: s, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	stop := natstest.Background(b, c.Run)
	for testutil.ToFloat64(findCounter(b, reg, "svcpf_activity_stored_events_total")) < float64(n) {
		if time.Since(start) > 10*time.Minute {
			b.Fatal("not all stored in 10 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	_ = stop()
	return float64(n) / elapsed.Seconds()
}
