package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// syncBuffer is a log sink safe for the services' goroutines.
type syncBuffer = natstest.LogBuffer

// TestCleanShutdownLog: stopping `svc-pf all` logs that it stopped, and
// no warning: closing its own NATS connections is not a disconnect an
// operator must look at.
func TestCleanShutdownLog(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- RunAll(ctx, testAllConfig(t), "test", log) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "ipmapper ready") {
		if time.Now().After(deadline) {
			t.Fatalf("not ready:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunAll: %v", err)
	}
	out := logs.String()
	if strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
		t.Errorf("a clean shutdown logged a warning or an error:\n%s", out)
	}
	if !strings.Contains(out, `msg="svc-pf all stopped"`) {
		t.Errorf("no stopped line:\n%s", out)
	}
}
