package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	"github.com/svc-pf/svc-pf/internal/session"
)

// platform is the write and read side of one machine, wired over a real
// embedded NATS server: orgmanager (HTTP + deploy over NATS), the IP Mapper
// and a node's subscriber index.
type platform struct {
	t    testing.TB
	nats *natsbus.Embedded
	// natsDir is the embedded server's JetStream directory, to restart it.
	natsDir string
	dbURL   string
	mapper  *ipmapper.Service
	index   *sessions.Model
	client  *mapperclient.Client

	omCancel context.CancelFunc
	omDone   chan error
	base     string
}

func newPlatform(t *testing.T, dbURL string) *platform { return newPlatformTB(t, dbURL) }

func newPlatformTB(t testing.TB, dbURL string) *platform {
	t.Helper()
	dir := t.TempDir()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := &platform{t: t, nats: srv, natsDir: dir, dbURL: dbURL}
	t.Cleanup(func() { p.nats.Shutdown() })
	p.startMapper()

	nc := p.connect("node")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if p.index, err = sessions.New(sessions.Config{JetStream: js, RetryInterval: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.index.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := p.index.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if p.client, err = mapperclient.NewClient(mapperclient.ClientConfig{Conn: p.connect("test client"), Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	p.startOrgManager()
	return p
}

func (p *platform) connect(name string) *nats.Conn {
	p.t.Helper()
	return connectNATS(p.t, p.nats.ClientURL(), name, nil, true)
}

func (p *platform) startMapper() {
	p.t.Helper()
	svc, err := ipmapper.New(ipmapper.Config{Conn: p.connect("ipmapper")})
	if err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		p.t.Fatal(err)
	}
	p.mapper = svc
	p.t.Cleanup(func() { _ = svc.Stop() })
}

func (p *platform) startOrgManager() {
	p.t.Helper()
	cfg := DefaultOrgManagerConfig()
	withTestToken(p.t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Database.URL = p.dbURL
	cfg.Deploy.RetryMin, cfg.Deploy.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.Deploy.PublishTimeout = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	om, err := StartOrgManager(ctx, cfg, p.connect("orgmanager"), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		p.t.Fatal(err)
	}
	p.base = "http://" + om.Addr().String()
	p.omCancel, p.omDone = cancel, make(chan error, 1)
	go func() { p.omDone <- om.Run(ctx) }()
	p.t.Cleanup(p.stopOrgManager)
}

func (p *platform) stopOrgManager() {
	if p.omCancel == nil {
		return
	}
	p.omCancel()
	if err := <-p.omDone; err != nil {
		p.t.Errorf("orgmanager Run: %v", err)
	}
	p.omCancel = nil
}

func (p *platform) call(method, path string, body any, want int) {
	p.t.Helper()
	callAPI(p.t, p.base, method, path, body, want)
}

// callAPI sends body as JSON (none when nil) to base+path and fails the
// test unless the answer has status want.
func callAPI(t testing.TB, base, method, path string, body any, want int) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
}

// eventually polls cond until it holds, failing after 10 s with describe().
func (p *platform) eventually(what string, cond func() bool, describe func() string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: not reached in 10s; %s", what, describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// indexed returns the org's sessions in the node's index, sorted by id.
func (p *platform) indexed(org string) []*session.Session {
	var ss []*session.Session
	for _, e := range p.index.Snapshot().ByOrg(org) {
		ss = append(ss, e.Session())
	}
	slices.SortFunc(ss, func(a, b *session.Session) int { return cmpString(a.ID, b.ID) })
	return ss
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func describe(ss []*session.Session) string {
	var b bytes.Buffer
	for _, s := range ss {
		fmt.Fprintf(&b, "\n  %s rev=%d %v user=%q dev=%q loc=%q trace=%q", s.ID[:8], s.Revision, s.Allocations, s.Username, s.DeviceID, s.Location, s.TraceID)
	}
	return b.String()
}

// userAt is the username the node resolves ip to ("-" when none).
func (p *platform) userAt(ip string) string {
	s, ok := p.index.LookupIP(netip.MustParseAddr(ip))
	if !ok {
		return "-"
	}
	return s.Username()
}

// expectIndex waits until the node's index holds exactly want for org:
// each entry "allocations|username|deviceid|location".
func (p *platform) expectIndex(org string, want ...string) []*session.Session {
	p.t.Helper()
	slices.Sort(want)
	got := func() []string {
		var out []string
		for _, s := range p.indexed(org) {
			out = append(out, fmt.Sprintf("%v|%s|%s|%s", s.Allocations, s.Username, s.DeviceID, s.Location))
		}
		slices.Sort(out)
		return out
	}
	// The IP Mapper's own table agrees with the node. It updates its table
	// just after the bucket, so the node may see a change a moment earlier.
	mapper := func() []string {
		ss, err := p.client.GetSessions(context.Background(), mapperclient.Query{Org: org})
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, s := range ss {
			out = append(out, fmt.Sprintf("%v|%s|%s|%s", s.Allocations, s.Username, s.DeviceID, s.Location))
		}
		slices.Sort(out)
		return out
	}
	p.eventually("index of "+org, func() bool { return slices.Equal(got(), want) && slices.Equal(mapper(), want) },
		func() string { return fmt.Sprintf("index %q, IP Mapper %q, want %q", got(), mapper(), want) })
	return p.indexed(org)
}

func TestDeployEndToEnd(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		p := newPlatform(t, storetest.URL(t, dialect))

		p.call("PUT", "/org/acme", nil, 200)
		p.call("PUT", "/org/beta", nil, 200)
		p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/16", "10.1.0.0/16", "2001:db8::/48"}}, 200)
		p.call("PATCH", "/org/beta/prefixes", map[string]any{"add": []string{"192.168.0.0/24"}}, 200)
		p.call("POST", "/org/beta/overrides", map[string]any{"cidr": "192.168.0.0/25", "username": "bob"}, 200)

		// POST override → the node resolves an IP inside it to that username.
		p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.1.0/24", "username": "alice", "meta": map[string]any{"trace_id": "trace-1"}}, 200)
		p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "2001:db8::/64", "deviceid": "mac:aa"}, 200)
		ss := p.expectIndex("acme",
			"[10.0.0.0/16]|||",
			"[10.0.1.0/24]|alice||",
			"[10.1.0.0/16]|||",
			"[2001:db8::/48]|||",
			"[2001:db8::/64]||mac:aa|")
		if u := p.userAt("10.0.1.77"); u != "alice" {
			t.Fatalf("10.0.1.77 → %q", u)
		}
		if s, ok := p.index.LookupIP(netip.MustParseAddr("2001:db8::5")); !ok || s.DeviceID() != "mac:aa" {
			t.Fatalf("2001:db8::5 → %+v", s.Session())
		}
		// trace_id is forwarded.
		var alice *session.Session
		for _, s := range ss {
			if s.Username == "alice" {
				alice = s
			}
		}
		if alice.TraceID != "trace-1" || alice.Org != "acme" || alice.Revision == 0 {
			t.Fatalf("alice's session %+v", alice)
		}
		p.expectIndex("beta", "[192.168.0.0/25]|bob||", "[192.168.0.0/24]|||")

		// trace_id is observational: changing only it keeps the session id and
		// sends nothing (the stored trace_id stays as deployed).
		p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.1.0/24", "username": "alice", "meta": map[string]any{"trace_id": "trace-2"}}, 200)
		p.waitSettled("acme")
		if s, ok := p.index.Get(alice.ID); !ok || s.TraceID() != "trace-1" || s.Revision() != alice.Revision {
			t.Fatalf("a trace_id-only change touched the session: %+v", s.Session())
		}

		// Overwrite → new attributes, the old session gone.
		p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.1.0/24", "username": "carol", "location": "hq"}, 200)
		p.eventually("carol", func() bool { return p.userAt("10.0.1.1") == "carol" }, func() string { return describe(p.indexed("acme")) })
		p.eventually("alice gone", func() bool { _, ok := p.index.Get(alice.ID); return !ok }, func() string { return describe(p.indexed("acme")) })
		if s, _ := p.index.LookupIP(netip.MustParseAddr("10.0.1.1")); s.Location() != "hq" || s.TraceID() != "" {
			t.Fatalf("overwritten session %+v", s.Session())
		}

		// Prefix removal → sessions under it cleaned, others untouched: the
		// override inside it (withdrawn by id) and a session the deployer does
		// not know of (left by a lost message; only the subnet clean finds it).
		p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.1.5.0/24", "username": "dave"}, 200)
		p.eventually("dave", func() bool { return p.userAt("10.1.5.1") == "dave" }, func() string { return describe(p.indexed("acme")) })
		lost := session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "lost"}}, netip.MustParsePrefix("10.1.9.0/24")), Org: "acme",
			Revision: alice.Revision, Allocations: []netip.Prefix{netip.MustParsePrefix("10.1.9.0/24")}, Attributes: identity.Attributes{Username: "lost"}}
		if _, err := p.client.SetSession(context.Background(), lost, 0); err != nil {
			t.Fatal(err)
		}
		p.eventually("lost session planted", func() bool { return p.userAt("10.1.9.1") == "lost" }, func() string { return "" })
		before := p.indexed("acme")
		p.call("PATCH", "/org/acme/prefixes", map[string]any{"remove": []string{"10.1.0.0/16"}}, 200)
		p.eventually("10.1/16 cleaned", func() bool {
			return p.userAt("10.1.2.3") == "-" && p.userAt("10.1.5.1") == "-" && p.userAt("10.1.9.1") == "-"
		}, func() string { return describe(p.indexed("acme")) })
		after := p.expectIndex("acme",
			"[10.0.0.0/16]|||",
			"[10.0.1.0/24]|carol||hq",
			"[2001:db8::/48]|||",
			"[2001:db8::/64]||mac:aa|")
		for _, s := range after { // untouched: same revision and update time
			for _, b := range before {
				if b.ID == s.ID && (b.Revision != s.Revision || !b.UpdatedAt.Equal(s.UpdatedAt)) {
					t.Errorf("session %s was rewritten by an unrelated prefix removal", s.ID)
				}
			}
		}
		p.expectIndex("beta", "[192.168.0.0/25]|bob||", "[192.168.0.0/24]|||")

		// Redeploy → same sessions, a new revision, nothing stale. A stale
		// session planted in the IP Mapper (as if left by a lost message) goes.
		stale := session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "ghost"}}, netip.MustParsePrefix("10.0.9.0/24")), Org: "acme",
			Revision: 1, Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.9.0/24")}, Attributes: identity.Attributes{Username: "ghost"}}
		if _, err := p.client.SetSession(context.Background(), stale, 0); err != nil {
			t.Fatal(err)
		}
		p.eventually("ghost planted", func() bool { return p.userAt("10.0.9.1") == "ghost" }, func() string { return "" })
		oldRev := after[0].Revision
		p.call("POST", "/org/acme/redeploy", nil, 200)
		p.eventually("redeployed", func() bool {
			ss := p.indexed("acme")
			for _, s := range ss {
				if s.Revision <= oldRev {
					return false
				}
			}
			return len(ss) == len(after)
		}, func() string { return describe(p.indexed("acme")) })
		redeployed := p.indexed("acme")
		for i := range after {
			if redeployed[i].ID != after[i].ID || !slices.Equal(redeployed[i].Allocations, after[i].Allocations) {
				t.Fatalf("redeploy changed sessions:%s\nvs%s", describe(redeployed), describe(after))
			}
		}
		if p.userAt("10.0.9.1") == "ghost" {
			t.Fatal("stale session survived the redeploy")
		}

		// Organisation delete → none of its sessions left; others untouched.
		p.call("DELETE", "/org/acme?confirm=true", nil, 204)
		p.expectIndex("acme")
		p.expectIndex("beta", "[192.168.0.0/25]|bob||", "[192.168.0.0/24]|||")
	})
}

