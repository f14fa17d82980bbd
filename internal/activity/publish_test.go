package activity_test

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// streamBatches reads every message of the ACTIVITY stream as a batch,
// with its Nats-Msg-Id.
func streamBatches(t *testing.T, js jetstream.JetStream) ([]activity.Batch, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, activity.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil // not declared yet
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []activity.Batch
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := activity.ParseBatch(m.Data)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		out = append(out, b)
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	return out, ids
}

// TestPublisherToStream: against an embedded NATS server, the publisher
// declares ACTIVITY, publishes the recorder's events and counts as
// batches (node, boot, seq from 1, Nats-Msg-Id the batch's ID), and a
// batch published again under its ID is stored once.
func TestPublisherToStream(t *testing.T) {
	bus := natstest.Start(t)
	cfg := activity.DefaultConfig()
	cfg.CountInterval = time.Second
	cfg.SampleAllowed = 0
	rec, err := activity.NewRecorder(activity.RecorderConfig{Config: cfg, Node: "node-a", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := activity.NewPublisher(activity.PublisherConfig{Recorder: rec, JetStream: bus.JS, Logger: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stop := natstest.Background(t, pub.Run)
	client := netip.MustParseAddrPort("192.0.2.7:5000")
	sub := resolver.Subscriber{Org: "acme", SessionID: "s1", Username: "alice"}
	const blocks, allows = 25, 40
	for range blocks {
		rec.Answered(&resolver.Answered{Name: "bad.test.", Type: 1, Subscriber: sub, Client: client, Transport: policy.TransportUDP,
			Decision: resolver.Summary{Verdict: policy.VerdictBlock, Action: policy.ActionNXDomain, Reason: policy.ReasonBlocklist,
				Rule: "blocklist:bad.test"}, Rcode: 3})
	}
	for range allows {
		rec.Answered(&resolver.Answered{Name: "ok.test.", Type: 1, Subscriber: sub, Client: client, Transport: policy.TransportUDP,
			Decision: resolver.Summary{Verdict: policy.VerdictAllow, Action: policy.ActionAllow, Reason: policy.ReasonDefault}})
	}
	var got []activity.Batch
	var ids []string
	natstest.Eventually(t, "events and counts on the stream", func() (bool, string) {
		got, ids = streamBatches(t, bus.JS)
		var ev int
		var n uint64
		for _, b := range got {
			ev += len(b.Events)
			for _, c := range b.Counts {
				n += c.N
			}
		}
		return ev == blocks && n == allows, "events and plain allows so far: " + strconv.Itoa(ev) + ", " + strconv.Itoa(int(n))
	})
	for i, b := range got {
		if b.Node != "node-a" || b.Boot == 0 || b.Seq != uint64(i+1) || ids[i] != b.ID() {
			t.Errorf("batch %d: node %q boot %x seq %d, Nats-Msg-Id %q; want node-a, a boot, seq %d, its ID", i, b.Node, b.Boot, b.Seq, ids[i], i+1)
		}
		for _, e := range b.Events {
			if e.QName != "bad.test." || e.Username != "alice" || e.Rule != "blocklist:bad.test" || e.Client != "192.0.2.7" {
				t.Errorf("event %+v", e)
			}
		}
		for _, c := range b.Counts {
			if c.Username != "alice" || c.Reason != "default" || c.Seconds != 1 {
				t.Errorf("count %+v", c)
			}
		}
	}
	_ = stop()

	// A batch retried after a lost acknowledgement: stored once.
	b0 := got[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := bus.JS.Publish(ctx, activity.Subject, activity.AppendBatch(nil, &b0), jetstream.WithMsgID(b0.ID()))
	if err != nil || !ack.Duplicate {
		t.Fatalf("republished batch %s: ack %+v, %v; want a duplicate", b0.ID(), ack, err)
	}
	if again, _ := streamBatches(t, bus.JS); len(again) != len(got) {
		t.Errorf("%d messages after the republish, want %d", len(again), len(got))
	}
}
