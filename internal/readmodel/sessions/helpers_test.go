package sessions_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
)

// startMapper starts a real IP Mapper on nc with cfg (its own registry,
// no sweep within a test); the caller stops it.
func startMapper(ctx context.Context, t *testing.T, nc *nats.Conn, cfg ipmapper.Config) *ipmapper.Service {
	t.Helper()
	cfg.Conn, cfg.Registerer, cfg.SweepInterval = nc, prometheus.NewRegistry(), time.Hour
	m, err := ipmapper.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

// newClient is an IP Mapper client on nc.
func newClient(t *testing.T, nc *nats.Conn, timeout time.Duration) *mapperclient.Client {
	t.Helper()
	c, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startNode runs a node's sessions read model on js with cfg until the
// test ends, and returns it once it is ready.
func startNode(ctx context.Context, t *testing.T, js jetstream.JetStream, cfg sessions.Config) *sessions.Model {
	t.Helper()
	cfg.JetStream, cfg.RetryInterval = js, 50*time.Millisecond
	m, err := sessions.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nctx, ncancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(nctx) }()
	t.Cleanup(func() { ncancel(); <-done })
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}
