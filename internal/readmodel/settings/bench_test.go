package settingsmodel_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// BenchmarkPutToVisible measures the time from a KV put of a settings
// document being sent (the deploy's side, including its acknowledged round
// trip) to the new document being visible in the layers the model hands
// out, with p50/p99 over all operations. "back-to-back" sends the next
// change as soon as the previous one is visible; "paced-50/s" sends one
// every 20 ms; "100k-orgs" is back-to-back with 100 000 other organisations
// in the model (one document each), to show that a change's cost does not
// grow with them.
func BenchmarkPutToVisible(b *testing.B) {
	for _, c := range []struct {
		name string
		gap  time.Duration
		orgs int
	}{{"back-to-back", 0, 0}, {"paced-50/s", 20 * time.Millisecond, 0}, {"100k-orgs", 0, 100_000}} {
		b.Run(c.name, func(b *testing.B) {
			bs := startBus(b)
			kv := createBucket(b, bs.JS)
			fill(b, bs.JS, c.orgs)
			putDoc(b, kv, keyOrg("acme"), `{"safe_search": true}`)
			r := startModel(b, bs.JS)
			r.waitReady(b)
			if got := r.m.Snapshot().Orgs(); got != c.orgs+1 {
				b.Fatalf("loaded %d organisations, want %d", got, c.orgs+1)
			}
			key := keyU("acme", "alice")
			alice := identity.Attributes{Username: "alice"}
			buf := make([]settings.Layer, 0, settings.MaxLayers)
			var lat []time.Duration
			ctx := context.Background()
			n := 0
			for b.Loop() {
				n++
				code := uint16(n)
				raw := (&settings.Document{BlockedCategories: &[]uint16{code}}).String()
				t0 := time.Now()
				if _, err := kv.Put(ctx, key, []byte(raw)); err != nil {
					b.Fatal(err)
				}
				for {
					ls := r.m.Snapshot().AppendLayers(buf[:0], "acme", alice, 0, false)
					if l := ls[len(ls)-1]; l.Name == "username:alice" && (*l.Doc.BlockedCategories)[0] == code {
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
			natstest.ReportPercentiles(b, lat, time.Millisecond, "ms")
		})
	}
}

// fill writes an org document for each of n organisations straight to the
// bucket's subjects.
func fill(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	if n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	for i := range n {
		raw := fmt.Sprintf(`{"blocked_categories":[%d],"profile":%d}`, i%500, i%4)
		if _, err := js.PublishAsync("$KV."+settings.Bucket+"."+keyOrg(fmt.Sprintf("org-%07d", i)), []byte(raw)); err != nil {
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
	b.Logf("filled %d organisations in %v", n, time.Since(t0).Round(time.Millisecond))
}
