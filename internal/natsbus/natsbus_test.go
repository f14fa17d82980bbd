package natsbus

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// serverWithBucket starts an embedded server storing under dir and returns
// it with a client (closed when the test ends) and a bucket "t". The caller
// shuts the server down.
func serverWithBucket(t *testing.T, dir string) (*Embedded, *nats.Conn, nats.KeyValue) {
	t.Helper()
	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Connect(srv.ClientURL(), "test", nil, false)
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return srv, nc, kv
}

func TestEmbeddedRestartKeepsJetStreamState(t *testing.T) {
	dir := t.TempDir()
	srv, _, kv := serverWithBucket(t, dir)
	if _, err := kv.Put("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	port := srv.Port()
	srv.Shutdown()

	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	// The client reconnects on its own to the same address.
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err := kv.Get("k")
		if err == nil {
			if string(e.Value()) != "v" {
				t.Fatalf("value after restart = %q", e.Value())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key not readable after restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPublishDuringDisconnectFailsAndNeverLands checks that a publish made
// while the server is away fails at once and is not sent after the
// reconnect: a write reported as failed must not land later.
func TestPublishDuringDisconnectFailsAndNeverLands(t *testing.T) {
	dir := t.TempDir()
	srv, nc, kv := serverWithBucket(t, dir)
	port := srv.Port()
	srv.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for nc.Status() == nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatal("client did not notice the server going away")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The raw KV subject, as the IP Mapper's asynchronous writes use it.
	if err := nc.Publish("$KV.t.late", []byte("v")); !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("publish while disconnected: %v, want ErrReconnectBufExceeded", err)
	}

	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	deadline = time.Now().Add(10 * time.Second)
	for nc.Status() != nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatal("client did not reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Whatever was buffered would have been sent before this round trip.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put("after", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get("late"); !errors.Is(err, nats.ErrKeyNotFound) {
		t.Fatalf("publish refused during the disconnect landed after it: %v, %v", e, err)
	}
}

// TestBusyPortFailsAtOnce: a port another process holds is refused at
// once, naming the address, rather than after the readiness wait.
func TestBusyPortFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	start := time.Now()
	_, err = StartEmbedded(EmbeddedConfig{StoreDir: t.TempDir(), Port: port})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Fatalf("StartEmbedded on a busy port = %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the refusal took %v", took)
	}
}
