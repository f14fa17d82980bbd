package app

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestAllHealthSaysTheNATSStoreFails: under `svc-pf all`, a JetStream
// store on a full disk (a real 8 MiB tmpfs filled up; skipped where
// mounting is not allowed) stops the platform's writes, which nats-server
// then only lets time out. The IP Mapper's /health must say so: 503
// "NATS store failing writes (disk full?)". Once space is free the embedded
// server restarts JetStream and /health is 200 again, with no restart.
func TestAllHealthSaysTheNATSStoreFails(t *testing.T) {
	dir := natstest.Tmpfs(t, "8m")
	cfg := testAllConfig(t)
	cfg.NATS.StoreDir = filepath.Join(dir, "nats")
	all := startAll(t, cfg)
	health := "http://" + all.IPMapper.Addr().String() + "/health"

	nc := connectNATS(t, all.NATS.ClientURL(), "t", nil, false)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "filler", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := kv.Put(ctx, key, make([]byte, 1000))
		return err
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
	code, body := httpGet(t, health)
	if code != 503 || !strings.Contains(body, "NATS store failing writes (disk full?)") {
		t.Fatalf("/health while the store fails writes: %d %s", code, body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "/health 200 after the disk was freed", func() (bool, string) {
		code, body := httpGet(t, health)
		return code == 200, strconv.Itoa(code) + " " + body
	})
}
