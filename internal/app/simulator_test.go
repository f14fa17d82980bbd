package app

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestSimulatorTestAndExit: --test-and-exit runs one lookup_domain through
// a worker and returns its error; a script that fails it fails the run.
func TestSimulatorTestAndExit(t *testing.T) {
	cfg := DefaultSimulatorConfig()
	if err := RunSimulator(context.Background(), cfg, "test", slog.New(slog.DiscardHandler), true); err != nil {
		t.Fatalf("embedded entry file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "entry.lua")
	if err := os.WriteFile(bad, []byte(`function lookup_domain(req) error("no lookups here") end`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Lua.File = bad
	err := RunSimulator(context.Background(), cfg, "test", slog.New(slog.DiscardHandler), true)
	if err == nil || !strings.Contains(err.Error(), "no lookups here") {
		t.Fatalf("failing script: %v", err)
	}
	cfg.Lua.File = filepath.Join(t.TempDir(), "missing.lua")
	if err := RunSimulator(context.Background(), cfg, "test", slog.New(slog.DiscardHandler), false); err == nil {
		t.Fatal("a missing entry file started the simulator")
	}
}

// TestSimulatorNATSEnabledLine: standalone, the log line "NATS enabled"
// appears exactly when a NATS url is configured (spec 2).
func TestSimulatorNATSEnabledLine(t *testing.T) {
	bus := natstest.Start(t)
	for _, withNATS := range []bool{false, true} {
		cfg := DefaultSimulatorConfig()
		cfg.HTTP.Address = "127.0.0.1:0"
		if withNATS {
			cfg.NATS.URL = bus.Srv.ClientURL()
		}
		t.Setenv("NATS_URL", "")
		var logs bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		err := RunSimulator(ctx, cfg, "test", slog.New(slog.NewTextHandler(&logs, nil)), false)
		cancel()
		if err != nil {
			t.Fatalf("nats %v: %v", withNATS, err)
		}
		if got := strings.Contains(logs.String(), "NATS enabled"); got != withNATS {
			t.Fatalf("nats %v: 'NATS enabled' logged %v:\n%s", withNATS, got, logs.String())
		}
	}
}
