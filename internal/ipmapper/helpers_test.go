package ipmapper

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
)

// bus is an embedded NATS server with one client connection.
type bus struct {
	srv *natsbus.Embedded
	nc  *nats.Conn
	dir string
}

func startBus(t testing.TB) *bus {
	t.Helper()
	dir := t.TempDir()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsbus.Connect(srv.ClientURL(), "ipmapper-test", nil, false)
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	b := &bus{srv: srv, nc: nc, dir: dir}
	t.Cleanup(func() {
		b.nc.Close()
		b.srv.Shutdown()
	})
	return b
}

// fakeClock is a settable time source for expiry tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fixture is a started Service with a client and its metrics registry.
type fixture struct {
	bus    *bus
	svc    *Service
	client *mapperclient.Client
	reg    *prometheus.Registry
	clock  *fakeClock
}

func startFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	b := startBus(t)
	return startFixtureOn(t, b, mod)
}

// startSmallValueFixture runs the service on a bucket whose values may not
// exceed 300 bytes, so that the JetStream server itself refuses larger
// writes: a KV write failure without a broken connection.
func startSmallValueFixture(t testing.TB) *fixture {
	t.Helper()
	b := startBus(t)
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: session.Bucket, MaxValueSize: 300}); err != nil {
		t.Fatal(err)
	}
	return startFixtureOn(t, b, nil)
}

func startFixtureOn(t testing.TB, b *bus, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{bus: b, reg: prometheus.NewRegistry(), clock: newFakeClock()}
	cfg := Config{Conn: b.nc, Registerer: f.reg, Clock: f.clock.Now, SweepInterval: time.Hour}
	if mod != nil {
		mod(&cfg)
	}
	f.svc = startService(t, cfg, 30*time.Second)
	var err error
	f.client, err = mapperclient.NewClient(mapperclient.ClientConfig{Conn: b.nc, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func kvOf(t testing.TB, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxT(t), session.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func mkSession(i int, org string) session.Session {
	return session.Session{
		ID:          fmt.Sprintf("s%06d", i),
		Org:         org,
		Revision:    1,
		Allocations: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)},
		Attributes:  identity.Attributes{Username: fmt.Sprintf("user%d", i), DeviceID: fmt.Sprintf("dev%d", i), Location: "hq"},
	}
}

// metricValue reads a counter or gauge.
func metricValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// requestsCounted waits until the requests counter of cmd and result reaches
// want and fails if it goes past it. The handler counts a request just after
// sending its reply, so a client can read the reply first.
func requestsCounted(t testing.TB, s *Service, cmd, result string, want float64) {
	t.Helper()
	c := s.metrics.requests.WithLabelValues(cmd, result)
	eventually(t, fmt.Sprintf("%s %s requests to reach %v (at %v)", cmd, result, want, metricValue(c)), func() bool { return metricValue(c) >= want })
	if v := metricValue(c); v != want {
		t.Fatalf("%s %s requests = %v, want %v", cmd, result, v, want)
	}
}

// requestsAtLeast returns the requests counter of cmd and result once it
// reaches atLeast, or at the deadline: the last reply of a split request can
// reach the client before the handler counts it, and a test that reads the
// counter at once sees one request short.
func requestsAtLeast(s *Service, cmd, result string, atLeast float64) float64 {
	c := s.metrics.requests.WithLabelValues(cmd, result)
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(c) < atLeast && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return metricValue(c)
}

// eventually polls cond until it holds or the deadline passes; it asserts
// an outcome, never a duration.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func natsbusRestart(dir string, port int) (*natsbus.Embedded, error) {
	return natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir, Port: port})
}

// startService starts an IP Mapper of cfg, within timeout, and stops it
// when the test ends.
func startService(t testing.TB, cfg Config, timeout time.Duration) *Service {
	t.Helper()
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return svc
}
