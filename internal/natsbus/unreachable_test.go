package natsbus_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestUnreachableNamesServer: a publish on a connection that is not
// connected fails with nats.go's "outbound buffer limit exceeded"
// (Connect sets no reconnect buffer); Unreachable says which server is
// unreachable and what waits for it, still wrapping the error. Other
// errors and nil pass unchanged.
func TestUnreachableNamesServer(t *testing.T) {
	nc, url := natstest.Unreachable(t)
	err := natsbus.Unreachable(nc, nc.Publish("x", nil), "publish x")
	want := "NATS at " + url + " unreachable; waiting to reconnect to publish x: nats: outbound buffer limit exceeded"
	if err == nil || err.Error() != want || !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("got %v, want %q", err, want)
	}
	other := errors.New("refused")
	if got := natsbus.Unreachable(nc, other, "publish x"); got != other {
		t.Fatalf("another error became %v", got)
	}
	if got := natsbus.Unreachable(nc, nil, "publish x"); got != nil {
		t.Fatalf("nil became %v", got)
	}
}

// TestNotConnectedNamesServer: on a connection that never reached its
// server, NotConnected names the server and the state, and every call of
// a KV fails at once with "NATS unreachable: " and that; on a connected
// one it is nil and the KV works.
func TestNotConnectedNamesServer(t *testing.T) {
	nc, url := natstest.Unreachable(t)
	want := "not connected to NATS at " + url + " (connecting)"
	if err := natsbus.NotConnected(nc); err == nil || err.Error() != want {
		t.Fatalf("NotConnected = %v, want %q", err, want)
	}
	kv, err := natsbus.NewKV(nc, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, kerr := kv.Keys(ctx, ">")
	for name, err := range map[string]error{"put": kv.Put(ctx, "k", []byte("v")), "delete": kv.Delete(ctx, "k"), "keys": kerr} {
		if err == nil || err.Error() != "NATS unreachable: "+want {
			t.Errorf("%s: %v, want %q", name, err, "NATS unreachable: "+want)
		}
	}

	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	up, err := natsbus.Connect(srv.ClientURL(), "test", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if err := natsbus.NotConnected(up); err != nil {
		t.Fatalf("connected: %v", err)
	}
	if kv, err = natsbus.NewKV(up, jetstream.KeyValueConfig{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put on a connected KV: %v", err)
	}
	if keys, err := kv.Keys(ctx, ">"); err != nil || strings.Join(keys, ",") != "k" {
		t.Fatalf("keys: %v %v", keys, err)
	}
}
