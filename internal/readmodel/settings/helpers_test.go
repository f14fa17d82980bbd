package settingsmodel_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	settingsmodel "github.com/svc-pf/svc-pf/internal/readmodel/settings"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// The helpers below are those of internal/readmodel/follower_test.go, for
// the settings bucket.

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
	return &running{m: m, reg: reg, stop: natstest.Background(t, m.Run)}
}

func (r *running) waitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := r.m.WaitReady(ctx); err != nil {
		t.Fatalf("model not ready: %v", err)
	}
}

// bucketDocs reads the bucket directly: the truth the model must match,
// as key → canonical JSON of every value that decodes.
func bucketDocs(t testing.TB, kv jetstream.KeyValue) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range natstest.Values(t, kv) {
		if _, _, _, err := settings.ParseKey(k); err != nil {
			continue
		}
		if d, err := settings.Parse(v); err == nil {
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

// The bench: internal/natsbus/natstest, on the settings.Bucket bucket.
const waitFor = natstest.Wait

func testLogger(t testing.TB) *slog.Logger { return natstest.Logger(t) }

type bus struct{ *natstest.Bus }

func startBus(t testing.TB) *bus { return &bus{natstest.Start(t)} }

func createBucket(t testing.TB, js jetstream.JetStream) jetstream.KeyValue {
	return natstest.CreateBucket(t, js, settings.Bucket)
}

func putRaw(t testing.TB, kv jetstream.KeyValue, key string, value []byte) {
	natstest.Put(t, kv, key, value)
}

func del(t testing.TB, kv jetstream.KeyValue, key string) { natstest.Delete(t, kv, key) }

func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	natstest.Eventually(t, what, cond)
}
