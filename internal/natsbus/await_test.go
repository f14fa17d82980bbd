package natsbus

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuf is a log destination written by the watch while the test reads.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAwait: on a connection whose server is not up, Err names the URL
// as given and what to check, the log says "waiting for NATS" once and
// then "still waiting" every LogEvery (not at every attempt), and
// WaitConnected waits; once a server listens on that port, Done closes,
// Err is nil, the log says "NATS connected", and WaitConnected returns
// nil at once. Bad configurations are refused.
func TestAwait(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	url := "nats://" + l.Addr().String()
	nc, err := Connect(url, "await test", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	if _, err := NewAwait(context.Background(), AwaitConfig{Conn: nc}); err == nil {
		t.Fatal("an Await without its URL was accepted")
	}
	if _, err := NewAwait(context.Background(), AwaitConfig{Conn: nc, URL: url, LogEvery: -time.Second}); err == nil {
		t.Fatal("a negative LogEvery was accepted")
	}
	var nilAwait *Await
	if nilAwait.Err() != nil {
		t.Fatal("a nil Await (no NATS) is not ready")
	}

	var logs syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shown := "nats://user:***@" + l.Addr().String()
	started := time.Now()
	a, err := NewAwait(ctx, AwaitConfig{Conn: nc, URL: shown, LogEvery: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Err()
	if err == nil || !strings.HasPrefix(err.Error(), "waiting for NATS at "+shown+" (connecting for ") ||
		!strings.Contains(err.Error(), "check that the NATS server runs and that nats.url is right") {
		t.Fatalf("Err while down: %v", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if err := WaitConnected(wctx, nc); err != context.DeadlineExceeded {
		t.Fatalf("WaitConnected while down: %v", err)
	}
	wcancel()
	time.Sleep(700 * time.Millisecond) // about three LogEvery
	out := logs.String()
	if n := strings.Count(out, `msg="waiting for NATS`); n != 1 {
		t.Fatalf("%d \"waiting for NATS\" lines, want 1:\n%s", n, out)
	}
	// One per LogEvery at most (the ticker drops ticks, never adds).
	limit := int(time.Since(started) / (200 * time.Millisecond))
	if n := strings.Count(out, `msg="still waiting for NATS"`); n < 2 || n > limit {
		t.Fatalf("%d \"still waiting\" lines, want 2…%d:\n%s", n, limit, out)
	}
	if !strings.Contains(out, "url="+shown) {
		t.Fatalf("the log does not name the URL:\n%s", out)
	}

	srv, err := StartEmbedded(EmbeddedConfig{Port: port, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after the server came up")
	}
	if err := a.Err(); err != nil {
		t.Fatalf("Err once connected: %v", err)
	}
	if !strings.Contains(logs.String(), `msg="NATS connected"`) {
		t.Fatalf("no \"NATS connected\":\n%s", logs.String())
	}
	if err := WaitConnected(context.Background(), nc); err != nil {
		t.Fatalf("WaitConnected once up: %v", err)
	}
	// Started on a connection that is up: done at once, nothing logged.
	var quiet syncBuf
	b, err := NewAwait(ctx, AwaitConfig{Conn: nc, URL: url, Logger: slog.New(slog.NewTextHandler(&quiet, nil))})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("an Await on a connected connection is not done")
	}
	if b.Err() != nil || quiet.String() != "" {
		t.Fatalf("an Await on a connected connection: %v, logged %q", b.Err(), quiet.String())
	}
}

// TestReconnectDelay: 250ms, 500ms, 1s, then 2s, each within ±10%.
func TestReconnectDelay(t *testing.T) {
	for attempts, want := range map[int]time.Duration{0: 250 * time.Millisecond, 1: 250 * time.Millisecond, 2: 500 * time.Millisecond,
		3: time.Second, 4: 2 * time.Second, 100: 2 * time.Second} {
		for range 50 {
			if d := reconnectDelay(attempts); d < want-want/10 || d > want+want/10 {
				t.Fatalf("reconnectDelay(%d) = %v, want %v ±10%%", attempts, d, want)
			}
		}
	}
}