// waitSettled waits until the org's effective ranges are not dirty.
func (p *platform) waitSettled(org string) {
	p.t.Helper()
	p.eventually(org+" settled", func() bool {
		resp, err := http.Get(p.base + "/org/" + org + "/effective-ranges")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var rr struct{ Dirty bool }
		return json.NewDecoder(resp.Body).Decode(&rr) == nil && !rr.Dirty
	}, func() string { return "still dirty" })
}

func TestIPMapperDownDuringWrites(t *testing.T) {
	p := newPlatform(t, storetest.URL(t, storetest.SQLite))
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/24"}}, 200)
	p.expectIndex("acme", "[10.0.0.0/24]|||")

	p.stopMapper()
	// Writes still succeed while the IP Mapper is away.
	for i := range 5 {
		p.call("POST", "/org/acme/overrides", map[string]any{"cidr": fmt.Sprintf("10.0.0.%d/32", i), "username": fmt.Sprint("u", i)}, 200)
	}
	p.call("DELETE", "/org/acme/overrides?cidr=10.0.0.4/32", nil, 204)
	time.Sleep(300 * time.Millisecond) // let deploys fail and back off
	if u := p.userAt("10.0.0.1"); u != "" {
		t.Fatalf("a write reached the index without the IP Mapper: 10.0.0.1 → %q", u)
	}

	p.startMapper()
	p.expectIndex("acme", "[10.0.0.0/32]|u0||", "[10.0.0.1/32]|u1||", "[10.0.0.2/32]|u2||", "[10.0.0.3/32]|u3||",
		"[10.0.0.0/24]|||")
	p.waitSettled("acme")
}

