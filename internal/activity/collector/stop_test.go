package collector_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/collector"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestStopWhileDeclaringLogsNoWarning: a collector stopped while it
// declares its stream and consumer returns without a warning: the stop is
// not a stream an operator must look at (svc-pf all stopped right after
// it started logged one).
func TestStopWhileDeclaringLogsNoWarning(t *testing.T) {
	bus := natstest.Start(t)
	s, err := store.Open(context.Background(), store.Config{URL: "dir:" + filepath.Join(t.TempDir(), "a")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var logs bytes.Buffer
	c, err := collector.New(collector.Config{JS: bus.JS, Activity: activity.DefaultConfig(), Store: s,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if out := logs.String(); strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
		t.Fatalf("a stop logged a warning:\n%s", out)
	}
}
