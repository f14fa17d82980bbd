package readmodel_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
)

// TestUnreachableNATSNamed: a node whose NATS server cannot be reached
// says so naming the server, not with nats.go's bare "outbound buffer
// limit exceeded".
func TestUnreachableNATSNamed(t *testing.T) {
	nc, url := natstest.Unreachable(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var log natstest.LogBuffer
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
