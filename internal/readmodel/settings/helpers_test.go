package settingsmodel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/natsbus"
	settingsmodel "github.com/svc-pf/svc-pf/internal/readmodel/settings"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// The helpers below are those of internal/readmodel/follower_test.go, for
// the settings bucket.

// waitFor is how long a test waits for the model to follow the bucket. It is
// generous because a resume after a NATS restart involves reconnect back-off.
const waitFor = 30 * time.Second

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SVCPF_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type bus struct {
	t   testing.TB
	dir string
	srv *natsbus.Embedded
	js  jetstream.JetStream
}

// startBus starts an embedded NATS server and a client connection.
func startBus(t testing.TB) *bus {
	t.Helper()
	b := &bus{t: t, dir: t.TempDir()}
	b.start(0)
	nc, err := natsbus.Connect(b.srv.ClientURL(), "settings-readmodel-test", testLogger(t), false)
	if err != nil {
		t.Fatal(err)
	}
	b.js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		if b.srv != nil {
			b.srv.Shutdown()
		}
	})
	return b
}

func (b *bus) start(port int) {
	b.t.Helper()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: b.dir, Port: port})
	if err != nil {
		b.t.Fatal(err)
	}
	b.srv = srv
}

func (b *bus) stop() {
	b.srv.Shutdown()
	b.srv = nil
}

// writer is a separate client for producing changes, like the orgmanager's
// deploy.
func (b *bus) writer() (jetstream.KeyValue, func()) {
	b.t.Helper()
	nc, err := nats.Connect(b.srv.ClientURL())
	if err != nil {
		b.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, settings.Bucket)
	if err != nil {
		b.t.Fatal(err)
	}
	return kv, nc.Close
}

func createBucket(t testing.TB, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: settings.Bucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func mustParse(t testing.TB, doc string) *settings.Document {
	t.Helper()
	d, err := settings.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse(%s): %v", doc, err)
	}
	return d
}

// putDoc stores doc as the deploy does: its canonical JSON under its key.
func putDoc(t testing.TB, kv jetstream.KeyValue, key, doc string) {
	t.Helper()
	putRaw(t, kv, key, []byte(mustParse(t, doc).String()))
}

func putRaw(t testing.TB, kv jetstream.KeyValue, key string, value []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

func del(t testing.TB, kv jetstream.KeyValue, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
}

type running struct {
	m    *settingsmodel.Model
	reg  *prometheus.Registry
	stop func() error
}

func startModel(t testing.TB, js jetstream.JetStream) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := settingsmodel.New(settingsmodel.Config{JetStream: js, Logger: testLogger(t), Registerer: reg,
		RetryInterval: 100 * time.Millisecond, CheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	r := &running{m: m, reg: reg}
	var stopped bool
	var runErr error
	r.stop = func() error {
		if !stopped {
			cancel()
			runErr = <-done
			stopped = true
		}
		return runErr
	}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

func (r *running) waitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := r.m.WaitReady(ctx); err != nil {
		t.Fatalf("model not ready: %v", err)
	}
}

// eventually polls cond until it holds, failing with the last explanation.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %v: %s", what, waitFor, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bucketDocs reads the bucket directly: the truth the model must match,
// as key → canonical JSON of every value that decodes.
func bucketDocs(t testing.TB, kv jetstream.KeyValue) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]string{}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := settings.ParseKey(k); err != nil {
			continue
		}
		if d, err := settings.Parse(e.Value()); err == nil {
			out[k] = d.String()
		}
	}
	return out
}

func modelDocs(m *settingsmodel.Model) map[string]string {
	out := map[string]string{}
	for k, d := range m.Snapshot().All {
		out[k] = d.String()
	}
	return out
}

// converged waits until the model holds exactly what the bucket holds.
func converged(t testing.TB, m *settingsmodel.Model, kv jetstream.KeyValue) {
	t.Helper()
	want := bucketDocs(t, kv)
	eventually(t, "model matches bucket", func() (bool, string) {
		got := modelDocs(m)
		if len(got) != len(want) {
			return false, fmt.Sprintf("model has %d documents, bucket %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				return false, fmt.Sprintf("%s: model %q, bucket %q", k, got[k], v)
			}
		}
		return true, ""
	})
}

func metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		for _, l := range m.GetLabel() {
			if l.GetName() == "bucket" && l.GetValue() != settings.Bucket {
				t.Fatalf("%s labelled bucket=%q", name, l.GetValue())
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func checkMetric(t testing.TB, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	if got := metric(t, reg, name); got != want {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// Keys of the documents the tests use.
var (
	scOrg = settings.Scope{Kind: settings.ScopeOrg}
	keyG  = settings.GlobalKey
)

func keyOrg(org string) string { return settings.Key(org, scOrg) }
func keyP(org string, n int) string {
	return settings.Key(org, settings.Scope{Kind: settings.ScopeProfile, Profile: n})
}
func keyL(org, v string) string {
	return settings.Key(org, settings.Scope{Kind: settings.ScopeLocation, Value: v})
}
func keyU(org, v string) string {
	return settings.Key(org, settings.Scope{Kind: settings.ScopeUsername, Value: v})
}
func keyD(org, v string) string {
	return settings.Key(org, settings.Scope{Kind: settings.ScopeDeviceID, Value: v})
}

// names lists the layers' names.
func names(ls []settings.Layer) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}
