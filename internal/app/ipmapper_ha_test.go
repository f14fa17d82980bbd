package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/session"
)

// haLockTTL is the lock TTL of these tests: shorter than the default 3 s
// so that a take-over after a kill takes about a second.
const haLockTTL = time.Second

// haMapper is an IP Mapper as `svc-pf ipmapper` runs it, on a NATS
// connection of its own.
type haMapper struct {
	m    *IPMapper
	base string
	stop func() error
}

func startHAMapper(t *testing.T, url string, mod func(*IPMapperConfig)) *haMapper {
	t.Helper()
	nc := connectNATS(t, url, "ipmapper", nil, true)
	cfg := DefaultIPMapperConfig()
	testMapperAuth(t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.HA.LockTTL = haLockTTL
	if mod != nil {
		mod(&cfg)
	}
	m, err := StartIPMapper(cfg, nc, "test", natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	h := &haMapper{m: m, base: "http://" + m.Addr().String()}
	h.stop = natstest.Background(t, m.Run)
	return h
}

func (h *haMapper) health(t *testing.T) (int, map[string]any) {
	t.Helper()
	code, body := httpGet(t, h.base+"/health")
	var m map[string]any
	_ = json.Unmarshal([]byte(body), &m)
	return code, m
}

// haOrgManager is an orgmanager on its own SQLite database deploying to
// the IP Mapper of bucket.
type haOrgManager struct {
	t    *testing.T
	base string
}

func startHAOrgManager(t *testing.T, url, bucket string) *haOrgManager {
	t.Helper()
	nc := connectNATS(t, url, "orgmanager", nil, true)
	cfg := DefaultOrgManagerConfig()
	withTestToken(t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Database.URL = storetest.URL(t, storetest.SQLite)
	cfg.Sessions.Bucket = bucket
	cfg.Deploy.RetryMin, cfg.Deploy.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.Deploy.PublishTimeout = 2 * time.Second
	om, err := StartOrgManager(context.Background(), cfg, nc, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Background(t, om.Run)
	return &haOrgManager{t: t, base: "http://" + om.Addr().String()}
}

func (o *haOrgManager) call(method, path string, body any, want int) {
	o.t.Helper()
	callAPI(o.t, o.base, method, path, body, want)
}

// settled reports whether the org's changes are all deployed.
func (o *haOrgManager) settled(org string) (bool, string) {
	code, body := httpGet(o.t, o.base+"/org/"+org+"/effective-ranges")
	var rr struct{ Dirty bool }
	if code != 200 || json.Unmarshal([]byte(body), &rr) != nil {
		return false, fmt.Sprint(code, " ", body)
	}
	return !rr.Dirty, body
}

// bucketSessions reads every session in bucket, as "org|allocations|username"
// lines keyed by id.
func bucketSessions(t *testing.T, js jetstream.JetStream, bucket string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for id, v := range natstest.Values(t, kv) {
		s, err := session.Decode(id, v)
		if err != nil {
			t.Fatalf("bucket %s key %s: %v", bucket, id, err)
		}
		out[id] = describeSession(s)
	}
	return out
}

func describeSession(s *session.Session) string {
	return fmt.Sprintf("%s|%v|%s", s.Org, s.Allocations, s.Username)
}

// expectedSessions is what the orgmanager's state implies for org: the
// deploy's own Compute over the prefixes and overrides the test wrote.
func expectedSessions(org string, prefixes []netip.Prefix, overrides map[netip.Prefix]string) map[string]string {
	v := orgstore.View{Prefixes: prefixes}
	for cidr, user := range overrides {
		v.Overrides = append(v.Overrides, orgstore.Override{CIDR: cidr, Attributes: identity.Attributes{Username: user}})
	}
	out := map[string]string{}
	for id, s := range deploy.Compute(org, v).Sessions {
		out[id] = describeSession(&s)
	}
	return out
}

func diffMaps(got, want map[string]string) string {
	var b strings.Builder
	for id, w := range want {
		if g, ok := got[id]; !ok {
			fmt.Fprintf(&b, "\n  missing %s %s", id, w)
		} else if g != w {
			fmt.Fprintf(&b, "\n  %s is %s, want %s", id, g, w)
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			fmt.Fprintf(&b, "\n  stale %s %s", id, g)
		}
	}
	return b.String()
}

// serving lists the instances that answer $SRV.PING.ipmapper for bucket:
// those whose endpoints take requests.
func serving(t *testing.T, nc *nats.Conn, bucket string) []string {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject, _ := micro.ControlSubject(micro.PingVerb, wire.ServiceName, "")
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		msg, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			slices.Sort(out)
			return out
		}
		var p micro.Ping
		if json.Unmarshal(msg.Data, &p) == nil && p.Metadata[wire.MetadataBucket] == bucket {
			out = append(out, p.Metadata[wire.MetadataInstance])
		}
	}
}

// TestIPMapperBucketsIsolated: two IP Mappers of different buckets on one
// NATS, each with its orgmanager, the same organisation name in both. Each
// orgmanager's sessions land in its own bucket only, and deleting the
// organisation on one side empties that bucket and leaves the other's
// sessions alone. With the fixed ipmapper.* subjects of before, the two IP
// Mappers shared one queue group: each orgmanager's sessions were split
// between the buckets, and the delete left the other bucket's share behind.
func TestIPMapperBucketsIsolated(t *testing.T) {
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	for _, bucket := range []string{"sessions", "eu"} {
		h := startHAMapper(t, url, func(c *IPMapperConfig) { c.Sessions.Bucket = bucket })
		natstest.Eventually(t, bucket+" IP Mapper active", func() (bool, string) {
			code, body := h.health(t)
			return code == 200 && body["role"] == "active", fmt.Sprint(code, body)
		})
	}
	oms := map[string]*haOrgManager{"sessions": startHAOrgManager(t, url, "sessions"), "eu": startHAOrgManager(t, url, "eu")}
	want := map[string]map[string]string{}
	for bucket, net := range map[string]string{"sessions": "10.1", "eu": "10.2"} {
		om := oms[bucket]
		prefix := netip.MustParsePrefix(net + ".0.0/16")
		om.call("PUT", "/org/acme", nil, 200)
		om.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{prefix.String()}}, 200)
		overrides := map[netip.Prefix]string{}
		for i := range 20 {
			cidr := netip.MustParsePrefix(fmt.Sprintf("%s.%d.0/24", net, i))
			user := fmt.Sprintf("%s-u%d", bucket, i)
			om.call("POST", "/org/acme/overrides", map[string]any{"cidr": cidr.String(), "username": user}, 200)
			overrides[cidr] = user
		}
		want[bucket] = expectedSessions("acme", []netip.Prefix{prefix}, overrides)
	}
	nc := connectNATS(t, url, "test", nil, true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for bucket, om := range oms {
		natstest.Eventually(t, bucket+" settled", func() (bool, string) { return om.settled("acme") })
		natstest.Eventually(t, "bucket "+bucket+" holds its orgmanager's sessions only", func() (bool, string) {
			d := diffMaps(bucketSessions(t, js, bucket), want[bucket])
			return d == "", d
		})
	}

	oms["sessions"].call("DELETE", "/org/acme?confirm=true", nil, 204)
	natstest.Eventually(t, "bucket sessions emptied by the delete", func() (bool, string) {
		d := diffMaps(bucketSessions(t, js, "sessions"), nil)
		return d == "", d
	})
	if d := diffMaps(bucketSessions(t, js, "eu"), want["eu"]); d != "" {
		t.Fatalf("the other bucket changed with the delete:%s", d)
	}
	if ok, body := oms["eu"].settled("acme"); !ok {
		t.Fatalf("eu's orgmanager dirty: %s", body)
	}
}

// TestIPMapperSameBucketOneActive: two IP Mappers of one bucket — exactly
// one serves; the other is on standby, healthy (200, role standby, the
// holder named) and takes over at once when the active one stops cleanly
// (it releases the lock). A third configured with another lock TTL refuses
// to start.
func TestIPMapperSameBucketOneActive(t *testing.T) {
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	a := startHAMapper(t, url, func(c *IPMapperConfig) { c.HA.Instance = "a" })
	natstest.Eventually(t, "a active", func() (bool, string) {
		code, body := a.health(t)
		return code == 200 && body["role"] == "active", fmt.Sprint(code, body)
	})
	b := startHAMapper(t, url, func(c *IPMapperConfig) { c.HA.Instance = "b" })
	natstest.Eventually(t, "b on standby", func() (bool, string) {
		code, body := b.health(t)
		return code == 200 && body["role"] == "standby" && strings.HasPrefix(fmt.Sprint(body["holder"]), "a "), fmt.Sprint(code, body)
	})
	nc := connectNATS(t, url, "test", nil, true)
	if got := serving(t, nc, "sessions"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("serving bucket sessions: %q, want only a", got)
	}
	for h, want := range map[*haMapper]string{a: "svcpf_ipmapper_active 1", b: "svcpf_ipmapper_active 0"} {
		if _, body := httpGet(t, h.base+"/metrics"); !strings.Contains(body, want+"\n") {
			t.Errorf("%s: metrics lack %q", h.base, want)
		}
	}
	code, body := httpGet(t, b.base+"/sessions?org=acme")
	if code != 503 || !strings.Contains(body, "standby") {
		t.Errorf("GET /sessions on the standby: %d %s", code, body)
	}

	began := time.Now()
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, "b active after a stopped", func() (bool, string) {
		code, body := b.health(t)
		return code == 200 && body["role"] == "active", fmt.Sprint(code, body)
	})
	t.Logf("take-over after a clean stop (lock released): %v", time.Since(began).Round(time.Millisecond))
	if got := serving(t, nc, "sessions"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("serving bucket sessions: %q, want only b", got)
	}

	// A third one whose lock TTL differs from the lock bucket's: Run
	// returns the conflict by itself instead of retrying.
	cfg := DefaultIPMapperConfig()
	testMapperAuth(t, &cfg)
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.HA.LockTTL = 2 * time.Second
	c, err := StartIPMapper(cfg, nc, "test", natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, ipmapper.ErrConflict) || ctx.Err() != nil {
		t.Fatalf("Run with another lock TTL: %v, want ErrConflict before the test's timeout", err)
	}
}

