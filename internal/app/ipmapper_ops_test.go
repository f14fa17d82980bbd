package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/session"
)

// runMapper starts an IP Mapper on nc with its listener on a free port,
// runs it until the test ends and waits until /health says 200.
func runMapper(t *testing.T, bus *natstest.Bus, mod func(*IPMapperConfig)) (base string, client *mapperclient.Client) {
	t.Helper()
	cfg := DefaultIPMapperConfig()
	testMapperAuth(t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	if mod != nil {
		mod(&cfg)
	}
	m, err := StartIPMapper(cfg, bus.NC, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Background(t, m.Run)
	base = "http://" + m.Addr().String()
	natstest.Eventually(t, "ipmapper healthy", func() (bool, string) {
		code, body := httpGet(t, base+"/health")
		return code == 200, body
	})
	client, err = mapperclient.NewClient(mapperclient.ClientConfig{Conn: bus.NC, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return base, client
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestIPMapperSessionsEndpoint: GET /sessions shows an operator what the
// table holds, by each selector, bounded by limit with a total and a next
// page; a wrong query is a 400, never an answer for another selector.
func TestIPMapperSessionsEndpoint(t *testing.T) {
	bus := natstest.Start(t)
	base, client := runMapper(t, bus, nil)
	ctx := context.Background()
	var batch []session.Session
	for i, user := range []string{"alice", "bob", "carol"} {
		batch = append(batch, session.Session{ID: "s" + string(rune('1'+i)), Org: "acme",
			Allocations: []netip.Prefix{netip.MustParsePrefix("192.0.2." + string(rune('0'+i)) + "/32")},
			Attributes:  identity.Attributes{Username: user, DeviceID: "dev-" + user}})
	}
	batch = append(batch, session.Session{ID: "t1", Org: "other", Allocations: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Attributes: identity.Attributes{Username: "alice"}})
	if _, err := client.SetSessionBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}

	get := func(query string) wire.SessionsReply {
		t.Helper()
		code, body := httpGet(t, base+"/sessions?"+query)
		if code != 200 {
			t.Fatalf("GET /sessions?%s: %d %s", query, code, body)
		}
		var r wire.SessionsReply
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	ids := func(r wire.SessionsReply) string {
		var out []string
		for _, s := range r.Sessions {
			out = append(out, s.ID)
		}
		return strings.Join(out, ",")
	}
	for _, tt := range []struct {
		query, ids string
		total      int
		next       string
	}{
		{"org=acme", "s1,s2,s3", 3, ""},
		{"org=acme&limit=2", "s1,s2", 3, "s2"},
		{"org=acme&limit=2&after=s2", "s3", 1, ""},
		{"ip=192.0.2.1", "s2", 1, ""},
		{"ip=::ffff:192.0.2.2", "s3", 1, ""},
		{"ip=203.0.113.1", "", 0, ""},
		{"username=alice", "s1,t1", 2, ""},
		{"deviceid=dev-bob", "s2", 1, ""},
		{"id=t1", "t1", 1, ""},
		{"org=nobody", "", 0, ""},
	} {
		r := get(tt.query)
		if ids(r) != tt.ids || r.Total != tt.total || r.Next != tt.next || r.Count != len(r.Sessions) {
			t.Errorf("%s: ids %q total %d next %q count %d; want %q %d %q", tt.query, ids(r), r.Total, r.Next, r.Count, tt.ids, tt.total, tt.next)
		}
	}
	if r := get("id=s1"); len(r.Sessions) != 1 || r.Sessions[0].Username != "alice" || r.Sessions[0].Org != "acme" || r.Limit != ipmapper.SessionsDefaultLimit {
		t.Errorf("id=s1: %+v", r)
	}
	if code, body := httpGet(t, base+"/sessions?org=nobody"); !strings.Contains(body, `"sessions":[]`) {
		t.Errorf("no match: %d %s, want an empty list", code, body)
	}

	for _, query := range []string{
		"", "org=acme&username=alice", "org=acme&org=other", "ip=bad", "ip=fe80::1%25eth0",
		"org=acme&limit=0", "org=acme&limit=10001", "org=acme&limit=x", "cidr=10.0.0.0/8", "org=a%ZZ",
	} {
		if code, body := httpGet(t, base+"/sessions?"+query); code != 400 || !strings.Contains(body, "error") {
			t.Errorf("GET /sessions?%s: %d %s, want 400", query, code, body)
		}
	}
	resp, err := http.Post(base+"/sessions?org=acme", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /sessions: %d, want 405 (read-only)", resp.StatusCode)
	}
}

// TestIPMapperHealthReportsFailingWrites: the IP Mapper answers but cannot
// store (JetStream's storage used up): /health turns 503 and says why;
// once space is freed, the next write is stored and /health is 200 again,
// with no restart.
func TestIPMapperHealthReportsFailingWrites(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir, MaxStore: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsbus.Connect(srv.ClientURL(), "ipmapper", nil, false)
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); srv.Shutdown() })
	bus := &natstest.Bus{Srv: srv, NC: nc}
	base, client := runMapper(t, bus, nil)
	ctx := context.Background()
	one := func(id string) session.Session {
		return session.Session{ID: id, Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	}
	if _, err := client.SetSession(ctx, one("a"), 0); err != nil {
		t.Fatal(err)
	}

	// Fill the quota with another stream, as other data fills a disk.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "filler", make([]byte, 4096)); err != nil {
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) {
				t.Fatal(err)
			}
			break
		}
		if i > 100000 {
			t.Fatal("the store never filled")
		}
	}
	if _, err := client.SetSession(ctx, one("b"), 0); err == nil {
		t.Fatal("stored on a full store")
	}
	code, body := httpGet(t, base+"/health")
	if code != 503 || !strings.Contains(body, "KV writes to bucket sessions failing since") {
		t.Fatalf("/health while writes fail: %d %s", code, body)
	}

	if err := js.DeleteStream(ctx, "FILLER"); err != nil {
		t.Fatal(err)
	}
	// The orgmanager retries a failed deploy; its next attempt goes through.
	if _, err := client.SetSession(ctx, one("b"), 0); err != nil {
		t.Fatalf("set-session after space was freed: %v", err)
	}
	if code, body := httpGet(t, base+"/health"); code != 200 {
		t.Fatalf("/health after recovery: %d %s", code, body)
	}
}
