package ipmapper

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
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
