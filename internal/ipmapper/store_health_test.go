package ipmapper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// fillStore starts an embedded server whose JetStream may store maxStore
// bytes, and fills its quota with a stream "FILLER" (other data on the
// disk, as far as the sessions bucket can tell). Deleting that stream
// frees the space.
func fillStore(t *testing.T, maxStore int64) (*bus, jetstream.JetStream) {
	t.Helper()
	dir := t.TempDir()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir, MaxStore: maxStore})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsbus.Connect(srv.ClientURL(), "ipmapper-test", nil, false)
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); srv.Shutdown() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &bus{srv: srv, nc: nc, dir: dir}, js
}

func fill(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "filler", make([]byte, 4096)); err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				return // quota reached
			}
			t.Fatal(err)
		}
		if i > 100000 {
			t.Fatal("the store never filled")
		}
	}
}

// TestWriteErrorWhileStoreFull: JetStream's storage used up, writes fail
// and the service says so (what the IP Mapper's /health shows); once space
// is freed, the next write goes through and the report clears, without a
// restart. A write refused for its own size is not a store failure.
func TestWriteErrorWhileStoreFull(t *testing.T) {
	b, js := fillStore(t, 512<<10)
	f := startFixtureOn(t, b, func(c *Config) { c.WriteTimeout = 2 * time.Second })
	if _, err := f.client.SetSession(ctxT(t), mkSession(1, "acme"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.WriteError(); err != nil {
		t.Fatalf("WriteError after a stored write: %v", err)
	}

	fill(t, js)
	if _, err := f.client.SetSession(ctxT(t), mkSession(2, "acme"), 0); err == nil {
		t.Fatal("set-session stored on a full store")
	}
	werr := f.svc.WriteError()
	if werr == nil || !strings.Contains(werr.Error(), "failing since") || !strings.Contains(werr.Error(), "insufficient resources") {
		t.Fatalf("WriteError while the store is full: %v", werr)
	}
	// Still failing on a later write: the run keeps its start.
	if _, err := f.client.SetSession(ctxT(t), mkSession(3, "acme"), 0); err == nil {
		t.Fatal("set-session stored on a full store")
	}
	if f.svc.WriteError() == nil {
		t.Fatal("WriteError cleared while writes still fail")
	}

	// Space freed: the next write is stored and the report clears.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, "FILLER"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctxT(t), mkSession(2, "acme"), 0); err != nil {
		t.Fatalf("set-session after space was freed: %v", err)
	}
	if err := f.svc.WriteError(); err != nil {
		t.Fatalf("WriteError after a stored write: %v", err)
	}
	if got, err := f.client.GetSessions(ctxT(t), mapperclient.Query{Org: "acme"}); err != nil || len(got) != 2 {
		t.Fatalf("sessions after recovery: %d, %v; want 2", len(got), err)
	}
}

// TestWriteErrorIgnoresOversizedValue: a session the bucket refuses for its
// size fails alone; the store is fine and WriteError stays nil.
func TestWriteErrorIgnoresOversizedValue(t *testing.T) {
	f := startSmallValueFixture(t)
	big := mkSession(1, "acme")
	big.Attributes.Location = strings.Repeat("x", 400)
	if _, err := f.client.SetSession(ctxT(t), big, 0); err == nil {
		t.Fatal("oversized session stored")
	}
	if err := f.svc.WriteError(); err != nil {
		t.Fatalf("WriteError after a per-message refusal: %v", err)
	}
}
