package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestNATSRestartDuringWrites: the whole bus goes away while the REST API
// keeps taking writes; once NATS is back on the same address and store,
// deploys, the IP Mapper and the node's index all converge.
func TestNATSRestartDuringWrites(t *testing.T) {
	p := newPlatform(t, storetest.URL(t, storetest.SQLite))
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/24"}}, 200)
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/26", "username": "before"}, 200)
	p.expectIndex("acme", "[10.0.0.0/26]|before||", "[10.0.0.0/24]|||")

	port, dir := p.nats.Port(), p.natsDir
	p.nats.Shutdown()
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/26", "username": "during"}, 200)
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.128/25", "username": "added"}, 200)
	time.Sleep(200 * time.Millisecond)

	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	p.nats = srv
	p.expectIndex("acme", "[10.0.0.0/26]|during||", "[10.0.0.0/24]|||", "[10.0.0.128/25]|added||")
	p.waitSettled("acme")
}

// TestIPMapperHealthWaitsForLoad: /health says 503 until the IP Mapper
// has loaded its sessions, which needs NATS; it turns 200 once NATS is up.
func TestIPMapperHealthWaitsForLoad(t *testing.T) {
	dir := t.TempDir()
	first, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	port, url := first.Port(), first.ClientURL()
	first.Shutdown() // the port is known; nothing listens on it now

	nc := connectNATS(t, url, "ipmapper", nil, true)
	cfg := DefaultIPMapperConfig()
	testMapperAuth(t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	m, err := StartIPMapper(cfg, nc, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	health := func() (int, map[string]any) {
		resp, err := http.Get("http://" + m.Addr().String() + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if code, body := health(); code != 503 || body["status"] != "unavailable" {
		t.Fatalf("health without NATS: %d %v", code, body)
	}
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if code, _ := health(); code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("IP Mapper never became ready after NATS came up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMinimalOrgManagerConfig: a file with only http.address and
// database.url is a complete configuration.
func TestMinimalOrgManagerConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orgmanager.yaml")
	db := filepath.Join(dir, "om.db")
	if err := os.WriteFile(path, []byte("http:\n  address: 127.0.0.1:0\ndatabase:\n  url: sqlite:"+db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultOrgManagerConfig()
	withTestToken(t, &cfg)
	if err := config.Load(path, true, &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	om, err := StartOrgManager(ctx, cfg, nil, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- om.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	p := &platform{t: t, base: "http://" + om.Addr().String()}
	p.call("PUT", "/org/acme", nil, 200)
	p.waitSettled("acme")
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("database not where configured: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	om := DefaultOrgManagerConfig()
	om.Deploy.Workers = 0
	om.Database.URL = ""
	om.Log.Level = "loud"
	err := om.Validate()
	for _, want := range []string{"deploy.workers", "database.url", "log.level"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("orgmanager Validate() = %v, want it to name %s", err, want)
		}
	}
	im := DefaultIPMapperConfig()
	if err := im.Validate(true); err == nil || !strings.Contains(err.Error(), "nats.url is required") {
		t.Errorf("standalone ipmapper without nats.url: %v", err)
	}
	all := DefaultAllConfig()
	if err := all.Validate(); err != nil {
		t.Errorf("default all config: %v", err)
	}
}
