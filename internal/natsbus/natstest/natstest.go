// Package natstest is the test bench of the packages that follow JetStream
// buckets (the read models, the IP Mapper): an embedded NATS server with a
// store that survives a restart on the same port, client connections, and
// bucket helpers that fail the test on error. Test code only.
package natstest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// Wait is how long a helper waits for a convergence. It is generous because a
// resume after a NATS restart involves reconnect back-off.
const Wait = 30 * time.Second

// Logger discards unless SVCPF_TEST_LOG is set, then logs debug to stderr.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("SVCPF_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Bus is an embedded NATS server with JetStream and a client connection
// that reconnects forever (natsbus.Connect), as a node's is.
type Bus struct {
	t   testing.TB
	dir string
	Srv *natsbus.Embedded
	NC  *nats.Conn
	JS  jetstream.JetStream
}

// Start starts a server on a free port and connects to it; both end with
// the test.
func Start(t testing.TB) *Bus {
	t.Helper()
	b := &Bus{t: t, dir: t.TempDir()}
	b.StartServer(0)
	nc, err := natsbus.Connect(b.Srv.ClientURL(), t.Name(), Logger(t), false)
	if err != nil {
		t.Fatal(err)
	}
	b.NC = nc
	if b.JS, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		if b.Srv != nil {
			b.Srv.Shutdown()
		}
	})
	return b
}

// StartServer (re)starts the server on port (0: a free one) over the same
// store.
func (b *Bus) StartServer(port int) {
	b.t.Helper()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: b.dir, Port: port})
	if err != nil {
		b.t.Fatal(err)
	}
	b.Srv = srv
}

// StopServer shuts the server down; the client keeps trying to reconnect.
func (b *Bus) StopServer() {
	b.Srv.Shutdown()
	b.Srv = nil
}

// Writer opens bucket on a separate client, as a producer (the IP Mapper, the
// orgmanager's deploy) would; close it with the returned function.
func (b *Bus) Writer(url, bucket string) (jetstream.KeyValue, func()) {
	b.t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		b.t.Fatal(err)
	}
	return kv, nc.Close
}

// CreateBucket creates bucket with one value per key.
func CreateBucket(t testing.TB, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// Put stores value under key.
func Put(t testing.TB, kv jetstream.KeyValue, key string, value []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

// Delete writes a delete marker for key.
func Delete(t testing.TB, kv jetstream.KeyValue, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond until it holds, failing after Wait with its last
// explanation.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %v: %s", what, Wait, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Background runs run(ctx) until the test ends or the returned stop is
// called; stop cancels it once and returns what run returned.
func Background(t testing.TB, run func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			cancel()
			runErr = <-done
			stopped = true
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Values reads every live key of kv with its value: the truth a read model
// must match.
func Values(t testing.TB, kv jetstream.KeyValue) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string][]byte{}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// Deleted between the listing and the read: no value now.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = e.Value()
	}
	return out
}

// ReportPercentiles reports the median and the 99th percentile of lat as
// benchmark metrics p50-<name> and p99-<name>, in units of unit.
func ReportPercentiles(b *testing.B, lat []time.Duration, unit time.Duration, name string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(unit)
	}
	b.ReportMetric(pct(0.50), "p50-"+name)
	b.ReportMetric(pct(0.99), "p99-"+name)
}

// Unreachable returns a connection to a NATS URL where nothing listens
// (a port the kernel picked and let go), reconnecting forever as a node's
// does, and that URL: what a service sees while its NATS server is away.
// The connection closes with the test.
func Unreachable(t testing.TB) (*nats.Conn, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	_ = l.Close() // nothing listens there now
	nc, err := natsbus.Connect(url, t.Name(), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, url
}

// LogBuffer is a log destination that goroutines write while the test
// reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tmpfs mounts a tmpfs of size (mount's syntax: "4m") on a new temporary
// directory and returns it, unmounted when the test ends: a file system
// that really fills up. It needs root and CAP_SYS_ADMIN; without them the
// test is skipped, saying which is missing. .ci/run runs as root and
// fails when a test that uses this skips.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount a tmpfs; CI runs as root, with the PostgreSQL URL set, and fails when a test that uses this skips (.ci/run's must-not-skip list)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): %v: %s; CI runs as root, with the PostgreSQL URL set, and fails when a test that uses this skips (.ci/run's must-not-skip list)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}
