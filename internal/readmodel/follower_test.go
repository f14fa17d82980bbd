package readmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	"github.com/svc-pf/svc-pf/internal/session"
)

func mkSession(org string, n int, user string, prefixes ...string) *session.Session {
	s := &session.Session{Org: org, Revision: 1, Attributes: identity.Attributes{Username: user}, UpdatedAt: time.Unix(1_700_000_000, 0).UTC()}
	for _, p := range prefixes {
		s.Allocations = append(s.Allocations, netip.MustParsePrefix(p))
	}
	s.ID = session.NewID(identity.Identity{Org: org, Attributes: identity.Attributes{Username: user, Location: fmt.Sprint(n)}}, s.Allocations[0])
	return s
}

func put(t testing.TB, kv jetstream.KeyValue, s *session.Session) {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, kv, s.ID, b)
}

type running struct {
	x    *sessions.Model
	reg  *prometheus.Registry
	stop func() error
}

func startIndex(t testing.TB, js jetstream.JetStream) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	x, err := sessions.New(sessions.Config{JetStream: js, Logger: testLogger(t), Registerer: reg,
		RetryInterval: 100 * time.Millisecond, CheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &running{x: x, reg: reg, stop: natstest.Background(t, x.Run)}
}

func (r *running) waitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := r.x.WaitReady(ctx); err != nil {
		t.Fatalf("index not ready: %v", err)
	}
}

// bucketSessions reads the bucket directly: the truth the index must match.
func bucketSessions(t testing.TB, kv jetstream.KeyValue) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range natstest.Values(t, kv) {
		if s, err := session.Decode(k, v); err == nil {
			out[k] = describe(s)
		}
	}
	return out
}

