package natsbus

import (
	"github.com/nats-io/nats.go"
	"testing"
	"time"
)

func TestEmbeddedRestartKeepsJetStreamState(t *testing.T) {
	dir := t.TempDir()
	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Connect(srv.ClientURL(), "test", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	port := srv.Port()
	srv.Shutdown()

	srv, err = StartEmbedded(EmbeddedConfig{StoreDir: dir, Port: port})
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
