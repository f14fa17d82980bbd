package natsbus_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestEmbeddedHealsAfterDiskFull fills the file system under the store for
// real (a 4 MiB tmpfs; skipped where mounting is not allowed): nats-server
// keeps the first "no space left on device" on the stream and refuses
// every later write, silently, also after the space is freed. The embedded
// server must see the error (StoreError) and, once space is free, restart
// JetStream so that writes succeed again without a process restart.
func TestEmbeddedHealsAfterDiskFull(t *testing.T) {
	dir := natstest.Tmpfs(t, "4m")

	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir, HealInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsbus.Connect(srv.ClientURL(), "test", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "t", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := kv.Put(ctx, key, make([]byte, 1000))
		return err
	}
	if err := put("before"); err != nil {
		t.Fatal(err)
	}
	if srv.StoreError() != nil {
		t.Fatalf("store error before the disk is full: %v", srv.StoreError())
	}

	// Fill the disk beside the store, then write until the store fails.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	_ = f.Close()
	failed := false
	for i := 0; i < 10000 && !failed; i++ {
		failed = put("k"+strconv.Itoa(i)) != nil
	}
	if !failed {
		t.Fatal("writes never failed on a full disk")
	}
	if srv.StoreError() == nil {
		t.Fatal("StoreError is nil while the store is failing writes")
	}

	// Free the space: writes must come back by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for put("after") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("writes still fail 30s after the disk was freed; StoreError: %v", srv.StoreError())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := srv.StoreError(); err != nil {
		t.Fatalf("StoreError after recovery: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if e, err := kv.Get(ctx, "before"); err != nil || len(e.Value()) != 1000 {
		t.Fatalf("value written before the outage: %v", err)
	}
}
