package ipmapper

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionsnap"
)

// TestPeriodicSnapshot: the active IP Mapper writes the snapshot every
// SnapshotInterval, covering the stream's last sequence, with the values
// as the bucket holds them; a later one covers later writes.
func TestPeriodicSnapshot(t *testing.T) {
	f := startFixture(t, func(c *Config) { c.SnapshotInterval = 100 * time.Millisecond })
	ctx := ctxT(t)
	js, err := jetstream.New(f.bus.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, f.bus.nc)
	read := func() (sessionsnap.Meta, map[string]string) {
		snap, err := sessionsnap.Open(ctx, js, session.Bucket)
		if err != nil {
			return sessionsnap.Meta{}, nil
		}
		defer func() { _ = snap.Close() }()
		recs := map[string]string{}
		for {
			k, v, err := snap.Next()
			if errors.Is(err, io.EOF) {
				return snap.Meta, recs
			}
			if err != nil {
				t.Fatal(err)
			}
			recs[k] = string(v)
		}
	}
	for i := range 3 {
		if _, err := f.client.SetSession(ctx, mkSession(i, "acme"), 0); err != nil {
			t.Fatal(err)
		}
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	var meta sessionsnap.Meta
	var recs map[string]string
	eventually(t, "a snapshot of the three sessions", func() bool {
		meta, recs = read()
		return meta.Sequence == last && len(recs) == 3
	})
	for k, v := range recs {
		e, err := kv.Get(ctx, k)
		if err != nil || string(e.Value()) != v {
			t.Fatalf("%s: the snapshot holds %s, the bucket %v", k, v, err)
		}
	}
	if meta.ValidFor != defaultPurgeDeletesAfter {
		t.Fatalf("valid for %s, want PurgeDeletesAfter %s", meta.ValidFor, defaultPurgeDeletesAfter)
	}
	if _, err := f.client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{mkSession(0, "acme").ID}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a snapshot without the removed session", func() bool {
		meta, recs = read()
		return meta.Sequence == last+1 && len(recs) == 2
	})
}