func TestRestarts(t *testing.T) {
	p := newPlatform(t, storetest.URL(t, storetest.SQLite))
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/24"}}, 200)
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/25", "username": "a"}, 200)
	want := []string{"[10.0.0.0/25]|a||", "[10.0.0.0/24]|||"}
	p.expectIndex("acme", want...)

	// orgmanager restart: the first deploy after start republishes under a
	// fresh revision and cleans older ones — no lost, no duplicated session.
	p.stopOrgManager()
	p.startOrgManager()
	p.waitSettled("acme")
	p.expectIndex("acme", want...)
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.128/25", "username": "b"}, 200)
	// The /24 is wholly overridden now: its own session goes.
	p.expectIndex("acme", "[10.0.0.0/25]|a||", "[10.0.0.128/25]|b||")

	// IP Mapper restart: the table is reloaded from the bucket.
	if err := p.mapper.Stop(); err != nil {
		t.Fatal(err)
	}
	p.startMapper()
	got, err := p.client.GetSessions(context.Background(), mapperclient.Query{IP: netip.MustParseAddr("10.0.0.200")})
	if err != nil || len(got) != 1 || got[0].Username != "b" {
		t.Fatalf("after IP Mapper restart: %+v, %v", got, err)
	}
	// And it keeps serving deploys.
	p.call("DELETE", "/org/acme/overrides?cidr=10.0.0.0/25", nil, 204)
	p.expectIndex("acme", "[10.0.0.0/24]|||", "[10.0.0.128/25]|b||")
}

