package readmodel_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	"github.com/svc-pf/svc-pf/internal/session"
)

// BenchmarkPutToVisible measures the time from a KV put being sent (the
// producer's side, including its acknowledged round trip) to the new value
// being visible in the index (an update that moves a session to a new
// allocation), with p50/p99 over all operations. "back-to-back" sends the
// next update as soon as the previous one is visible; "paced-50/s" sends
// one every 20 ms, the steady rate of a busy IP Mapper.
func BenchmarkPutToVisible(b *testing.B) {
	for _, c := range []struct {
		name string
		gap  time.Duration
	}{{"back-to-back", 0}, {"paced-50/s", 20 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			bs := startBus(b)
			kv := createBucket(b, bs.JS)
			base := mkSession("org", 1, "u", "10.0.0.0/32")
			put(b, kv, base)
			r := startIndex(b, bs.JS)
			r.waitReady(b)
			var lat []time.Duration
			rev := base.Revision
			ctx := context.Background()
			for b.Loop() {
				rev++
				s := *base
				s.Revision = rev
				s.Allocations = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(rev >> 16), byte(rev >> 8), byte(rev)}), 32)}
				raw, _ := json.Marshal(&s)
				t0 := time.Now()
				if _, err := kv.Put(ctx, s.ID, raw); err != nil {
					b.Fatal(err)
				}
				for {
					if got, ok := r.x.Snapshot().Get(s.ID); ok && got.Revision() == rev {
						break
					}
					runtime.Gosched()
				}
				lat = append(lat, time.Since(t0))
				if c.gap > 0 {
					b.StopTimer()
					time.Sleep(c.gap)
					b.StartTimer()
				}
			}
			natstest.ReportPercentiles(b, lat, time.Microsecond, "µs")
		})
	}
}

// BenchmarkColdLoad measures a node starting against a filled bucket: from
// Run to Ready (watch of every key, JSON decode, bulk build, swap). The
// bucket is filled beforehand with async publishes to $KV.sessions.<id>.
// heap-MB is the heap in use after GC with the index loaded minus before
// Run; it includes what the embedded NATS server in this process caches.
// The 1M case takes minutes to prepare and is skipped with -short.
func BenchmarkColdLoad(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			if n > 100_000 && testing.Short() {
				b.Skip("1M sessions: run without -short")
			}
			bs := startBus(b)
			createBucket(b, bs.JS)
			fill(b, bs.JS, n)
			for b.Loop() {
				h0 := heapInUse()
				x, err := sessions.New(sessions.Config{JetStream: bs.JS, Logger: testLogger(b)})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				t0 := time.Now()
				go func() { done <- x.Run(ctx) }()
				if err := x.WaitReady(context.Background()); err != nil {
					b.Fatal(err)
				}
				took := time.Since(t0)
				if got := x.Snapshot().Len(); got != n {
					b.Fatalf("loaded %d sessions, want %d", got, n)
				}
				b.StopTimer()
				h1 := heapInUse()
				b.ReportMetric(took.Seconds(), "load-s")
				b.ReportMetric(float64(n)/took.Seconds(), "sessions/s")
				b.ReportMetric(float64(h1-h0)/(1<<20), "heap-MB")
				runtime.KeepAlive(x)
				cancel()
				<-done
				b.StartTimer()
			}
		})
	}
}

// fill writes n sessions shaped like an operator's table (one IPv4 /32 or
// IPv6 /64 each, a username, 1 000 orgs) straight to the bucket's subjects.
func fill(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	r := rand.New(rand.NewPCG(7, uint64(n)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		var p netip.Prefix
		if i%2 == 0 {
			var a [4]byte
			binary.BigEndian.PutUint32(a[:], r.Uint32())
			p = netip.PrefixFrom(netip.AddrFrom4(a), 32)
		} else {
			var a [16]byte
			a[0], a[1] = 0x20, 0x01
			binary.BigEndian.PutUint64(a[2:10], r.Uint64())
			p = netip.PrefixFrom(netip.AddrFrom16(a), 64).Masked()
		}
		s := session.Session{
			ID: session.NewID(identity.Identity{Org: "org", Attributes: identity.Attributes{Location: fmt.Sprint(i)}}, p), Org: fmt.Sprintf("org-%03d", i%1000), Revision: 1,
			Allocations: []netip.Prefix{p}, Attributes: identity.Attributes{Username: fmt.Sprintf("user-%07d", i)}, UpdatedAt: t0.UTC(),
		}
		raw, err := json.Marshal(&s)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync("$KV."+session.Bucket+"."+s.ID, raw); err != nil {
			b.Fatal(err)
		}
		if i%2000 == 1999 { // stay under the client's limit of outstanding publishes
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				b.Fatal("publishes not acknowledged")
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("publishes not acknowledged")
	}
	b.Logf("filled %d sessions in %v", n, time.Since(t0).Round(time.Millisecond))
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkReconcile measures the post-resume reconcile on its own: listing
// every live key of the bucket (headers only) and comparing with the keys
// the model holds. Live updates wait during it. The model here is a plain
// key set, so the figure is the follower's own cost. The 1M case is skipped
// with -short.
func BenchmarkReconcile(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			if n > 100_000 && testing.Short() {
				b.Skip("1M sessions: run without -short")
			}
			bs := startBus(b)
			kv := createBucket(b, bs.JS)
			fill(b, bs.JS, n)
			keys := keySet{}
			f, err := readmodel.New(readmodel.Config[string]{
				Options: readmodel.Options{JetStream: bs.JS, Bucket: session.Bucket, Logger: testLogger(b)},
				Decode:  func(key string, _ []byte) (string, error) { return key, nil },
				Model:   keys,
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx) }()
			if err := f.WaitReady(ctx); err != nil {
				b.Fatal(err)
			}
			cancel() // the model is the Run goroutine's: the reconciles below run once it ended
			<-done
			for b.Loop() {
				if err := f.Reconcile(context.Background(), kv); err != nil {
					b.Fatal(err)
				}
			}
			if len(keys) != n {
				b.Fatalf("reconcile changed a converged model: %d keys, want %d", len(keys), n)
			}
		})
	}
}

// keySet is the smallest readmodel.Model: the keys alone.
type keySet map[string]struct{}

func (k keySet) Load(fill func(put func(string), del func(string)) error) (int, error) {
	err := fill(func(key string) { k[key] = struct{}{} }, func(key string) { delete(k, key) })
	return len(k), err
}

func (k keySet) Apply(puts, dels []string) int {
	for _, key := range puts {
		k[key] = struct{}{}
	}
	for _, key := range dels {
		delete(k, key)
	}
	return len(k)
}

func (k keySet) Keys(yield func(string) bool) {
	for key := range k {
		if !yield(key) {
			return
		}
	}
}
