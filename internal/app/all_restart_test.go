package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/deploy"
)

// TestAllRestartDeploysWithoutWarning: on a restart of `svc-pf all` over
// an existing database the orgmanager redeploys every organisation at
// once; it waits for its own IP Mapper to answer first, so the start logs
// no "deploy failed" warning, and the deploy lands. The restart follows a
// kill: the dead process's IP Mapper lock is still in its bucket, so the
// new IP Mapper answers only once it expires (ha.lock_ttl).
func TestAllRestartDeploysWithoutWarning(t *testing.T) {
	cfg := testAllConfig(t)
	var firstLogs syncBuffer
	first, stop := runAll(t, cfg, &firstLogs)
	org := "http://" + first.OrgManager.Addr().String()
	for _, req := range []struct{ method, path, body string }{
		{"PUT", "/org/acme", ""},
		{"PATCH", "/org/acme/prefixes", `{"add":["127.0.0.0/8"]}`},
	} {
		r, _ := http.NewRequest(req.method, org+req.path, strings.NewReader(req.body))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d", req.method, req.path, resp.StatusCode)
		}
	}
	waitDeployed(t, first, "acme")
	stop()

	var logs syncBuffer
	second, stop := runAll(t, cfg, &logs, func(a *All) { holdLock(t, a, cfg) })
	waitDeployed(t, second, "acme")
	stop()
	if out := logs.String(); strings.Contains(out, "deploy failed") || strings.Contains(out, "level=WARN") {
		t.Errorf("a restart logged a warning:\n%s", out)
	}
}

// runAll runs `svc-pf all` logging to logs until stop, which returns once
// it has stopped.
func runAll(t *testing.T, cfg AllConfig, logs *syncBuffer, beforeRun ...func(*All)) (all *All, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	all, err := StartAll(ctx, cfg, "test", slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	for _, f := range beforeRun {
		f(all)
	}
	done := make(chan error, 1)
	go func() { done <- all.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return all, stop
}

// holdLock writes the IP Mapper's lock as a killed process leaves it: held
// by another instance until ha.lock_ttl after this write.
func holdLock(t *testing.T, a *All, cfg AllConfig) {
	t.Helper()
	nc, err := nats.Connect(a.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, cfg.IPMapper.HA.LockBucket)
	if err != nil {
		t.Fatal(err)
	}
	holder := `{"instance":"killed","host":"gone","pid":1,"bucket":"` + cfg.IPMapper.Sessions.Bucket + `","token":"t","since":"2026-01-01T00:00:00Z"}`
	if _, err := kv.Put(ctx, cfg.IPMapper.Sessions.Bucket, []byte(holder)); err != nil {
		t.Fatal(err)
	}
}

// waitDeployed waits until org's sessions are deployed to the IP Mapper.
func waitDeployed(t *testing.T, all *All, org string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !all.OrgManager.deployer.Status(org).Deployed; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never deployed", org)
		}
	}
}

// TestAwaitIPMapperIsBounded: when the IP Mapper never answers, the wait
// for it ends after its bound, saying so, and the deploys start (their
// failures are then logged as usual); an answer, even a refusal, ends it.
func TestAwaitIPMapperIsBounded(t *testing.T) {
	var logs syncBuffer
	o := &OrgManager{log: slog.New(slog.NewTextHandler(&logs, nil)), awaitMapper: 200 * time.Millisecond,
		ping: func(context.Context) error { return fmt.Errorf("%w: nobody", deploy.ErrUnreachable) }}
	done := make(chan struct{})
	go func() { o.awaitIPMapper(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait for an IP Mapper that never answers did not end")
	}
	if !strings.Contains(logs.String(), "did not answer in time") {
		t.Errorf("log: %s", logs.String())
	}
	pings := 0
	o.awaitMapper = time.Hour
	o.ping = func(context.Context) error { pings++; return errors.New("refused: an answer") }
	o.awaitIPMapper(context.Background())
	if pings != 1 {
		t.Errorf("%d pings before an answer ended the wait, want 1", pings)
	}
}
