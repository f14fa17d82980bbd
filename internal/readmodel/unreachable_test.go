package readmodel_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
)

// lockedBuffer is a log destination the follower's goroutine writes while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUnreachableNATSNamed: a node whose NATS server cannot be reached
// says so naming the server, not with nats.go's bare "outbound buffer
// limit exceeded".
func TestUnreachableNATSNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	_ = l.Close() // nothing listens there now
	nc, err := natsbus.Connect(url, "test", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	x, err := sessions.New(sessions.Config{JetStream: js, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	natstest.Background(t, x.Run)
	want := "NATS at " + url + " unreachable; waiting to reconnect to open the bucket"
	natstest.Eventually(t, "the log names the server", func() (bool, string) {
		return strings.Contains(log.String(), want), log.String()
	})
}
