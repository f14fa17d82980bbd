package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
)

// TestErrorReplyFormat checks the wire form of an error on every command:
// the micro status headers and the JSON body.
func TestErrorReplyFormat(t *testing.T) {
	f := startFixture(t, nil)
	for _, tc := range []struct{ subject, body, want string }{
		{wire.SubjectSetSession, `{"session":{"id":"x","org":"a"},"ttl":5}`, "unknown field"},
		{wire.SubjectSetSession, `{"session":{"id":"x","org":"a"}} {}`, "trailing data"},
		{wire.SubjectSetSession, `{"session":{"id":"x","org":"a"},"ttl_seconds":-5}`, "ttl_seconds"},
		{wire.SubjectSetSession, ``, "empty request body"},
		{wire.SubjectSetSessionBatch, `{}`, `"sessions" is required`},
		{wire.SubjectSetSessionBatch, `[1,2]`, "invalid JSON"},
		{wire.SubjectGetSessions, `{}`, "exactly one"},
		{wire.SubjectGetSessions, `{"id":"a","org":"b"}`, "exactly one"},
		{wire.SubjectGetSessions, `{"ip":"10.0.0.300"}`, "invalid ip"},
		{wire.SubjectGetSessions, `{"ip":"fe80::1%eth0"}`, "invalid ip"},
		{wire.SubjectCleanSessions, `{}`, "needs one of"},
		{wire.SubjectCleanSessions, `{"org":"a"}`, "needs one of"},
		{wire.SubjectCleanSessions, `{"org":"a","subnets":[]}`, "subnets is empty"},
		{wire.SubjectCleanSessions, `{"ids":[]}`, "ids is empty"},
		{wire.SubjectCleanSessions, `{"org":"a","revision_below":3,"subnets":["10.0.0.0/8"]}`, "only one of"},
		{wire.SubjectCleanSessions, `{"org":"a","all":true,"ids":["x"]}`, "only one of"},
		{wire.SubjectCleanSessions, `{"revision_below":3}`, "org is required"},
		{wire.SubjectCleanSessions, `{"org":"a","revision_below":-1}`, "positive"},
		{wire.SubjectCleanSessions, `{"ids":["a/b"]}`, "invalid session id"},
		{wire.SubjectCleanSessions, `{"org":"a","subnets":["10.0.0.0/33"]}`, "invalid JSON"},
		{wire.SubjectCleanSessions, `{"org":"a","subnets":["10.0.0.0/8","::ffff:10.0.0.0/104"]}`, "IPv4-mapped IPv6 subnet; use the IPv4 form"},
	} {
		msg, err := f.bus.nc.Request(tc.subject, []byte(tc.body), 10*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.subject, tc.body, err)
		}
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" {
			t.Errorf("%s %s: code header %q, want 400", tc.subject, tc.body, code)
		}
		desc := msg.Header.Get(micro.ErrorHeader)
		var eb wire.ErrorReply
		if err := json.Unmarshal(msg.Data, &eb); err != nil {
			t.Fatalf("%s %s: body %q is not an error object: %v", tc.subject, tc.body, msg.Data, err)
		}
		if !strings.Contains(eb.Error, tc.want) || !strings.Contains(desc, tc.want) {
			t.Errorf("%s %s: error %q / header %q, want %q", tc.subject, tc.body, eb.Error, desc, tc.want)
		}
	}
}

