package app

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestIPMapperAnswersAfterNATSRestart: the layout of `svc-pf ipmapper`
// beside an external `nats-server -js`, killed with SIGKILL and started
// again on the same port and store after the IP Mapper lost its lock
// (the outage outlasts the lock TTL). Once an IP Mapper serves again,
// every request to the micro service is answered, and the server holds
// exactly one subscription per endpoint: before the fix, the endpoints
// stopped while the connection was reconnecting stayed subscribed on the
// server (nats.go resent the draining subscriptions and then dropped them
// locally), and about half of the requests went to those silent queue
// members and timed out, with /health 200, until the process restarted.
// It runs with a single IP Mapper and with a standby beside it.
func TestIPMapperAnswersAfterNATSRestart(t *testing.T) {
	for _, standby := range []bool{false, true} {
		t.Run(fmt.Sprint("standby=", standby), func(t *testing.T) { testAnswersAfterNATSRestart(t, standby) })
	}
}

func testAnswersAfterNATSRestart(t *testing.T, withStandby bool) {
	srv := natstest.StartProcess(t)
	mappers := []*haMapper{startHAMapper(t, srv.URL(), func(c *IPMapperConfig) { c.HA.Instance = "a" })}
	natstest.Eventually(t, "a active", func() (bool, string) {
		code, body := mappers[0].health(t)
		return code == 200 && body["role"] == "active", fmt.Sprint(code, body)
	})
	if withStandby {
		mappers = append(mappers, startHAMapper(t, srv.URL(), func(c *IPMapperConfig) { c.HA.Instance = "b" }))
		natstest.Eventually(t, "b on standby", func() (bool, string) {
			code, body := mappers[1].health(t)
			return code == 200 && body["role"] == "standby", fmt.Sprint(code, body)
		})
	}
	nc := connectNATS(t, srv.URL(), "test", nil, true)
	if n := unanswered(t, nc, 12); n != 0 {
		t.Fatalf("before the outage: %d of 12 requests unanswered", n)
	}

	srv.Kill()
	natstest.Eventually(t, "the active IP Mapper lost its lock", func() (bool, string) {
		return mappers[0].m.svc.Role() != ipmapper.RoleActive, string(mappers[0].m.svc.Role())
	})
	// Well past the lock TTL, and well within nats.go's 10 s flush timeout
	// of a draining subscription, during which the bug left it subscribed.
	time.Sleep(2 * haLockTTL)
	srv.Start()
	natstest.Eventually(t, "the test's client reconnected", func() (bool, string) {
		return nc.IsConnected(), nc.Status().String()
	})
	natstest.Eventually(t, "one IP Mapper active and healthy again", func() (bool, string) {
		var active []string
		for _, h := range mappers {
			if code, body := h.health(t); code == 200 && body["role"] == "active" {
				active = append(active, fmt.Sprint(body["instance"]))
			}
		}
		return len(active) == 1, fmt.Sprint("active: ", active)
	})

	if n := unanswered(t, nc, 50); n != 0 {
		t.Fatalf("after the NATS restart: %d of 50 requests to the micro service unanswered", n)
	}

	// What the server delivers to: one member per endpoint's queue group.
	for _, cmd := range []string{wire.CmdSetSession, wire.CmdSetSessionBatch, wire.CmdGetSessions, wire.CmdCleanSessions} {
		subject := wire.Subject("sessions", cmd)
		natstest.Eventually(t, "one subscription on "+subject, func() (bool, string) {
			var got []string
			for _, s := range srv.Subscriptions(subject) {
				if s.Subject == subject {
					got = append(got, fmt.Sprintf("cid %d sid %s queue %q", s.CID, s.SID, s.Queue))
				}
			}
			return len(got) == 1, strings.Join(got, "; ")
		})
	}
}

// TestIPMapperHealthWhenDeaf: /health of the active IP Mapper turns 503
// when its micro service does not answer every request — here a silent
// member of the endpoints' queue groups takes a share of them, as the
// subscriptions left behind by the bug above did — and 200 once it is gone.
// The standby stays 200 meanwhile: it does not serve, and its health says
// whether it can take over.
func TestIPMapperHealthWhenDeaf(t *testing.T) {
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	var mappers []*haMapper
	for _, name := range []string{"a", "b"} {
		mappers = append(mappers, startHAMapper(t, srv.ClientURL(), func(c *IPMapperConfig) { c.HA.Instance = name }))
	}
	// healthOf reports the /health of the active instance (which one it is
	// does not matter; a lock lost on a busy machine may move it) and of
	// the standby.
	healthOf := func(role ipmapper.Role) (int, map[string]any) {
		for _, h := range mappers {
			if h.m.svc.Role() == role {
				return h.health(t)
			}
		}
		return 0, map[string]any{"error": "no instance " + string(role)}
	}
	natstest.Eventually(t, "one active, one standby", func() (bool, string) {
		code, body := healthOf(ipmapper.RoleActive)
		scode, sbody := healthOf(ipmapper.RoleStandby)
		return code == 200 && scode == 200, fmt.Sprint(code, body, scode, sbody)
	})

	nc := connectNATS(t, srv.ClientURL(), "silent", nil, false)
	var silent []*nats.Subscription
	for _, cmd := range wire.Commands() {
		sub, err := nc.QueueSubscribe(wire.Subject("sessions", cmd), micro.DefaultQueueGroup, func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "the active one's /health 503 while requests go unanswered, the standby's 200", func() (bool, string) {
		code, body := healthOf(ipmapper.RoleActive)
		scode, sbody := healthOf(ipmapper.RoleStandby)
		return code == 503 && strings.Contains(fmt.Sprint(body["error"]), "the micro service did not answer") && scode == 200,
			fmt.Sprint(code, body, scode, sbody)
	})
	for _, sub := range silent {
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, "the active one's /health 200 once every request is answered", func() (bool, string) {
		code, body := healthOf(ipmapper.RoleActive)
		return code == 200, fmt.Sprint(code, body)
	})
}

// unanswered sends n get-sessions requests in a row, as the orgmanager's
// client would, and counts those not answered within 2 s; it logs the
// first failure.
func unanswered(t *testing.T, nc *nats.Conn, n int) int {
	t.Helper()
	body, err := json.Marshal(wire.GetSessionsRequest{Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	missed := 0
	for range n {
		if _, err := nc.Request(wire.Subject("sessions", wire.CmdGetSessions), body, 2*time.Second); err != nil {
			if missed == 0 {
				t.Logf("first unanswered request: %v", err)
			}
			missed++
		}
	}
	return missed
}
