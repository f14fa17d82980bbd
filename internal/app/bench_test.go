package app

import (
	"bytes"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// post sends a JSON body and fails the benchmark unless it gets 200.
func post(b *testing.B, url, body string) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
}

// BenchmarkWriteToIndex: one override write every 20 ms (50 writes/s) on
// the whole path — REST write, deploy over NATS, IP Mapper, KV bucket, a
// node's subscriber index — reporting p50/p99 from sending the write to the
// node resolving the address to the new username (target p99 ≤ 100 ms).
func BenchmarkWriteToIndex(b *testing.B) {
	p := newPlatformTB(b, storetest.URL(b, storetest.SQLite))
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/8"}}, 200)
	var lags []time.Duration
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		<-tick.C
		user := fmt.Sprint("user-", i)
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		start := time.Now()
		post(b, p.base+"/org/acme/overrides", fmt.Sprintf(`{"cidr":"%s/32","username":"%s"}`, ip, user))
		for {
			if s, ok := p.index.LookupIP(ip); ok && s.Username() == user {
				break
			}
			if time.Since(start) > 10*time.Second {
				b.Fatalf("write %d not visible after 10s", i)
			}
			time.Sleep(100 * time.Microsecond)
		}
		lags = append(lags, time.Since(start))
	}
	reportPercentiles(b, lags)
}

func reportPercentiles(b *testing.B, lags []time.Duration) {
	slices.Sort(lags)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lags[len(lags)/2]), "p50-ms")
	b.ReportMetric(ms(lags[len(lags)*99/100]), "p99-ms")
	b.ReportMetric(ms(lags[len(lags)-1]), "max-ms")
}

// BenchmarkBatchToIndex: a batch of 10 000 new overrides, from sending the
// request until every one of them resolves in a node's index (target ≤ 2 s).
func BenchmarkBatchToIndex(b *testing.B) {
	p := newPlatformTB(b, storetest.URL(b, storetest.SQLite))
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/8"}}, 200)
	var lags []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var body bytes.Buffer
		body.WriteString(`{"data":[`)
		for j := range 10_000 {
			if j > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"cidr":"10.%d.%d.%d/32","username":"b%d-%d"}`, i%256, j>>8, j&0xff, i, j)
		}
		body.WriteString(`]}`)
		start := time.Now()
		post(b, p.base+"/org/acme/overrides/batch", body.String())
		for j := 0; j < 10_000; {
			ip := netip.AddrFrom4([4]byte{10, byte(i % 256), byte(j >> 8), byte(j)})
			if s, ok := p.index.LookupIP(ip); ok && s.Username() == fmt.Sprintf("b%d-%d", i, j) {
				j++
				continue
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("batch %d: item %d not visible after 30s", i, j)
			}
			time.Sleep(time.Millisecond)
		}
		lags = append(lags, time.Since(start))
	}
	reportPercentiles(b, lags)
}