func TestRestartReloadsFromBucket(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	f1 := startFixtureOn(t, b, nil)
	var batch []session.Session
	for i := range 500 {
		batch = append(batch, mkSession(i, "r"))
	}
	if _, err := f1.client.SetSessionBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := f1.client.SetSession(ctx, session.Session{ID: "exp", Org: "r"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f1.client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{"s000000"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := f1.client.GetSessions(ctx, mapperclient.Query{Org: "r"})
	if err := f1.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := f1.client.GetSessions(ctx, mapperclient.Query{Org: "r"}); !errors.Is(err, mapperclient.ErrUnavailable) {
		t.Fatalf("stopped service still answers: %v", err)
	}
	// A value that is not a session is skipped at load, not fatal.
	if _, err := kvOf(t, b.nc).Put(ctx, "garbage", []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	clock := newFakeClock()
	clock.Advance(2 * time.Minute) // "exp" expired while the IP Mapper was down
	svc, err := New(Config{Conn: b.nc, Clock: clock.Now, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Ready() {
		t.Fatal("ready before Start")
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if !svc.Ready() {
		t.Fatal("not ready after Start")
	}
	if v := metricValue(svc.metrics.loadSkipped); v != 1 {
		t.Fatalf("load skipped %v, want 1", v)
	}
	after, err := f1.client.GetSessions(ctx, mapperclient.Query{Org: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var wantAfter []session.Session
	for _, s := range before {
		if s.ID != "exp" {
			wantAfter = append(wantAfter, s)
		}
	}
	if len(after) != 499 || !reflect.DeepEqual(after, wantAfter) {
		t.Fatalf("reloaded %d sessions, want the 499 unexpired ones as before", len(after))
	}
	if _, err := kvOf(t, b.nc).Get(ctx, "exp"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("session that expired during the downtime not swept at start: %v", err)
	}
	// Reloaded state takes part in merges: org and opaque rules still apply.
	if _, err := f1.client.SetSession(ctx, session.Session{ID: "s000001", Org: "other"}, 0); err == nil {
		t.Fatal("reloaded session's org not enforced")
	}
	got, err := f1.client.SetSession(ctx, session.Session{ID: "s000001", Org: "r", Attributes: identity.Attributes{Location: "moved"}}, 0)
	if err != nil || got.Username != "user1" {
		t.Fatalf("merge over a reloaded session: %+v, %v", got, err)
	}
}

func TestServiceKeepsAnsweringAfterNATSRestart(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	f := startFixtureOn(t, b, nil)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "before", Org: "a"}, 0); err != nil {
		t.Fatal(err)
	}
	port := b.srv.Port()
	b.srv.Shutdown()
	srv, err := natsbusRestart(b.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	eventually(t, "the IP Mapper to answer after the NATS restart", func() bool {
		_, err := f.client.SetSession(ctx, session.Session{ID: "after", Org: "a"}, 0)
		return err == nil
	})
	list, err := f.client.GetSessions(ctx, mapperclient.Query{Org: "a"})
	if err != nil || len(list) != 2 {
		t.Fatalf("after restart: %+v, %v", list, err)
	}
	for _, id := range []string{"before", "after"} {
		if _, err := kvOf(t, b.nc).Get(ctx, id); err != nil {
			t.Fatalf("%s not in the bucket after the NATS restart: %v", id, err)
		}
	}
}

func TestClientWithoutServiceIsUnavailable(t *testing.T) {
	b := startBus(t)
	c, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: b.nc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetSession(ctxT(t), session.Session{ID: "x", Org: "a"}, 0); !errors.Is(err, mapperclient.ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
}

func TestConfigChecks(t *testing.T) {
	b := startBus(t)
	for _, cfg := range []Config{
		{},
		{Conn: b.nc, Replicas: -1},
		{Conn: b.nc, Replicas: 7},
		{Conn: b.nc, SweepInterval: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	svc, err := New(Config{Conn: b.nc})
	if err != nil {
		t.Fatal(err)
	}
	if svc.cfg.PurgeDeletesAfter != 24*time.Hour {
		t.Errorf("PurgeDeletesAfter default %v, want 24h", svc.cfg.PurgeDeletesAfter)
	}
	if err := svc.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := svc.Start(ctxT(t)); err == nil {
		t.Error("second Start accepted")
	}
}

func TestMicroServiceIdentity(t *testing.T) {
	f := startFixture(t, nil)
	msg, err := f.bus.nc.Request("$SRV.INFO."+wire.ServiceName, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	slices.Sort(subjects)
	want := []string{wire.SubjectCleanSessions, wire.SubjectGetSessions, wire.SubjectSetSession, wire.SubjectSetSessionBatch}
	if info.Name != "ipmapper" || !slices.Equal(subjects, want) {
		t.Fatalf("service %q endpoints %v, want %v", info.Name, subjects, want)
	}
}

// TestStartCanBeRetried starts the IP Mapper while NATS is down: Start fails,
// and a later Start, once NATS is back, succeeds.
func TestStartCanBeRetried(t *testing.T) {
	b := startBus(t)
	port, url := b.srv.Port(), b.srv.ClientURL()
	b.srv.Shutdown()
	nc, err := natsbus.Connect(url, "retry", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := New(Config{Conn: nc, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := svc.Start(short); err == nil {
		t.Fatal("Start succeeded without NATS")
	}
	if svc.Ready() {
		t.Fatal("ready after a failed Start")
	}
	if b.srv, err = natsbusRestart(b.dir, port); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Start to succeed once NATS is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return svc.Start(ctx) == nil
	})
	defer svc.Stop()
	if !svc.Ready() {
		t.Fatal("not ready after Start")
	}
}
