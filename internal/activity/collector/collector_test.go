package collector_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/collector"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// publish sends batch seq of node with n events, at t, as a node does
// (its ID as Nats-Msg-Id).
func publish(t testing.TB, js jetstream.JetStream, node string, seq uint64, at time.Time, n int) {
	t.Helper()
	b := &activity.Batch{Node: node, Boot: 1, Seq: seq}
	for i := range n {
		b.Events = append(b.Events, activity.Event{Time: at.Add(time.Duration(i) * time.Microsecond), Node: node, Org: "acme",
			SessionID: "s1", Username: fmt.Sprintf("u%d", i%10), QName: fmt.Sprintf("n%d.example.", i%100), QType: 1,
			Transport: "udp", Verdict: "block", Action: "nxdomain", Reason: "category", Categories: []uint16{3}})
	}
	msg := nats.NewMsg(activity.Subject)
	msg.Data = activity.AppendBatch(nil, b)
	msg.Header.Set(nats.MsgIdHdr, b.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

func countEvents(t testing.TB, s *store.Store, org string, from, to time.Time) int64 {
	t.Helper()
	sum, err := s.Summary(context.Background(), activity.SummaryQuery{Org: org, From: from, To: to, By: activity.ByDomain, Top: 1})
	if err != nil {
		t.Fatal(err)
	}
	return sum.Total
}

func TestCollectorStoresOnceAndTerminatesBadMessages(t *testing.T) {
	bus := natstest.Start(t)
	now := time.Now().UTC()
	s, err := store.Open(context.Background(), store.Config{URL: "dir:" + filepath.Join(t.TempDir(), "a")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg := prometheus.NewRegistry()
	c, err := collector.New(collector.Config{JS: bus.JS, Activity: activity.DefaultConfig(), Store: s, Registerer: reg, Logger: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stop := natstest.Background(t, c.Run)
	natstest.Eventually(t, "collector healthy", func() (bool, string) { err := c.Health(); return err == nil, fmt.Sprint(err) })
	for seq := uint64(1); seq <= 20; seq++ {
		publish(t, bus.JS, "n1", seq, now, 50)
	}
	// A message that is not a batch, and a batch published twice under
	// another message id (a node republishing after a lost ack beyond the
	// duplicate window).
	if _, err := bus.JS.Publish(context.Background(), activity.Subject, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	b := &activity.Batch{Node: "n1", Boot: 1, Seq: 5, Events: []activity.Event{{Time: now, Org: "acme", QName: "x."}}}
	if _, err := bus.JS.Publish(context.Background(), activity.Subject, activity.AppendBatch(nil, b)); err != nil {
		t.Fatal(err)
	}
	publish(t, bus.JS, "n1", 21, now, 50)
	natstest.Eventually(t, "all stored", func() (bool, string) {
		n := countEvents(t, s, "acme", now.Add(-time.Hour), now.Add(time.Hour))
		return n == 21*50, fmt.Sprint(n)
	})
	natstest.Eventually(t, "bad message counted", func() (bool, string) {
		n := testutil.ToFloat64(findCounter(t, reg, "svcpf_activity_bad_messages_total"))
		return n == 1, fmt.Sprint(n)
	})
	_ = stop()
	if n := countEvents(t, s, "acme", now.Add(-time.Hour), now.Add(time.Hour)); n != 21*50 {
		t.Fatalf("stored %d events, want %d", n, 21*50)
	}
}

func findCounter(t testing.TB, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			v := mf.GetMetric()[0].GetCounter().GetValue()
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			g.Set(v)
			return g
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}
