package orgstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// benchStore is a store under benchmark; analyze refreshes PostgreSQL's
// planner statistics after a bulk load (a no-op on SQLite).
type benchStore struct {
	*orgstore.Store
	analyze func(b *testing.B)
}

func benchDialects(b *testing.B, fn func(b *testing.B, s benchStore)) {
	for _, d := range []string{storetest.SQLite, storetest.Postgres} {
		b.Run(d, func(b *testing.B) {
			url := storetest.URL(b, d)
			s := benchStore{Store: storetest.OpenConfig(b, orgstore.Config{URL: url}), analyze: func(*testing.B) {}}
			if d == storetest.Postgres {
				s.analyze = func(b *testing.B) { analyze(b, url) }
			}
			fn(b, s)
		})
	}
}

// analyze runs ANALYZE, as autovacuum does on its own shortly after a bulk
// load. Without statistics the planner takes a freshly loaded 100 000-row
// organisation for a few hundred rows and sorts instead of walking the
// primary key (see docs/store.md).
func analyze(b *testing.B, url string) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ANALYZE`); err != nil {
		b.Fatal(err)
	}
}

// benchOps returns n upserts of distinct /32s (IPv4) or /128s (IPv6) with
// the attributes and a small meta, as the batch endpoint sees them.
func benchOps(n, salt int) []orgstore.BatchOp {
	ops := make([]orgstore.BatchOp, n)
	for i := range ops {
		var a netip.Addr
		if i%4 == 3 {
			a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})
		} else {
			a = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		}
		ops[i].Override = orgstore.Override{
			CIDR:       netip.PrefixFrom(a, a.BitLen()),
			Attributes: identity.Attributes{Username: fmt.Sprintf("user-%d-%d", salt, i), DeviceID: fmt.Sprintf("mac:02:00:00:%02x:%02x:%02x", byte(i>>16), byte(i>>8), byte(i)), Location: fmt.Sprintf("site-%d", i%50)},
			Meta:       json.RawMessage(fmt.Sprintf(`{"trace_id":"tr-%d-%d","x_plan":"gold"}`, salt, i)),
		}
	}
	return ops
}

// BenchmarkApplyBatch10k: one 10 000-item batch (the API's maximum).
// insert: every CIDR new (fresh organisation per iteration); overwrite: every
// CIDR exists; mixed: half overwrites, a quarter deletes, a quarter new.
func BenchmarkApplyBatch10k(b *testing.B) {
	benchDialects(b, func(b *testing.B, s benchStore) {
		ctx := context.Background()
		b.Run("insert", func(b *testing.B) {
			ops := benchOps(10_000, 0)
			n := 0
			for b.Loop() {
				b.StopTimer()
				org := fmt.Sprintf("ins-%d", n)
				n++
				if _, err := s.PutOrg(ctx, org); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := s.ApplyBatch(ctx, org, ops); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("overwrite", func(b *testing.B) {
			if _, err := s.PutOrg(ctx, "ow"); err != nil {
				b.Fatal(err)
			}
			if _, err := s.ApplyBatch(ctx, "ow", benchOps(10_000, 0)); err != nil {
				b.Fatal(err)
			}
			ops := benchOps(10_000, 1)
			for b.Loop() {
				if _, err := s.ApplyBatch(ctx, "ow", ops); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("mixed", func(b *testing.B) {
			if _, err := s.PutOrg(ctx, "mix"); err != nil {
				b.Fatal(err)
			}
			base := benchOps(15_000, 0)
			ops := slices.Clone(base[:10_000])
			for i := range ops {
				if i%4 == 1 {
					ops[i].Delete = true
				}
				if i%4 == 2 { // not in the stored set
					ops[i] = base[10_000+i/4]
				}
			}
			for b.Loop() {
				b.StopTimer()
				if _, err := s.ApplyBatch(ctx, "mix", base[:10_000]); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := s.ApplyBatch(ctx, "mix", ops); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// loadOrg gives org n overrides and a few prefixes.
func loadOrg(b *testing.B, s benchStore, org string, n int) {
	b.Helper()
	ctx := context.Background()
	if _, err := s.PutOrg(ctx, org); err != nil {
		b.Fatal(err)
	}
	if _, err := s.UpdatePrefixes(ctx, org, pfxs("10.0.0.0/10", "10.64.0.0/10", "2001:db8::/32"), nil); err != nil {
		b.Fatal(err)
	}
	all := benchOps(n, 0)
	for len(all) > 0 {
		chunk := all[:min(len(all), 10_000)]
		all = all[len(chunk):]
		if _, err := s.ApplyBatch(ctx, org, chunk); err != nil {
			b.Fatal(err)
		}
	}
	s.analyze(b)
}

// BenchmarkReadOverrides100k: all overrides of an organisation with 100 000.
func BenchmarkReadOverrides100k(b *testing.B) {
	benchDialects(b, func(b *testing.B, s benchStore) {
		ctx := context.Background()
		loadOrg(b, s, "big", 100_000)
		for _, d := range []struct {
			name string
			d    orgstore.Detail
		}{{"cidr", orgstore.CIDROnly}, {"identity", orgstore.Identity}, {"full", orgstore.Full}} {
			b.Run(d.name, func(b *testing.B) {
				for b.Loop() {
					v, err := s.ReadOverrides(ctx, "big", d.d)
					if err != nil {
						b.Fatal(err)
					}
					if len(v.Overrides) != 100_000 {
						b.Fatalf("%d overrides", len(v.Overrides))
					}
				}
			})
		}
	})
}

// BenchmarkReadOverride: the single GET's read, one at a time.
func BenchmarkReadOverride(b *testing.B) {
	benchDialects(b, func(b *testing.B, s benchStore) {
		ctx := context.Background()
		loadOrg(b, s, "big", 100_000)
		ops := benchOps(100_000, 0)
		i := 0
		for b.Loop() {
			c := ops[(i*7919)%len(ops)].Override.CIDR
			i++
			if v, err := s.ReadOverride(ctx, "big", c); err != nil || len(v.Overrides) != 1 {
				b.Fatalf("ReadOverride(%s): %v", c, err)
			}
		}
	})
}

// BenchmarkReadOverrideParallel: single-override reads from 32 goroutines
// against an organisation with 100 000 overrides. Besides ns/op (wall time
// per read, all goroutines together) it reports each read's own latency.
func BenchmarkReadOverrideParallel(b *testing.B) {
	benchDialects(b, func(b *testing.B, s benchStore) {
		ctx := context.Background()
		loadOrg(b, s, "big", 100_000)
		ops := benchOps(100_000, 0)
		var (
			mu   sync.Mutex
			lats []time.Duration
		)
		b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0))) // 32 goroutines
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			local := make([]time.Duration, 0, 1024)
			i := 0
			for pb.Next() {
				c := ops[(i*7919)%len(ops)].Override.CIDR
				i++
				t0 := time.Now()
				v, err := s.ReadOverride(ctx, "big", c)
				local = append(local, time.Since(t0))
				if err != nil || len(v.Overrides) != 1 {
					b.Errorf("ReadOverride(%s): %v", c, err)
					return
				}
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		})
		b.StopTimer()
		if len(lats) > 0 {
			slices.Sort(lats)
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
		}
	})
}
