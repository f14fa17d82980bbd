package ipmapper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
)

// TestProbeDetectsSilentQueueMember: a member of the endpoints' queue
// groups that the server delivers to but that never answers — what an
// endpoint left subscribed by a lost drain is — makes the active IP
// Mapper's self-probe fail (ServeError, the counter), and the service
// counts as answering again once it is gone. Probes are not requests: the
// request counters do not move.
func TestProbeDetectsSilentQueueMember(t *testing.T) {
	f := startFixture(t, func(c *Config) { c.ProbeInterval = 50 * time.Millisecond; c.ProbeTimeout = 300 * time.Millisecond })
	eventually(t, "a first round of probes answered", func() bool {
		return metricValue(f.svc.metrics.probeMissed) == 0 && f.svc.ServeError() == nil
	})

	nc, err := natsbus.Connect(f.bus.srv.ClientURL(), "silent", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var silent []*nats.Subscription
	for _, cmd := range wire.Commands() {
		sub, err := nc.QueueSubscribe(wire.Subject(session.Bucket, cmd), micro.DefaultQueueGroup, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the probe to find the silent member", func() bool { return f.svc.ServeError() != nil })
	if err := f.svc.ServeError(); !strings.Contains(err.Error(), "the micro service did not answer") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ServeError = %v", err)
	}
	if metricValue(f.svc.metrics.probeMissed) == 0 {
		t.Fatal("no unanswered probe counted")
	}

	for _, sub := range silent {
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the service to answer every probe again", func() bool { return f.svc.ServeError() == nil })
	for _, cmd := range wire.Commands() {
		for _, result := range []string{resultOK, resultInvalid, resultError} {
			if v := metricValue(f.svc.metrics.requests.WithLabelValues(cmd, result)); v != 0 {
				t.Errorf("probes counted as %s %s requests: %v", cmd, result, v)
			}
		}
	}
}

// TestProbeDetectsStoppedService: an active IP Mapper whose endpoints are
// gone (here unregistered under it) is reported at once, although it still
// holds the lock: nobody answers its clients.
func TestProbeDetectsStoppedService(t *testing.T) {
	f := startFixture(t, func(c *Config) { c.ProbeInterval = 50 * time.Millisecond; c.ProbeTimeout = 300 * time.Millisecond })
	eventually(t, "a first round of probes answered", func() bool { return f.svc.ServeError() == nil })
	if err := f.svc.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the probe to find the service gone", func() bool { return f.svc.ServeError() != nil })
	if err := f.svc.ServeError(); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("ServeError = %v, want no responders", err)
	}
	if f.svc.Role() != RoleActive {
		t.Fatalf("role %s", f.svc.Role())
	}
}

// TestStandbyHasNoServeError: the self-probe is the active instance's; a
// standby serves nothing and reports nothing of the service.
func TestStandbyHasNoServeError(t *testing.T) {
	b := startBus(t)
	a := startHA(t, b, "a", time.Second)
	waitRole(t, a, RoleActive)
	sb := startHA(t, b, "b", time.Second)
	waitRole(t, sb, RoleStandby)
	if err := sb.svc.ServeError(); err != nil {
		t.Fatalf("standby's ServeError = %v", err)
	}
}

// TestTermClosesServiceConnection: the micro service of a term runs on a
// connection of its own that the end of the term closes, so that none of
// its subscriptions can outlive the term on the server (a drain started
// while reconnecting did not unsubscribe them).
func TestTermClosesServiceConnection(t *testing.T) {
	b := startBus(t)
	a := startHA(t, b, "a", 600*time.Millisecond)
	waitRole(t, a, RoleActive)
	conn := a.svc.svcConn
	if conn == nil || conn == a.nc || !conn.IsConnected() {
		t.Fatal("the micro service does not run on a connected connection of its own")
	}
	port := b.srv.Port()
	b.srv.Shutdown()
	waitRole(t, a, RoleStandby)
	if !conn.IsClosed() {
		t.Fatalf("the ended term's service connection is %s, want closed", conn.Status())
	}
	srv, err := natsbusRestart(b.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	waitRole(t, a, RoleActive)
	client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: a.nc, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.GetSessions(ctx, mapperclient.Query{Org: "acme"})
		cancel()
		if err != nil {
			t.Fatalf("request %d after NATS came back: %v", i, err)
		}
	}
}

// TestUnreachableNATSNamed: while NATS is away, a write's error and the
// lock's error name the NATS server and what waits for it, instead of
// nats.go's "outbound buffer limit exceeded" alone (a connection without a
// reconnect buffer fails a publish at once with it).
func TestUnreachableNATSNamed(t *testing.T) {
	b := startBus(t)
	url := b.srv.ClientURL()
	a := startHA(t, b, "a", 6*time.Second)
	waitRole(t, a, RoleActive)
	b.srv.Shutdown()
	eventually(t, "the client to notice", func() bool { return !a.nc.IsConnected() })
	// The lease (5 s of the 6 s TTL after the last refresh, at most 2 s
	// ago) still lets the write through the fence.
	errs := a.svc.store.apply(context.Background(), []write{{ID: "x", Value: []byte(`{}`)}})
	want := "NATS at " + url + " unreachable; waiting to reconnect to publish writes to bucket sessions: nats: outbound buffer limit exceeded"
	if errs[0] == nil || errs[0].Error() != want || !errors.Is(errs[0], nats.ErrReconnectBufExceeded) {
		t.Fatalf("write while NATS is away: %v, want %q", errs[0], want)
	}
	if err := a.svc.WriteError(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("WriteError = %v, want it to say %q", err, want)
	}
	eventually(t, "the lock's error to name NATS", func() bool {
		err := a.svc.LockError()
		return err != nil && strings.Contains(err.Error(), "NATS at "+url+" unreachable; waiting to reconnect to ") &&
			strings.Contains(err.Error(), " the lock of bucket sessions")
	})
}
