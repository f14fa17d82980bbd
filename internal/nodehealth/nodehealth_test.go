package nodehealth

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestAtStale: a beat older than three of the node's intervals is stale,
// one within them is not; a beat without an interval counts the default.
func TestAtStale(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		age      time.Duration
		interval float64
		stale    bool
	}{
		{0, 10, false},
		{30 * time.Second, 10, false},
		{31 * time.Second, 10, true},
		{2 * time.Second, 0.5, true},
		{29 * time.Second, 0, false},
		{31 * time.Second, 0, true},
	} {
		n := At(Beat{Name: "x", UpdatedAt: now.Add(-c.age), IntervalSeconds: c.interval}, now)
		if n.Stale != c.stale || n.AgeSeconds != c.age.Seconds() {
			t.Errorf("age %v interval %vs: stale %v age %vs, want stale %v", c.age, c.interval, n.Stale, n.AgeSeconds, c.stale)
		}
	}
}

// TestList: the beats come back by name, each as written; a value that is
// not a beat under its own name is left out; no bucket is no nodes.
func TestList(t *testing.T) {
	bus := natstest.Start(t)
	ctx := context.Background()
	if nodes, err := List(ctx, bus.JS, time.Now()); err != nil || len(nodes) != 0 {
		t.Fatalf("before any node: %v %v", nodes, err)
	}
	snap := func(s Snapshot) func() Snapshot { return func() Snapshot { return s } }
	for _, c := range []struct {
		name string
		s    Snapshot
	}{
		{"b-node", Snapshot{NotReady: "feed x not loaded yet", Feeds: []Feed{{Name: "x"}}}},
		{"a-node", Snapshot{Feeds: []Feed{{Name: "x", Version: 7, LoadedAt: time.Now()}}, Counts: Counts{Sessions: 3, SettingsDocuments: 2}}},
	} {
		a, err := NewAnnouncer(AnnouncerConfig{NATS: bus.NC, Name: c.name, Services: []string{"resolver"}, Version: "1",
			Interval: time.Hour, Snapshot: snap(c.s)})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := bus.JS.KeyValue(ctx, Bucket)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Put(t, kv, "garbage", []byte("{not json"))
	natstest.Put(t, kv, "other", []byte(`{"name":"a-node"}`))
	nodes, err := List(ctx, bus.JS, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].Name != "a-node" || nodes[1].Name != "b-node" {
		t.Fatalf("nodes: %+v", nodes)
	}
	a, b := nodes[0], nodes[1]
	if !a.Ready || a.Counts.Sessions != 3 || a.Counts.SettingsDocuments != 2 || len(a.Feeds) != 1 || a.Feeds[0].Version != 7 || a.Stale {
		t.Errorf("a-node: %+v", a)
	}
	if b.Ready || b.NotReady != "feed x not loaded yet" {
		t.Errorf("b-node: %+v", b)
	}
	// Every key deleted: an empty list, not a wait.
	for _, k := range []string{"a-node", "b-node", "garbage", "other"} {
		natstest.Delete(t, kv, k)
	}
	if nodes, err := List(ctx, bus.JS, time.Now()); err != nil || len(nodes) != 0 {
		t.Errorf("after every key is deleted: %+v %v", nodes, err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.History() != 1 || st.TTL() != BucketBeats*time.Hour {
		t.Errorf("bucket: history %d ttl %v (%v), want 1 and %v", st.History(), st.TTL(), err, BucketBeats*time.Hour)
	}
}

// TestOutageLoggedOnce: while NATS is away every beat fails, but the
// warning is logged once; its end once too.
func TestOutageLoggedOnce(t *testing.T) {
	bus := natstest.Start(t)
	var buf natstest.LogBuffer
	a, err := NewAnnouncer(AnnouncerConfig{NATS: bus.NC, Name: "n1", Interval: 20 * time.Millisecond,
		Snapshot: func() Snapshot { return Snapshot{} }, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := natstest.Background(t, a.Run)
	natstest.Eventually(t, "the first beat", func() (bool, string) {
		nodes, err := List(context.Background(), bus.JS, time.Now())
		return err == nil && len(nodes) == 1, ""
	})
	port := bus.Srv.Port()
	bus.StopServer()
	// Many beats fail meanwhile (20ms each).
	natstest.Eventually(t, "the outage logged", func() (bool, string) {
		return strings.Contains(buf.String(), "node heartbeat not written"), buf.String()
	})
	time.Sleep(300 * time.Millisecond)
	bus.StartServer(port)
	// Once per outage: every warning is followed by one recovery line. A
	// beat that the stopping server still took makes a second, short
	// outage of its own, so the outages are counted by their pairs; a
	// warning per failed beat would be about fifteen (300 ms of 20 ms
	// beats) against at most a few recoveries.
	pairs := func() (warned, recovered int) {
		s := buf.String()
		return strings.Count(s, "node heartbeat not written"), strings.Count(s, "node heartbeat written again")
	}
	natstest.Eventually(t, "the recovery logged", func() (bool, string) {
		w, r := pairs()
		return w >= 1 && w == r, buf.String()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if w, r := pairs(); w != r || w > 3 {
		t.Errorf("%d warnings and %d recoveries: want one warning per outage:\n%s", w, r, buf.String())
	}
}

// TestNames: names a key cannot hold are refused; the default name is
// always one a key holds.
func TestNames(t *testing.T) {
	for _, bad := range []string{"", "a b", ".a", "a.", "a..b", "a/b", "a*", "a>", strings.Repeat("a", 201)} {
		if ValidateName(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{"dns1-resolver", "fra.dns-1", "A_b=c"} {
		if err := ValidateName(good); err != nil {
			t.Errorf("%q refused: %v", good, err)
		}
	}
	if got := DefaultName("dns1.fra.example", "resolver"); got != "dns1_fra_example-resolver" {
		t.Errorf("DefaultName: %q", got)
	}
	if got := DefaultName("", "all"); got != "node-all" {
		t.Errorf("DefaultName of no host: %q", got)
	}
}

// FuzzDefaultName: whatever the host's name, the default node name is a
// valid key.
func FuzzDefaultName(f *testing.F) {
	f.Add("dns1.fra.example")
	f.Add("")
	f.Add("ünïcode host/with*wild>cards")
	f.Fuzz(func(t *testing.T, host string) {
		for _, svc := range []string{"resolver", "simulator", "all"} {
			if err := ValidateName(DefaultName(host, svc)); err != nil {
				t.Fatalf("DefaultName(%q, %q) = %q: %v", host, svc, DefaultName(host, svc), err)
			}
		}
	})
}
