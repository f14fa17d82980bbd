package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/promtest"
)

// activityOutage is how long TestActivityNATSKilledWhileAnswering keeps
// NATS away: a minute, far longer than the buffer lasts.
// SVCPF_TEST_ACTIVITY_OUTAGE (a Go duration) shortens it for a quick run
// by hand; CI runs the minute.
func activityOutage(t *testing.T) time.Duration {
	if s := os.Getenv("SVCPF_TEST_ACTIVITY_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SVCPF_TEST_ACTIVITY_OUTAGE %q: %v", s, err)
		}
		return d
	}
	return time.Minute
}

// TestActivityNATSKilledWhileAnswering is the node side's fault test: a
// resolver (real UDP on loopback) answers a steady stream of queries while
// its NATS server (a real nats-server process) is killed with SIGKILL for
// a minute and started again. Every query is answered (none waits on
// NATS); the buffer, kept small, holds the last batches of the outage and
// drops the older ones, counted in svcpf_activity_dropped_total; once NATS
// is back the rest arrives on the stream, so that events arrived + events
// dropped = events recorded, and likewise the plain allows counted.
func TestActivityNATSKilledWhileAnswering(t *testing.T) {
	outage := activityOutage(t)
	proc := natstest.StartProcess(t)
	log := natstest.Logger(t)
	nc, err := natsbus.Connect(proc.URL(), "activity fault test", log, false)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reg := prometheus.NewRegistry()
	n, err := node.New(node.Config{Registerer: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	natstest.Background(t, n.Run)

	cfg := DefaultResolverConfig()
	cfg.DNS.Listen = []string{"127.0.0.1:0"}
	cfg.Forwarders = []string{startUpstream(t)}
	cfg.Activity.SampleAllowed = 1           // every answer an event: the arithmetic is exact
	cfg.Activity.CountInterval = time.Second // counts published every second
	cfg.Activity.BufferBytes = 16 << 10      // about four seconds of this test's events
	act, err := startNodeActivity(cfg.Activity, "fault-node", "test", nc, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	res, err := StartResolver(cfg, n, "test", reg, log, act.Observer)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Background(t, res.DNS.Run)
	stopAct := natstest.Background(t, act.Run)
	server := res.DNS.UDPAddrs()[0].String()

	// The client: one query every 20 ms, 50 names (misses, then
	// packet-cache hits), each with a stub's usual timeout.
	var asked, answered atomic.Int64
	var lost atomic.Int64
	ctx, stopClient := context.WithCancel(context.Background())
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		c := &dns.Client{Net: "udp", Timeout: 5 * time.Second} // dig's
		for i := 0; ctx.Err() == nil; i++ {
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("n%d.fault.test.", i%50), dns.TypeA)
			asked.Add(1)
			// Any reply is an answer (a miss may get SERVFAIL from the
			// forwarder on a loaded machine: not this test's matter).
			if _, _, err := c.Exchange(m, server); err != nil {
				lost.Add(1)
			} else {
				answered.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	time.Sleep(2 * time.Second)
	proc.Kill()
	killedAt := time.Now()
	t.Logf("nats-server killed; away for %v", outage)
	time.Sleep(outage)
	backAt := time.Now()
	droppedDuring := promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "buffer")
	proc.Start()
	time.Sleep(2 * time.Second)
	stopClient()
	<-clientDone

	if l := lost.Load(); l != 0 || answered.Load() != asked.Load() {
		t.Fatalf("%d of %d queries not answered while NATS was away", l, asked.Load())
	}
	if droppedDuring == 0 {
		t.Errorf("no event dropped from a %d-byte buffer during a %v outage: the test did not fill it", cfg.Activity.BufferBytes, outage)
	}

	// Everything recorded is published or counted dropped, nothing waits.
	natstest.Eventually(t, "activity published or counted dropped", func() (bool, string) {
		rec := promtest.Value(t, reg, "svcpf_activity_events_total")
		pub := promtest.Value(t, reg, "svcpf_activity_events_published_total")
		dq := promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "queue")
		db := promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "buffer")
		left := promtest.Value(t, reg, "svcpf_activity_queue_events") + promtest.Value(t, reg, "svcpf_activity_buffer_batches")
		return rec > 0 && rec == pub+dq+db && left == 0,
			fmt.Sprintf("recorded %v, published %v, dropped %v+%v, waiting %v", rec, pub, dq, db, left)
	})
	_ = stopAct()

	// The stream holds what was published, each batch once.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(sctx, activity.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(sctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var arrived int
	var allows uint64
	var duringOutage int
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(sctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := activity.ParseBatch(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if seen[b.ID()] {
			continue
		}
		seen[b.ID()] = true
		arrived += len(b.Events)
		for _, e := range b.Events {
			if e.Time.After(killedAt) && e.Time.Before(backAt) {
				duringOutage++
			}
			if e.Node != "fault-node" || !strings.HasSuffix(e.QName, ".fault.test.") || !e.Sampled {
				t.Fatalf("event %+v", e)
			}
		}
		for _, c := range b.Counts {
			allows += c.N
		}
	}
	recorded := promtest.Value(t, reg, "svcpf_activity_events_total")
	dropped := promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "queue") +
		promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "buffer")
	t.Logf("queries %d; events recorded %v, arrived %d (%d from the outage, held in the buffer), dropped %v", asked.Load(), recorded, arrived,
		duringOutage, dropped)
	if float64(arrived)+dropped != recorded {
		t.Errorf("events: %d arrived + %v dropped != %v recorded", arrived, dropped, recorded)
	}
	if recorded != float64(asked.Load()) {
		t.Errorf("%v events recorded for %d answered queries (sample_allowed 1)", recorded, asked.Load())
	}
	if duringOutage == 0 {
		t.Error("no event of the outage arrived: the buffer held nothing over it")
	}
	counted := promtest.Value(t, reg, "svcpf_activity_allows_counted_total")
	uncounted := promtest.Value(t, reg, "svcpf_activity_uncounted_total", "stage", "buffer")
	if float64(allows)+uncounted != counted || counted != float64(asked.Load()) {
		t.Errorf("plain allows: %d arrived in counts + %v dropped != %v counted (of %d queries)", allows, uncounted, counted, asked.Load())
	}
}
