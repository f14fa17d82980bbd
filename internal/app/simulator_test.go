package app

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
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
// appears exactly when a NATS url is configured (docs/simulator.md, Running
// it).
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

// TestParseByteSize: GOMEMLIMIT's syntax, powers of 1024, and its errors.
func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1234": 1234, "512B": 512, "64KiB": 64 << 10, "2500MiB": 2500 << 20,
		"3GiB": 3 << 30, "1TiB": 1 << 40, "8388607TiB": 8388607 << 40,
	} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "3 GiB", "3GB", "3gib", "-1", "1.5GiB", "8388608TiB", "99999999999999999999"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

// FuzzParseByteSize: no input panics, and an accepted one is a
// non-negative count that the number and unit give exactly.
func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"0", "3GiB", "512B", "1TiB", "8388608TiB", "x", "-1MiB", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseByteSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("%q: negative %d", s, n)
		}
		num := strings.TrimRight(s, "BKMGTi")
		unit := s[len(num):]
		v, perr := strconv.ParseInt(num, 10, 64)
		shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[unit]
		if perr != nil || v<<shift != n || v>>(63-shift) != 0 {
			t.Fatalf("%q: got %d from %q %q", s, n, num, unit)
		}
	})
}

// TestSimulatorRuntimeConfig: the runtime section's validation, and that a
// started simulator applies it to the process (restored afterwards).
func TestSimulatorRuntimeConfig(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	for _, c := range []struct {
		rt RuntimeConfig
		ok bool
	}{
		{RuntimeConfig{}, true},
		{RuntimeConfig{GOMAXPROCS: 4, GCPercent: 400}, true},
		{RuntimeConfig{GCPercent: -1, MemoryLimit: "2GiB"}, true},
		{RuntimeConfig{GCPercent: -1}, false},
		{RuntimeConfig{GCPercent: -2}, false},
		{RuntimeConfig{GOMAXPROCS: -1}, false},
		{RuntimeConfig{MemoryLimit: "2 GB"}, false},
	} {
		cfg := DefaultSimulatorConfig()
		cfg.Runtime = c.rt
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", c.rt, err, c.ok)
		}
	}

	prevProcs := runtime.GOMAXPROCS(0)
	prevPct := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		runtime.GOMAXPROCS(prevProcs)
		debug.SetGCPercent(prevPct)
		debug.SetMemoryLimit(prevLimit)
	})
	cfg := DefaultSimulatorConfig()
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Runtime = RuntimeConfig{GOMAXPROCS: prevProcs + 1, GCPercent: 300, MemoryLimit: "3GiB"}
	t.Setenv("NATS_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := RunSimulator(ctx, cfg, "test", slog.New(slog.DiscardHandler), false); err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != prevProcs+1 {
		t.Errorf("GOMAXPROCS %d after the simulator started, want %d", got, prevProcs+1)
	}
	if got := debug.SetGCPercent(100); got != 300 {
		t.Errorf("GC percent %d after the simulator started, want 300", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != 3<<30 {
		t.Errorf("memory limit %d after the simulator started, want %d", got, int64(3<<30))
	}
}
