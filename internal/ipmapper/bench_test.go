package ipmapper

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// BenchmarkSetSessionBatch10k stores and acknowledges 10 000 new or changed
// sessions per iteration through the mapperclient.Client, against the
// embedded server.
func BenchmarkSetSessionBatch10k(b *testing.B) {
	f := startFixture(b, nil)
	ctx := ctxT(b)
	const n = 10000
	sessions := make([]session.Session, n)
	for i := range sessions {
		sessions[i] = mkSession(i, "bench")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for it := 0; b.Loop(); it++ {
		for i := range sessions {
			sessions[i].Revision = int64(it + 1) // every session changes: all are written
		}
		stored, err := f.client.SetSessionBatch(ctx, sessions)
		if err != nil || stored != n {
			b.Fatalf("stored %d, %v", stored, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/10k")
}

// BenchmarkGetSessionsByIP is one get-sessions by ip round trip over NATS
// with 100 000 sessions in the table.
func BenchmarkGetSessionsByIP(b *testing.B) {
	f := startFixture(b, nil)
	ctx := ctxT(b)
	const n = 100000
	sessions := make([]session.Session, n)
	for i := range sessions {
		sessions[i] = mkSession(i, fmt.Sprintf("org%d", i%100))
	}
	if _, err := f.client.SetSessionBatch(ctx, sessions); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		list, err := f.client.GetSessions(ctx, mapperclient.Query{IP: ip})
		if err != nil || len(list) != 1 {
			b.Fatalf("%v: %d, %v", ip, len(list), err)
		}
		i = (i + 7919) % n
	}
}

// BenchmarkGetSessionsByIPHandler is the same lookup without the NATS round
// trip: decode, index lookup, encode.
func BenchmarkGetSessionsByIPHandler(b *testing.B) {
	f := startFixture(b, nil)
	ctx := ctxT(b)
	const n = 100000
	sessions := make([]session.Session, n)
	for i := range sessions {
		sessions[i] = mkSession(i, "o")
	}
	if _, err := f.client.SetSessionBatch(ctx, sessions); err != nil {
		b.Fatal(err)
	}
	reqs := make([][]byte, 1024)
	for i := range reqs {
		reqs[i] = fmt.Appendf(nil, `{"ip":"10.%d.%d.%d"}`, byte(i*97>>16), byte(i*97>>8), byte(i*97))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, _, err := f.svc.getSessions(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkTakeover100k is a clean hand-over with 100 000 sessions in the
// bucket: per iteration the active instance stops (releasing the lock) and
// the waiting standby takes the lock, loads the table and serves. The lock
// TTL is the minimum (300 ms), so the standby's wait for its next attempt
// (up to TTL/3) is at most 100 ms of each figure; the rest is the load and
// the conflict probe. load-ms is the load alone.
func BenchmarkTakeover100k(b *testing.B) {
	const ttl = 300 * time.Millisecond
	bus := startBus(b)
	start := func() *Service {
		nc, err := natsbus.Connect(bus.srv.ClientURL(), "bench", nil, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		svc, err := New(Config{Conn: nc, LockTTL: ttl, SweepInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Start(ctxT(b)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = svc.Stop() })
		return svc
	}
	active := start()
	client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: bus.nc, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	const n = 100000
	sessions := make([]session.Session, n)
	for i := range sessions {
		sessions[i] = mkSession(i, fmt.Sprintf("org%d", i%100))
	}
	if _, err := client.SetSessionBatch(ctxT(b), sessions); err != nil {
		b.Fatal(err)
	}
	var load, stop time.Duration
	for b.Loop() {
		b.StopTimer()
		standby := start()
		for standby.Role() != RoleStandby {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		t0 := time.Now()
		if err := active.Stop(); err != nil {
			b.Fatal(err)
		}
		stopped := time.Since(t0)
		for standby.Role() != RoleActive {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		if got := standby.idx.Load().Len(); got != n {
			b.Fatalf("new active holds %d sessions, want %d", got, n)
		}
		load += time.Duration(testutil.ToFloat64(standby.metrics.loadDuration) * float64(time.Second))
		stop += stopped
		active = standby
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/takeover")
	b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load-ms")
	b.ReportMetric(float64(stop.Milliseconds())/float64(b.N), "stop-ms")
}

// BenchmarkLoad100k reads and decodes 100 000 sessions from the bucket into
// a fresh index, as a start or a take-over does.
func BenchmarkLoad100k(b *testing.B) {
	f := startFixture(b, nil)
	const n = 100000
	sessions := make([]session.Session, n)
	for i := range sessions {
		sessions[i] = mkSession(i, fmt.Sprintf("org%d", i%100))
	}
	if _, err := f.client.SetSessionBatch(ctxT(b), sessions); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ix := sessionindex.NewBuilder(n)
		loaded, skipped, err := f.svc.store.load(ctxT(b), func(s *session.Session) { ix.Put(s) })
		if err != nil || loaded != n || skipped != 0 {
			b.Fatalf("loaded %d, skipped %d, %v", loaded, skipped, err)
		}
		if got := ix.Index().Len(); got != n {
			b.Fatalf("index holds %d", got)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/load")
}
