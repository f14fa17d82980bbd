package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/session"
)

// TestReloadSkipsInvalidSessions: values session.Validate refuses (which
// every node skips too) are skipped at load, counted, and left in the
// bucket.
func TestReloadSkipsInvalidSessions(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: session.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		"good":     `{"id":"good","org":"o","allocations":["10.9.0.0/16"]}`,
		"mapped":   `{"id":"mapped","org":"o","allocations":["::ffff:10.0.0.0/104"]}`,
		"hostbits": `{"id":"hostbits","org":"o","allocations":["10.1.0.1/16"]}`,
		"noorg":    `{"id":"noorg","org":"","allocations":["10.2.0.0/16"]}`,
		"otherkey": `{"id":"good","org":"o"}`,
	} {
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	f := startFixtureOn(t, b, nil)
	if v := metricValue(f.svc.metrics.loadSkipped); v != 4 {
		t.Fatalf("load skipped %v, want 4", v)
	}
	list, err := f.client.GetSessions(ctx, mapperclient.Query{Org: "o"})
	if err != nil || len(list) != 1 || list[0].ID != "good" {
		t.Fatalf("table after load: %+v, %v", list, err)
	}
	for _, ip := range []string{"10.0.0.1", "10.1.0.1", "10.2.0.1"} {
		if list, _ := f.client.GetSessions(ctx, mapperclient.Query{IP: netip.MustParseAddr(ip)}); len(list) != 0 {
			t.Errorf("%s answered by a skipped value: %+v", ip, list)
		}
	}
	for _, key := range []string{"mapped", "hostbits", "noorg", "otherkey"} {
		if _, err := kv.Get(ctx, key); err != nil {
			t.Errorf("skipped value %s not left in the bucket: %v", key, err)
		}
	}
}

// TestWriteDuringDisconnectFailsAndNeverLands: a set-session while NATS is
// away fails, and nothing of it reaches the bucket once NATS is back (the
// connection keeps no reconnect buffer to flush it later).
func TestWriteDuringDisconnectFailsAndNeverLands(t *testing.T) {
	b := startBus(t)
	f := startFixtureOn(t, b, func(c *Config) { c.WriteTimeout = 2 * time.Second })
	ctx := ctxT(t)
	port := b.srv.Port()
	b.srv.Shutdown()
	eventually(t, "the client to notice the outage", func() bool { return b.nc.Status() != nats.CONNECTED })

	body, _ := json.Marshal(wire.SetSessionRequest{Session: session.Session{ID: "late", Org: "a"}})
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, _, err := f.svc.setSession(wctx, body); err == nil || !strings.Contains(err.Error(), "store session late") {
		t.Fatalf("set-session while NATS is down: %v, want a store error", err)
	}

	srv, err := natsbusRestart(b.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	eventually(t, "the IP Mapper to answer again", func() bool {
		_, err := f.client.SetSession(ctx, session.Session{ID: "after", Org: "a"}, 0)
		return err == nil
	})
	// "after" went through the same connection later, so a buffered "late"
	// would be in the bucket by now.
	if _, err := kvOf(t, b.nc).Get(ctx, "late"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("write that failed during the outage is in the bucket: %v", err)
	}
	if list, _ := f.client.GetSessions(ctx, mapperclient.Query{ID: "late"}); len(list) != 0 {
		t.Fatalf("failed write in the table: %+v", list)
	}
}

// TestPurgeKeepsAWriteAfterTheMarker stages the race a purge must survive:
// a key is written again between the listing of its marker and its purge.
func TestPurgeKeepsAWriteAfterTheMarker(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: "first"}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	listed, err := f.svc.store.deleteMarkers(ctx, time.Now().Add(time.Hour))
	if err != nil || len(listed) != 1 || listed[0].key != "k" {
		t.Fatalf("markers %+v, %v", listed, err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: "again"}}, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := f.svc.store.purgeMarkers(ctx, listed); err != nil || n != 1 {
		t.Fatalf("purged %d, %v", n, err)
	}
	e, err := kvOf(t, f.bus.nc).Get(ctx, "k")
	if err != nil {
		t.Fatalf("write after the marker lost by the purge: %v", err)
	}
	var s session.Session
	if err := json.Unmarshal(e.Value(), &s); err != nil || s.Username != "again" {
		t.Fatalf("bucket holds %s, %v", e.Value(), err)
	}
}
