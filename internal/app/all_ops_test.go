package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/filelock"
)

// TestAllLocksTheDataDirectory: a second `svc-pf all` on the data
// directory of a running one is refused with an error naming the holder's
// pid, and starts once the first has stopped. Both run in this one test
// process: flock is per open file description, so the second open
// conflicts exactly as another process's would (checked in filelock too).
func TestAllLocksTheDataDirectory(t *testing.T) {
	cfg := testAllConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	first, err := StartAll(ctx, cfg, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()

	second := cfg
	second.NATS.StoreDir = filepath.Join(t.TempDir(), "nats") // only the data directory is shared
	_, err = StartAll(context.Background(), second, "test", slog.New(slog.DiscardHandler))
	if !errors.Is(err, filelock.ErrLocked) {
		t.Fatalf("second svc-pf all on one data directory: %v, want a lock error", err)
	}
	for _, want := range []string{"data directory " + cfg.DataDir, "pid " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// Another data directory over the same JetStream store: refused too.
	third := cfg
	third.DataDir = t.TempDir()
	third.NATS.StoreDir = filepath.Join(cfg.DataDir, "nats")
	if _, err := StartAll(context.Background(), third, "test", slog.New(slog.DiscardHandler)); !errors.Is(err, filelock.ErrLocked) ||
		!strings.Contains(err.Error(), "JetStream store directory") {
		t.Fatalf("second embedded NATS on one store: %v, want a lock error", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first Run: %v", err)
	}
	// Released at stop: the directory is usable again.
	startAll(t, cfg)
}

// TestAllRefusesOrgManagerOnAnotherNATS: the orgmanager deploys to
// whichever IP Mapper answers on its NATS, so under `svc-pf all` its
// nats.url must be the IP Mapper's; otherwise nothing starts.
func TestAllRefusesOrgManagerOnAnotherNATS(t *testing.T) {
	for _, tt := range []struct {
		name         string
		om, im       string
		wantRefusal  bool
		listenForOwn bool
	}{
		{name: "orgmanager elsewhere", om: "nats://127.0.0.1:1", wantRefusal: true},
		{name: "ipmapper elsewhere", im: "nats://127.0.0.1:1", wantRefusal: true},
		{name: "both on the embedded server, spelt out", om: "127.0.0.1:4223", im: "nats://127.0.0.1:4223", listenForOwn: true},
		{name: "both unset"},
		{name: "both on one other server", om: "nats://127.0.0.1:1", im: "nats://127.0.0.1:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testAllConfig(t)
			if tt.listenForOwn {
				cfg.NATS.Listen = "127.0.0.1:4223"
			}
			cfg.OrgManager.NATS.URL, cfg.IPMapper.NATS.URL = tt.om, tt.im
			err := cfg.Validate()
			refused := err != nil && strings.Contains(err.Error(), "orgmanager.nats.url") &&
				strings.Contains(err.Error(), "must reach its own IP Mapper")
			if refused != tt.wantRefusal {
				t.Fatalf("Validate: %v; want refusal %v", err, tt.wantRefusal)
			}
			if tt.wantRefusal {
				if _, err := StartAll(context.Background(), cfg, "test", slog.New(slog.DiscardHandler)); err == nil {
					t.Fatal("StartAll started")
				}
			}
		})
	}
}
