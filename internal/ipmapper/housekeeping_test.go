package ipmapper

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
)

func TestTTLExpiryAndSweep(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	kv := kvOf(t, f.bus.nc)
	got, err := f.client.SetSession(ctx, session.Session{ID: "t", Org: "acme", Attributes: identity.Attributes{Username: "u"}}, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.ExpiresAt == nil || !got.ExpiresAt.Equal(f.clock.Now().Add(90*time.Second)) {
		t.Fatalf("expires_at = %v", got.ExpiresAt)
	}
	// ttl 0 keeps the expiry; a fresh ttl moves it.
	got, _ = f.client.SetSession(ctx, session.Session{ID: "t", Org: "acme", Attributes: identity.Attributes{Location: "l"}}, 0)
	if got.ExpiresAt == nil || !got.ExpiresAt.Equal(f.clock.Now().Add(90*time.Second)) {
		t.Fatalf("ttl 0 changed expires_at: %v", got.ExpiresAt)
	}
	f.clock.Advance(60 * time.Second)
	got, _ = f.client.SetSession(ctx, session.Session{ID: "t", Org: "acme"}, 90*time.Second)
	if !got.ExpiresAt.Equal(f.clock.Now().Add(90 * time.Second)) {
		t.Fatalf("refresh: expires_at = %v", got.ExpiresAt)
	}
	// A negative ttl removes the expiry; the session no longer expires.
	if _, err := f.client.SetSession(ctx, session.Session{ID: "forever", Org: "acme"}, time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ = f.client.SetSession(ctx, session.Session{ID: "forever", Org: "acme"}, -1)
	if got.ExpiresAt != nil {
		t.Fatalf("negative ttl kept expires_at %v", got.ExpiresAt)
	}

	f.clock.Advance(91 * time.Second)
	// Expired: gone for readers at once, still in the bucket until swept.
	if list, _ := f.client.GetSessions(ctx, mapperclient.Query{ID: "t"}); len(list) != 0 {
		t.Fatalf("expired session still answered: %+v", list)
	}
	if _, err := kv.Get(ctx, "t"); err != nil {
		t.Fatalf("expired session left the bucket before the sweep: %v", err)
	}
	n, err := f.svc.sweep()
	if err != nil || n != 1 {
		t.Fatalf("sweep removed %d, %v; want 1", n, err)
	}
	if _, err := kv.Get(ctx, "t"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("swept session still in the bucket: %v", err)
	}
	if list, _ := f.client.GetSessions(ctx, mapperclient.Query{Org: "acme"}); len(list) != 1 || list[0].ID != "forever" {
		t.Fatalf("after sweep: %+v", list)
	}
	if v := metricValue(f.svc.metrics.removedExpired); v != 1 {
		t.Fatalf("removed expired = %v", v)
	}
}

func TestSweeperRemovesExpiredSessionsOnItsOwn(t *testing.T) {
	f := startFixture(t, func(c *Config) {
		c.Clock = nil // real time
		c.SweepInterval = 20 * time.Millisecond
	})
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "short", Org: "a"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "long", Org: "a"}, 0); err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, f.bus.nc)
	eventually(t, "the sweeper to delete the expired key", func() bool {
		_, err := kv.Get(ctx, "short")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := kv.Get(ctx, "long"); err != nil {
		t.Fatalf("sweeper removed a session without expiry: %v", err)
	}
}

// TestReconcileDropsInvalidBucketValue: when a failed write re-reads its
// key and finds a value no node accepts, the table drops the session, as
// every node did.
func TestReconcileDropsInvalidBucketValue(t *testing.T) {
	ctx := ctxT(t)
	f := startSmallValueFixture(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := kvOf(t, f.bus.nc).Put(ctx, "k", []byte(`{"id":"k","org":"a","allocations":["::ffff:10.0.0.0/104"]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: strings.Repeat("u", 400)}}, 0); err == nil {
		t.Fatal("oversized write accepted")
	}
	if list, _ := f.client.GetSessions(ctx, mapperclient.Query{ID: "k"}); len(list) != 0 {
		t.Fatalf("session whose bucket value is invalid still in the table: %+v", list)
	}
}

// markersIn lists the bucket's delete markers by key.
func markersIn(t *testing.T, f *fixture) map[string]marker {
	t.Helper()
	ms, err := f.svc.store.deleteMarkers(ctxT(t), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]marker, len(ms))
	for _, m := range ms {
		out[m.key] = m
	}
	return out
}

func streamLastSeq(t *testing.T, f *fixture) (last, msgs uint64) {
	t.Helper()
	st, err := kvOf(t, f.bus.nc).Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	return info.State.LastSeq, info.State.Msgs
}

func TestPurgeDeletesRemovesOldMarkersOnly(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "d1", Org: "a"}, {ID: "d2", Org: "a"}, {ID: "keep", Org: "a"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2"} {
		if _, err := f.client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{id}}); err != nil {
			t.Fatal(err)
		}
	}
	kv := kvOf(t, f.bus.nc)
	// The cutoff is d2's marker time: d1's marker is older, d2's is not.
	h, err := kv.History(ctx, "d2")
	if err != nil || len(h) != 1 || h[0].Operation() != jetstream.KeyValueDelete {
		t.Fatalf("d2 history %v, %v", h, err)
	}
	n, err := f.svc.purgeDeletes(h[0].Created())
	if err != nil || n != 1 {
		t.Fatalf("purged %d, %v; want 1", n, err)
	}
	if _, err := kv.History(ctx, "d1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("old marker d1 still in the bucket: %v", err)
	}
	if ms := markersIn(t, f); len(ms) != 1 || ms["d2"].key != "d2" {
		t.Fatalf("markers left: %+v, want d2's", ms)
	}

	// Purging the stream's last message (d2's marker) does not move the
	// stream's last sequence back: the node-side subscriber treats a last
	// sequence below what it applied as a recreated bucket.
	lastBefore, _ := streamLastSeq(t, f)
	if n, err := f.svc.purgeDeletes(time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("purged %d, %v; want 1", n, err)
	}
	last, msgs := streamLastSeq(t, f)
	if last != lastBefore || msgs != 1 {
		t.Fatalf("after purging every marker: last seq %d (was %d), %d messages; want %d and 1", last, lastBefore, msgs, lastBefore)
	}
	if _, err := kv.Get(ctx, "keep"); err != nil {
		t.Fatalf("live session lost in a purge: %v", err)
	}
	if list, _ := f.client.GetSessions(ctx, mapperclient.Query{Org: "a"}); len(list) != 1 || list[0].ID != "keep" {
		t.Fatalf("table after purge: %+v", list)
	}
	if v := metricValue(f.svc.metrics.markersPurged); v != 2 {
		t.Fatalf("markers purged = %v, want 2", v)
	}
}

func TestPurgeLoopRemovesMarkersOnItsOwn(t *testing.T) {
	f := startFixture(t, func(c *Config) { c.PurgeDeletesAfter = 50 * time.Millisecond })
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "gone", Org: "a"}, {ID: "kept", Org: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{"gone"}}); err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, f.bus.nc)
	eventually(t, "the purger to remove the marker", func() bool {
		_, err := kv.History(ctx, "gone")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := kv.Get(ctx, "kept"); err != nil {
		t.Fatalf("purger removed a live session: %v", err)
	}
	if err := f.svc.Stop(); err != nil { // returns only once the loops are done
		t.Fatal(err)
	}
}