// describe is the session's JSON: the index must give back every field
// exactly as the bucket holds it.
func describe(s *session.Session) string {
	b, err := json.Marshal(s)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func indexSessions(x *sessions.Model) map[string]string {
	out := map[string]string{}
	for e := range x.Snapshot().All {
		out[e.ID()] = describe(e.Session())
	}
	return out
}

// converged waits until the index holds exactly what the bucket holds.
func converged(t testing.TB, x *sessions.Model, kv jetstream.KeyValue) {
	t.Helper()
	want := bucketSessions(t, kv)
	eventually(t, "index matches bucket", func() (bool, string) {
		got := indexSessions(x)
		if len(got) != len(want) {
			return false, fmt.Sprintf("index has %d sessions, bucket %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				return false, fmt.Sprintf("session %s: index %q, bucket %q", k, got[k], v)
			}
		}
		return true, ""
	})
}

func lookup(x *sessions.Model, addr string) string {
	e, ok := x.Snapshot().LookupIP(netip.MustParseAddr(addr))
	if !ok {
		return ""
	}
	return e.ID()
}

func TestInitialSnapshotAndLiveUpdates(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	alice := mkSession("org-a", 1, "alice", "10.0.0.0/24")
	bob := mkSession("org-a", 2, "bob", "10.0.1.0/24", "2001:db8::/64")
	gone := mkSession("org-b", 3, "", "192.0.2.0/24")
	for _, s := range []*session.Session{alice, bob, gone} {
		put(t, kv, s)
	}
	del(t, kv, gone.ID) // a delete marker in the initial snapshot

	r := startIndex(t, b.JS)
	r.waitReady(t)
	x := r.x
	if !x.Ready() {
		t.Fatal("Ready() false after WaitReady")
	}
	if got := x.Snapshot().Len(); got != 2 {
		t.Fatalf("initial snapshot has %d sessions, want 2", got)
	}
	for addr, want := range map[string]string{"10.0.0.7": alice.ID, "10.0.1.7": bob.ID, "2001:db8::1": bob.ID, "192.0.2.1": ""} {
		if got := lookup(x, addr); got != want {
			t.Errorf("LookupIP(%s) = %q, want %q", addr, got, want)
		}
	}
	if got := x.Snapshot().ByUsername("alice"); len(got) != 1 || got[0].ID() != alice.ID {
		t.Errorf("ByUsername(alice) = %v", got)
	}
	if s, ok := x.Snapshot().Get(bob.ID); !ok || s.Username() != "bob" {
		t.Errorf("Get(bob) = %v, %v", s, ok)
	}

	// Live put.
	carol := mkSession("org-b", 4, "carol", "10.9.0.0/16")
	carol.DeviceID = "phone-1"
	put(t, kv, carol)
	eventually(t, "live put visible", func() (bool, string) {
		return lookup(x, "10.9.1.1") == carol.ID && len(x.Snapshot().ByDeviceID("phone-1")) == 1, lookup(x, "10.9.1.1")
	})

	// Update with changed allocations: the old prefix stops answering.
	moved := *alice
	moved.Allocations = []netip.Prefix{netip.MustParsePrefix("10.5.0.0/24")}
	moved.Revision = 2
	put(t, kv, &moved)
	eventually(t, "moved allocation", func() (bool, string) {
		return lookup(x, "10.5.0.1") == alice.ID && lookup(x, "10.0.0.7") == "", lookup(x, "10.0.0.7")
	})
	if s, _ := x.Snapshot().Get(alice.ID); s.Revision() != 2 {
		t.Errorf("Get after update: revision %d", s.Revision())
	}

	// Delete and purge.
	del(t, kv, bob.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kv.Purge(ctx, carol.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delete and purge applied", func() (bool, string) {
		return lookup(x, "10.0.1.7") == "" && lookup(x, "10.9.1.1") == "" && x.Snapshot().Len() == 1,
			fmt.Sprint(x.Snapshot().Len(), " sessions")
	})
	converged(t, x, kv)

	eventually(t, "caught up", func() (bool, string) { return x.Lag() == 0, x.Lag().String() })
	checkMetric(t, r.reg, "svcpf_readmodel_entries", 1)
	checkMetric(t, r.reg, "svcpf_readmodel_ready", 1)
	checkMetric(t, r.reg, "svcpf_readmodel_decode_errors_total", 0)
	checkMetric(t, r.reg, "svcpf_readmodel_lag_seconds", 0)
	// 3 initial entries (gone's put was superseded by its marker), 4 live.
	checkMetric(t, r.reg, "svcpf_readmodel_updates_applied_total", 7)
	if err := r.stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
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

func TestWaitsForBucket(t *testing.T) {
	b := startBus(t)
	r := startIndex(t, b.JS)
	time.Sleep(300 * time.Millisecond) // several retry intervals without a bucket
	if r.x.Ready() {
		t.Fatal("ready without a bucket")
	}
	if r.x.Lag() <= 0 {
		t.Error("Lag() should be positive before the initial snapshot")
	}
	kv := createBucket(t, b.JS)
	s := mkSession("org", 1, "", "10.0.0.0/8")
	put(t, kv, s)
	r.waitReady(t)
	eventually(t, "session visible", func() (bool, string) { return lookup(r.x, "10.1.1.1") == s.ID, "" })
}

func TestInvalidValues(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	good := mkSession("org", 1, "", "10.0.0.0/24")
	put(t, kv, good)
	putRaw(t, kv, "broken-at-load", []byte("{not json"))
	r := startIndex(t, b.JS)
	r.waitReady(t)
	x := r.x
	if x.Snapshot().Len() != 1 || lookup(x, "10.0.0.1") != good.ID {
		t.Fatalf("initial snapshot: %d sessions", x.Snapshot().Len())
	}
	checkMetric(t, r.reg, "svcpf_readmodel_decode_errors_total", 1)

	mismatch := mkSession("org", 2, "", "10.0.1.0/24")
	raw, _ := json.Marshal(mismatch)
	hostBits := mkSession("org", 3, "", "10.0.2.0/24")
	hostBits.Allocations[0] = netip.MustParsePrefix("10.0.2.1/24")
	hb, _ := json.Marshal(hostBits)
	cases := []struct {
		key   string
		value []byte
	}{
		{good.ID, []byte(`{"id":`)},        // replaces a valid session with garbage
		{"other-key", raw},                 // id does not match the key
		{hostBits.ID, hb},                  // fails session.Validate
		{"null-value", []byte("null")},     // JSON null
		{"empty-value", []byte{}},          // empty
		{"array-value", []byte(`[1,2,3]`)}, // wrong JSON type
	}
	for _, c := range cases {
		putRaw(t, kv, c.key, c.value)
	}
	after := mkSession("org", 4, "", "10.0.3.0/24")
	put(t, kv, after)
	eventually(t, "valid update after invalid ones", func() (bool, string) { return lookup(x, "10.0.3.1") == after.ID, "" })
	if x.Snapshot().Len() != 1 {
		t.Errorf("index holds %d sessions, want only the last valid one", x.Snapshot().Len())
	}
	if lookup(x, "10.0.0.1") != "" {
		t.Error("a session replaced by an invalid value still answers")
	}
	checkMetric(t, r.reg, "svcpf_readmodel_decode_errors_total", float64(1+len(cases)))
}

// TestResumeAfterRestart restarts the NATS server on the same port and store,
// then changes the bucket: the index reconnects, resumes and converges.
func TestResumeAfterRestart(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	keep := mkSession("org", 1, "u1", "10.0.0.0/24")
	change := mkSession("org", 2, "u2", "10.0.1.0/24")
	drop := mkSession("org", 3, "u3", "10.0.2.0/24")
	for _, s := range []*session.Session{keep, change, drop} {
		put(t, kv, s)
	}
	r := startIndex(t, b.JS)
	r.waitReady(t)

	port := b.Srv.Port()
	b.StopServer()
	eventually(t, "lag grows while disconnected", func() (bool, string) { return r.x.Lag() > 0, r.x.Lag().String() })
	if r.x.Snapshot().Len() != 3 {
		t.Fatal("snapshot lost sessions while NATS is down")
	}
	b.StartServer(port)
	wkv, closeW := b.Writer(b.Srv.ClientURL(), session.Bucket)
	defer closeW()
	changed := *change
	changed.Allocations = []netip.Prefix{netip.MustParsePrefix("10.7.0.0/16")}
	put(t, wkv, &changed)
	del(t, wkv, drop.ID)
	added := mkSession("org", 4, "u4", "2001:db8:4::/48")
	put(t, wkv, added)

	converged(t, r.x, wkv)
	if lookup(r.x, "10.0.1.1") != "" || lookup(r.x, "10.7.1.1") != change.ID || lookup(r.x, "2001:db8:4::1") != added.ID {
		t.Error("lookups after resume do not reflect the changes")
	}
	eventually(t, "caught up after resume", func() (bool, string) { return r.x.Lag() == 0, r.x.Lag().String() })
	if metric(t, r.reg, "svcpf_readmodel_resumes_total") < 1 {
		t.Error("no resume counted")
	}
	if metric(t, r.reg, "svcpf_readmodel_full_loads_total") != 1 {
		t.Error("a restart of the same stream must not need a full reload")
	}
}

// TestChangesWhileAway makes the changes while the index cannot reach any
// server: the store is served on another port, changed (including a delete
// whose marker is then purged, which no replay can deliver), and served
// again on the index's port.
func TestChangesWhileAway(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	var all []*session.Session
	for i := 0; i < 20; i++ {
		s := mkSession("org", i, fmt.Sprint("u", i), fmt.Sprintf("10.0.%d.0/24", i))
		put(t, kv, s)
		all = append(all, s)
	}
	r := startIndex(t, b.JS)
	r.waitReady(t)
	port := b.Srv.Port()
	b.StopServer()

	b.StartServer(0) // elsewhere: the index keeps trying the old port
	wkv, closeW := b.Writer(b.Srv.ClientURL(), session.Bucket)
	moved := *all[0]
	moved.Allocations = []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}
	put(t, wkv, &moved)
	del(t, wkv, all[1].ID)
	del(t, wkv, all[2].ID)
	put(t, wkv, mkSession("org", 100, "new", "192.0.2.0/24"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wkv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	del(t, wkv, all[3].ID) // this marker survives
	closeW()
	b.StopServer()

	b.StartServer(port)
	wkv, closeW = b.Writer(b.Srv.ClientURL(), session.Bucket)
	defer closeW()
	converged(t, r.x, wkv)
	for i, want := range map[int]string{0: "", 1: "", 2: "", 3: "", 4: all[4].ID} {
		if got := lookup(r.x, fmt.Sprintf("10.0.%d.1", i)); got != want {
			t.Errorf("10.0.%d.1 → %q, want %q", i, got, want)
		}
	}
	if got := lookup(r.x, "172.20.0.1"); got != all[0].ID {
		t.Errorf("moved session: %q", got)
	}
	// The replay delivers all[3]'s marker; only the two deletes whose markers
	// were purged are left for the reconcile.
	if got := metric(t, r.reg, "svcpf_readmodel_reconcile_removed_total"); got != 2 {
		t.Errorf("reconcile removed %v sessions, want 2", got)
	}
}

// TestBucketRecreated deletes the bucket and creates it again with other
// contents: revisions restart, so only a full reload is correct.
func TestBucketRecreated(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	for i := 0; i < 5; i++ {
		put(t, kv, mkSession("old", i, "", fmt.Sprintf("10.0.%d.0/24", i)))
	}
	r := startIndex(t, b.JS)
	r.waitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.JS.DeleteKeyValue(ctx, session.Bucket); err != nil {
		t.Fatal(err)
	}
	kv = createBucket(t, b.JS)
	fresh := mkSession("new", 1, "", "192.0.2.0/24")
	put(t, kv, fresh)
	converged(t, r.x, kv)
	if got := metric(t, r.reg, "svcpf_readmodel_full_loads_total"); got < 2 {
		t.Errorf("full loads = %v, want a reload", got)
	}
}

func TestConfigAndRunErrors(t *testing.T) {
	if _, err := sessions.New(sessions.Config{}); err == nil {
		t.Error("New without JetStream: no error")
	}
	b := startBus(t)
	reg := prometheus.NewRegistry()
	if _, err := sessions.New(sessions.Config{JetStream: b.JS, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := sessions.New(sessions.Config{JetStream: b.JS, Registerer: reg}); err == nil {
		t.Error("registering the metrics twice: no error")
	}
	x, err := sessions.New(sessions.Config{JetStream: b.JS})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if err := x.Run(ctx); err == nil {
		t.Error("second Run: no error")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := x.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady without a bucket = %v", err)
	}
	if x.Snapshot() == nil || x.Snapshot().Len() != 0 {
		t.Error("Snapshot before load must be an empty index")
	}
}

// The bench: internal/natsbus/natstest, on the session.Bucket bucket.
const waitFor = natstest.Wait

func testLogger(t testing.TB) *slog.Logger { return natstest.Logger(t) }

type bus struct{ *natstest.Bus }

func startBus(t testing.TB) *bus { return &bus{natstest.Start(t)} }

func createBucket(t testing.TB, js jetstream.JetStream) jetstream.KeyValue {
	return natstest.CreateBucket(t, js, session.Bucket)
}

func putRaw(t testing.TB, kv jetstream.KeyValue, key string, value []byte) {
	natstest.Put(t, kv, key, value)
}

func del(t testing.TB, kv jetstream.KeyValue, key string) { natstest.Delete(t, kv, key) }

func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	natstest.Eventually(t, what, cond)
}