// TestDeleteWhileIPMapperDownAcrossRestart: organisation deletes whose
// clean could not reach the IP Mapper are not forgotten by an orgmanager
// restart, and an organisation re-created meanwhile leaves no session of the
// deleted one behind.
func TestDeleteWhileIPMapperDownAcrossRestart(t *testing.T) {
	p := newPlatform(t, storetest.URL(t, storetest.SQLite))
	for i, org := range []string{"gone", "again"} {
		p.call("PUT", "/org/"+org, nil, 200)
		p.call("PATCH", "/org/"+org+"/prefixes", map[string]any{"add": []string{fmt.Sprintf("10.%d.0.0/24", i)}}, 200)
		p.call("POST", "/org/"+org+"/overrides", map[string]any{"cidr": fmt.Sprintf("10.%d.0.0/25", i), "username": org}, 200)
	}
	p.expectIndex("gone", "[10.0.0.0/25]|gone||", "[10.0.0.0/24]|||")
	p.expectIndex("again", "[10.1.0.0/25]|again||", "[10.1.0.0/24]|||")

	p.stopMapper()
	p.call("DELETE", "/org/gone?confirm=true", nil, 204)
	p.call("DELETE", "/org/again?confirm=true", nil, 204)
	p.call("PUT", "/org/again", nil, 200)
	p.call("PATCH", "/org/again/prefixes", map[string]any{"add": []string{"10.1.0.0/24"}}, 200)
	p.stopOrgManager()
	p.startOrgManager()
	p.startMapper()

	p.expectIndex("gone")
	p.expectIndex("again", "[10.1.0.0/24]|||")
	p.waitSettled("again")
}

