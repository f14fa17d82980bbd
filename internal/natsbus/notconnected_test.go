package natsbus

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestNotConnectedNamesServer: on a connection that never reached its
// server, NotConnected names the server and the state, and every call of
// a KV fails at once with "NATS unreachable: " and that; on a connected
// one it is nil and the KV works.
func TestNotConnectedNamesServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	_ = l.Close() // nothing listens there now
	nc, err := Connect(url, "test", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	want := "not connected to NATS at " + url + " (connecting)"
	if err := NotConnected(nc); err == nil || err.Error() != want {
		t.Fatalf("NotConnected = %v, want %q", err, want)
	}
	kv, err := NewKV(nc, jetstream.KeyValueConfig{Bucket: "b"})
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

	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	up, err := Connect(srv.ClientURL(), "test", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if err := NotConnected(up); err != nil {
		t.Fatalf("connected: %v", err)
	}
	if kv, err = NewKV(up, jetstream.KeyValueConfig{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put on a connected KV: %v", err)
	}
	if keys, err := kv.Keys(ctx, ">"); err != nil || strings.Join(keys, ",") != "k" {
		t.Fatalf("keys: %v %v", keys, err)
	}
}