// haHelperEnv names the NATS URL for the killed IP Mapper process; set,
// the test binary (TestMain) runs an IP Mapper as `svc-pf ipmapper` would
// until killed, with the lock TTL in haHelperTTLEnv, instead of the tests.
const (
	haHelperEnv    = "SVCPF_TEST_IPMAPPER_HA_NATS"
	haHelperTTLEnv = "SVCPF_TEST_IPMAPPER_HA_TTL"
)

// TestMain runs the IP Mapper that TestIPMapperKilledDuringDeploys kills
// with SIGKILL when the environment asks for it (a separate process, so
// that nothing of it, not even a deferred release, survives the kill), and
// the tests otherwise.
func TestMain(m *testing.M) {
	if url := os.Getenv(haHelperEnv); url != "" {
		if err := runHAHelperProcess(url); err != nil {
			fmt.Fprintln(os.Stderr, "IP Mapper helper process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Every request of these tests carries the admin token (auth_helpers_test.go).
	http.DefaultTransport = bearerTransport{base: http.DefaultTransport}
	os.Exit(m.Run())
}

func runHAHelperProcess(url string) error {
	cfg := DefaultIPMapperConfig()
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.NATS.URL = url
	ttl, err := time.ParseDuration(os.Getenv(haHelperTTLEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", haHelperTTLEnv, err)
	}
	cfg.HA.LockTTL = ttl
	cfg.HA.Instance = "killed"
	// This helper is killed mid-deploy; nothing asks its GET /sessions.
	cfg.Auth.Mode = AuthNone
	return RunIPMapper(context.Background(), cfg, "test", slog.New(slog.NewTextHandler(os.Stderr, nil)))
}

// TestIPMapperKilledDuringDeploys: the active IP Mapper is a separate
// process, killed with SIGKILL in the middle of a stream of deploys (no
// release of its lock, requests in flight lost). The standby takes over
// once the lock expires, after loading the table; the orgmanager's retries
// carry the deploys over, and at the end the bucket holds exactly the
// sessions the orgmanager's state implies — nothing lost, nothing stale —
// with nothing dirty. It runs with a 1 s lock TTL and with the default.
func TestIPMapperKilledDuringDeploys(t *testing.T) {
	for _, ttl := range []time.Duration{haLockTTL, DefaultIPMapperConfig().HA.LockTTL} {
		t.Run("ttl="+ttl.String(), func(t *testing.T) { testKilledDuringDeploys(t, ttl) })
	}
}

func testKilledDuringDeploys(t *testing.T, ttl time.Duration) {
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	nc := connectNATS(t, url, "test", nil, true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	var procLog syncBuffer
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), haHelperEnv+"="+url, haHelperTTLEnv+"="+ttl.String())
	cmd.Stdout, cmd.Stderr = &procLog, &procLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var killOnce sync.Once
	kill := func() { killOnce.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(kill)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("killed IP Mapper's log:\n%s", procLog.String())
		}
	})
	natstest.Eventually(t, "the IP Mapper process active", func() (bool, string) {
		got := serving(t, nc, "sessions")
		return slices.Equal(got, []string{"killed"}), fmt.Sprintf("serving %q; log:\n%s", got, procLog.String())
	})
	standby := startHAMapper(t, url, func(c *IPMapperConfig) { c.HA.Instance = "standby"; c.HA.LockTTL = ttl })
	natstest.Eventually(t, "standby", func() (bool, string) {
		code, body := standby.health(t)
		return code == 200 && body["role"] == "standby", fmt.Sprint(code, body)
	})

	om := startHAOrgManager(t, url, "sessions")
	prefix := netip.MustParsePrefix("10.0.0.0/16")
	om.call("PUT", "/org/acme", nil, 200)
	om.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{prefix.String()}}, 200)
	overrides := map[netip.Prefix]string{}
	const writes, killAt = 150, 50
	var killed time.Time
	tookOver := make(chan time.Duration, 1)
	watch := func() {
		for standby.m.svc.Role() != ipmapper.RoleActive {
			time.Sleep(5 * time.Millisecond)
		}
		tookOver <- time.Since(killed)
	}
	for i := range writes {
		cidr := netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/24", i))
		user := fmt.Sprint("u", i)
		om.call("POST", "/org/acme/overrides", map[string]any{"cidr": cidr.String(), "username": user}, 200)
		overrides[cidr] = user
		if i%4 == 3 { // and some deletes, so that stale sessions would show
			old := netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/24", i-2))
			om.call("DELETE", "/org/acme/overrides?cidr="+old.String(), nil, 204)
			delete(overrides, old)
		}
		if i == killAt {
			kill()
			killed = time.Now()
			go watch()
			t.Logf("killed the active IP Mapper (SIGKILL) after write %d", i)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case d := <-tookOver:
		t.Logf("take-over after SIGKILL (lock TTL %v): the standby was active (lock taken, table loaded, serving) %v after the kill",
			ttl, d.Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the standby did not take over within 30s of the kill")
	}
	natstest.Eventually(t, "standby's /health says active", func() (bool, string) {
		code, body := standby.health(t)
		return code == 200 && body["role"] == "active", fmt.Sprint(code, body)
	})

	// The orgmanager's deploys all go through; the bucket then holds
	// exactly what its state implies, and so does the new active's table.
	deadline := time.Now().Add(30 * time.Second)
	want := expectedSessions("acme", []netip.Prefix{prefix}, overrides)
	for {
		ok, body := om.settled("acme")
		d := diffMaps(bucketSessions(t, js, "sessions"), want)
		if ok && d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged after 30s: settled %v (%s); bucket vs expected:%s", ok, body, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	found, err := standby.m.svc.Find(ipmapper.Query{Org: "acme"}, ipmapper.SessionsMaxLimit)
	if err != nil {
		t.Fatal(err)
	}
	table := map[string]string{}
	for _, s := range found.Sessions {
		table[s.ID] = describeSession(&s)
	}
	if d := diffMaps(table, want); d != "" {
		t.Fatalf("the new active's table differs from the bucket:%s", d)
	}
	if got := serving(t, nc, "sessions"); !slices.Equal(got, []string{"standby"}) {
		t.Fatalf("serving bucket sessions: %q, want only the former standby", got)
	}
	t.Logf("%d sessions in the bucket, exactly as expected", len(want))
}

// TestBucketConfig: the bucket keys load from YAML and are checked at load
// with an error naming the key; under svc-pf all one bucket serves all
// three services.
func TestBucketConfig(t *testing.T) {
	im := DefaultIPMapperConfig()
	if err := config.Decode([]byte("sessions: {bucket: eu}\nha: {lock_bucket: locks-eu, lock_ttl: 5s, instance: a}\n"), &im); err != nil {
		t.Fatal(err)
	}
	if err := im.Validate(false); err != nil || im.Sessions.Bucket != "eu" || im.HA.LockTTL != 5*time.Second || im.HA.Instance != "a" {
		t.Fatalf("decoded %+v, %v", im, err)
	}
	for yaml, want := range map[string]string{
		"sessions: {bucket: a.b}":       `sessions.bucket: bucket name "a.b": character '.'`,
		"sessions: {bucket: ''}":        "sessions.bucket: bucket name is empty",
		"ha: {lock_bucket: 'x>'}":       "ha.lock_bucket",
		"ha: {lock_bucket: sessions}":   "bucket of their own",
		"ha: {lock_ttl: 10ms}":          "ha.lock_ttl 10ms: must be 300ms..1m",
		"sessions: {bucket: 'eu west'}": "character ' '",
	} {
		cfg := DefaultIPMapperConfig()
		if err := config.Decode([]byte(yaml), &cfg); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ipmapper %s: %v, want %q", yaml, err, want)
		}
	}
	om := DefaultOrgManagerConfig()
	if om.Sessions.Bucket != session.Bucket {
		t.Fatalf("orgmanager default bucket %q", om.Sessions.Bucket)
	}
	if err := config.Decode([]byte("sessions: {bucket: 'a*'}"), &om); err != nil {
		t.Fatal(err)
	}
	if err := om.Validate(); err == nil || !strings.Contains(err.Error(), "sessions.bucket") {
		t.Errorf("orgmanager bucket a*: %v", err)
	}

	all := DefaultAllConfig()
	all.IPMapper.Sessions.Bucket = "eu" // the orgmanager's left at its default follows
	if err := all.Validate(); err != nil {
		t.Fatalf("all with ipmapper bucket eu: %v", err)
	}
	all.OrgManager.Sessions.Bucket = "us"
	if err := all.Validate(); err == nil || !strings.Contains(err.Error(), `orgmanager.sessions.bucket "us" differs`) {
		t.Errorf("all with two buckets: %v", err)
	}
}

// TestAllWiresOneBucket: `svc-pf all` with ipmapper.sessions.bucket set
// wires that one bucket to the orgmanager's deploys and the node's read
// model: a session deployed through the REST API is resolved by the node,
// and the default bucket stays empty.
func TestAllWiresOneBucket(t *testing.T) {
	cfg := testAllConfig(t)
	cfg.IPMapper.Sessions.Bucket = "eu"
	all := startAll(t, cfg)
	om := &haOrgManager{t: t, base: "http://" + all.OrgManager.Addr().String()}
	om.call("PUT", "/org/acme", nil, 200)
	om.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/24"}}, 200)
	om.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/25", "username": "a"}, 200)
	natstest.Eventually(t, "settled", func() (bool, string) { return om.settled("acme") })
	natstest.Eventually(t, "node resolves the session from bucket eu", func() (bool, string) {
		s, ok := all.Node.Models.View().Sessions.LookupIP(netip.MustParseAddr("10.0.0.1"))
		return ok && s.Username() == "a", fmt.Sprint(ok)
	})
	nc := connectNATS(t, all.NATS.ClientURL(), "t", nil, false)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if got := bucketSessions(t, js, "eu"); len(got) != 2 {
		t.Fatalf("bucket eu holds %d sessions, want 2: %v", len(got), got)
	}
	if _, err := js.KeyValue(context.Background(), session.Bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("default bucket: %v, want it never created", err)
	}
}