// stopMapper stops the IP Mapper and waits until it no longer answers.
func (p *platform) stopMapper() {
	p.t.Helper()
	if err := p.mapper.Stop(); err != nil {
		p.t.Fatal(err)
	}
	// Stop drains the micro service's subscriptions.
	p.eventually("IP Mapper gone", func() bool {
		_, err := p.client.GetSessions(context.Background(), mapperclient.Query{Org: "acme"})
		return err != nil
	}, func() string { return "still answering" })
}

// TestAllCommand runs `svc-pf all` on a fresh data directory: embedded NATS,
// the IP Mapper and the orgmanager in one process.
func TestAllCommand(t *testing.T) {
	cfg := testAllConfig(t)
	all := startAll(t, cfg)
	for _, f := range []string{"orgmanager.db", filepath.Join("nats", "jetstream")} {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, f)); err != nil {
			t.Fatalf("%s is not in the data directory: %v", f, err)
		}
	}
	p := &platform{t: t, base: "http://" + all.OrgManager.Addr().String()}
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/24"}}, 200)
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/25", "username": "a"}, 200)
	p.waitSettled("acme")
	expectUser(t, all.NATS.ClientURL(), "10.0.0.1", "a")

	var health map[string]any
	resp, err := http.Get(p.base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if health["status"] != "ok" {
		t.Fatalf("orgmanager health %v", health)
	}
}

// TestAllWithNATSURL: in `svc-pf all`, a service whose nats.url is set uses
// that server instead of the embedded one.
func TestAllWithNATSURL(t *testing.T) {
	external, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer external.Shutdown()
	cfg := testAllConfig(t)
	cfg.IPMapper.NATS.URL = external.ClientURL()
	cfg.OrgManager.NATS.URL = external.ClientURL()
	all := startAll(t, cfg)
	p := &platform{t: t, base: "http://" + all.OrgManager.Addr().String()}
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/24"}}, 200)
	p.waitSettled("acme")
	expectUser(t, external.ClientURL(), "10.0.0.1", "")
	// The embedded server stays idle: no IP Mapper answers there.
	nc := connectNATS(t, all.NATS.ClientURL(), "t", nil, false)
	client, _ := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Timeout: time.Second})
	if _, err := client.GetSessions(context.Background(), mapperclient.Query{Org: "acme"}); !errors.Is(err, mapperclient.ErrUnavailable) {
		t.Fatalf("an IP Mapper answers on the embedded server: %v", err)
	}
}

func testAllConfig(t testing.TB) AllConfig {
	cfg := DefaultAllConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.OrgManager.HTTP.Address = "127.0.0.1:0"
	cfg.IPMapper.HTTP.Address = "127.0.0.1:0"
	cfg.Node.HTTP.Address = "127.0.0.1:0"
	cfg.Simulator.HTTP.Address = "127.0.0.1:0"
	cfg.Resolver.DNS.Listen = []string{"127.0.0.1:0"}
	cfg.Resolver.Forwarders = []string{"127.0.0.1:9"} // nothing answers: tests that resolve set their own
	cfg.OrgManager.Auth.AdminToken = testAdminToken
	return cfg
}

// startAll starts `svc-pf all`, stops it when the test ends, and waits until
// the IP Mapper is ready.
func startAll(t testing.TB, cfg AllConfig) *All {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	all, err := StartAll(ctx, cfg, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- all.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	mapperHealth := "http://" + all.IPMapper.Addr().String() + "/health"
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(mapperHealth)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return all
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("ipmapper never became healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expectUser asks the IP Mapper on the NATS server at url for the one
// session at ip and checks its username.
func expectUser(t *testing.T, url, ip, user string) {
	t.Helper()
	nc := connectNATS(t, url, "t", nil, false)
	defer nc.Close() // not kept until the end of the test
	client, _ := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Timeout: 5 * time.Second})
	got, err := client.GetSessions(context.Background(), mapperclient.Query{IP: netip.MustParseAddr(ip)})
	if err != nil || len(got) != 1 || got[0].Username != user {
		t.Fatalf("session at %s: %+v %v, want user %q", ip, got, err, user)
	}
}

// connectNATS opens a production connection (natsbus.Connect) for a test
// and closes it when the test ends.
func connectNATS(t testing.TB, url, name string, log *slog.Logger, retry bool, more ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := natsbus.Connect(url, name, log, retry, more...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
