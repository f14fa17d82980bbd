package mapperclient

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/session"
)

// TestUnreachableNamesNATS: with NATS not connected, Publish and Ping are
// deploy.ErrUnreachable naming the NATS server ("IP Mapper unreachable:
// not connected to NATS at nats://…"), not nats.go's symptom; connected
// with no IP Mapper listening, "no IP Mapper is answering"; an IP Mapper
// that answers with a refusal is not unreachable.
func TestUnreachableNamesNATS(t *testing.T) {
	down, url := natstest.Unreachable(t)
	c, err := NewClient(ClientConfig{Conn: down})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	diff := deploy.Diff{Org: "acme", Set: []session.Session{{Org: "acme"}}}
	want := "IP Mapper unreachable: not connected to NATS at " + url + " (connecting)"
	for name, err := range map[string]error{"publish": Publisher{Client: c}.Publish(ctx, diff), "ping": c.Ping(ctx)} {
		if !errors.Is(err, deploy.ErrUnreachable) || err.Error() != want {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}

	bus := natstest.Start(t)
	up, err := NewClient(ClientConfig{Conn: bus.NC})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Ping(ctx); !errors.Is(err, deploy.ErrUnreachable) || !strings.Contains(err.Error(), "no IP Mapper is answering") {
		t.Fatalf("ping with no IP Mapper: %v", err)
	}
	// An IP Mapper refusing: an answer, not unreachable.
	sub, err := bus.NC.Subscribe(wire.Subject(session.Bucket, wire.CmdGetSessions), func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(micro.ErrorCodeHeader, "500")
		r.Header.Set(micro.ErrorHeader, "bucket failing")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := up.Ping(ctx); err == nil || errors.Is(err, deploy.ErrUnreachable) {
		t.Fatalf("ping answered with a refusal: %v", err)
	}
}
