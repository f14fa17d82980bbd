package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// resolverReloadFile is a `svc-pf resolver` file on loopback with
// kernel-chosen ports and no NATS.
func resolverReloadFile(forwarder, allowFrom, level, more string) string {
	return fmt.Sprintf(`dns:
  listen: [127.0.0.1:0]
http:
  address: 127.0.0.1:0
forwarders: [%s]
allow_from: %s
log:
  level: %s
  format: json
activity:
  enabled: false
%s`, forwarder, allowFrom, level, more)
}

// loadReloadable loads path as a service's start does (LoadChecked over
// def), with its logs (logOf's section) going to a buffer, and a Reloader
// that re-reads path the same way.
func loadReloadable[C any, P Checkable[C]](t *testing.T, path string, def func() C, logOf func(C) LogConfig) (C, *Reloader[C], *syncBuffer, *Logging) {
	t.Helper()
	cfg, err := LoadChecked[C, P](path, true, def)
	if err != nil {
		t.Fatal(err)
	}
	logs := new(syncBuffer)
	lg := NewLogging(logs, logOf(cfg), false)
	rl, err := NewReloader(ReloaderConfig[C]{Path: path, Current: cfg, Logger: lg.Logger,
		Load: func(p string) (C, error) { return LoadChecked[C, P](p, true, def) }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, rl, logs, lg
}

// startReloadableResolver runs RunResolver on path as `svc-pf resolver`
// does (the same LoadChecked, Logging and log.level step) and returns its
// reloader, its DNS address and its JSON logs.
func startReloadableResolver(t *testing.T, path string) (*Reloader[ResolverConfig], string, *syncBuffer, *Logging) {
	t.Helper()
	t.Setenv("NATS_URL", "")
	logOf := func(c ResolverConfig) LogConfig { return c.Log }
	cfg, rl, logs, lg := loadReloadable(t, path, DefaultResolverConfig, logOf)
	rl.Register(LogLevelStep(lg, logOf))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunResolver(ctx, cfg, "test", lg.Logger, rl) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("resolver: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("resolver did not stop")
		}
	})
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, rec := range jsonLines(t, logs.String()) {
			if rec["msg"] == "resolver listening" {
				if l, ok := rec["dns"].([]any); ok && len(l) > 0 {
					addr, _ = l[0].(string)
				}
			}
		}
		select {
		case err := <-done:
			t.Fatalf("resolver stopped: %v\n%s", err, logs.String())
		default:
		}
	}
	if addr == "" {
		t.Fatalf("no \"resolver listening\" line in the logs:\n%s", logs.String())
	}
	return rl, addr, logs, lg
}

// jsonLines parses every log line as a JSON object with time, level and
// msg, failing on any other.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Fatalf("log line without %q: %q", k, line)
			}
		}
		out = append(out, rec)
	}
	return out
}

// logged waits for a JSON log line with msg containing each of want.
func logged(t *testing.T, logs *syncBuffer, level string, want ...string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	lines:
		for _, rec := range jsonLines(t, logs.String()) {
			msg := fmt.Sprint(rec["msg"], " ", rec["err"])
			if rec["level"] != level {
				continue
			}
			for _, w := range want {
				if !strings.Contains(msg, w) {
					continue lines
				}
			}
			return rec
		}
	}
	t.Fatalf("no %s log line with %q in:\n%s", level, want, logs.String())
	return nil
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ask asks addr for name's A from the local address from, failing on no
// answer (a client outside allow_from gets none: use dnsFrom).
func ask(t *testing.T, from, addr, name string) *dns.Msg {
	t.Helper()
	r := dnsFrom(t, from, addr, name, dns.TypeA, dns.ClassINET)
	if r == nil {
		t.Fatalf("no answer from %s to %s for %s", addr, from, name)
	}
	return r
}

func answered(r *dns.Msg, want netip.Addr) bool {
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		return false
	}
	a, ok := r.Answer[0].(*dns.A)
	return ok && a.A.Equal(want.AsSlice())
}

// TestResolverReload: a reload applies allow_from (a refused client
// becomes served), log.level and a new RPZ zone, says what changed and
// names what needs a restart; a bad file changes nothing at all.
func TestResolverReload(t *testing.T) {
	up := startUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "resolver.yaml")
	writeFile(t, path, resolverReloadFile(up, "[127.0.0.2/32]", "info", ""))
	rl, addr, logs, lg := startReloadableResolver(t, path)

	if r := dnsFrom(t, "127.0.0.1", addr, "a.example.test", dns.TypeA, dns.ClassINET); r != nil {
		t.Fatalf("127.0.0.1 outside allow_from was answered: %v", r)
	}
	if r := ask(t, "127.0.0.2", addr, "blocked.rpz.test"); !answered(r, upstreamAnswer) {
		t.Fatalf("127.0.0.2 before the zone: %v", r)
	}
	if lg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("debug enabled at log.level info")
	}

	zone := filepath.Join(dir, "op.rpz")
	writeFile(t, zone, "$TTL 60\n@ SOA ns.op.rpz. h.op.rpz. 1 3600 600 86400 60\nblocked.rpz.test CNAME .\n")
	writeFile(t, path, resolverReloadFile(up, "[127.0.0.1/32, 127.0.0.2/32]", "debug",
		"rpz:\n  - name: op\n    file: "+zone+"\n"))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	rec := logged(t, logs, "INFO", "reload: ", "allow_from [127.0.0.2/32] → [127.0.0.1/32 127.0.0.2/32]",
		"log.level info → debug", "rpz [] → [op="+zone+"]", "forwarders unchanged", "feeds unchanged")
	t.Logf("logged: %s", rec["msg"])
	if r := ask(t, "127.0.0.1", addr, "a.example.test"); !answered(r, upstreamAnswer) {
		t.Fatalf("127.0.0.1 after allow_from took it in: %v", r)
	}
	if !lg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("log.level debug not applied")
	}
	// The packet cache held the answer from before the zone; it empties
	// within the resolver's housekeeping second.
	blocked := false
	for deadline := time.Now().Add(10 * time.Second); !blocked && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		blocked = ask(t, "127.0.0.2", addr, "blocked.rpz.test").Rcode == dns.RcodeNameError
	}
	if !blocked {
		t.Fatal("the RPZ zone added by the reload does not block blocked.rpz.test")
	}

	// Bad files: each would widen allow_from, drop the zone and lower the
	// level; none may apply any of it.
	for _, bad := range []struct{ name, body, why string }{
		{"unknown key", resolverReloadFile(up, "[127.0.0.0/8]", "warn", "bogus: 1\n"), `unknown key "bogus"`},
		{"invalid value", resolverReloadFile(up, "[127.0.0.0/8, nope]", "warn", ""), `allow_from[1] "nope": want a CIDR`},
		{"unset variable", resolverReloadFile(up, "[127.0.0.0/8]", "${SVCPF_TEST_RELOAD_UNSET}", ""), "${SVCPF_TEST_RELOAD_UNSET} is not set"},
		{"bad zone", resolverReloadFile(up, "[127.0.0.0/8]", "warn", "rpz: [{name: Op, file: x}]\n"), `rpz[0]: name "Op"`},
		{"mode change", resolverReloadFile(up, "[127.0.0.0/8]", "warn", "mode: recursive\n"), "mode: forward → recursive needs a restart"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			writeFile(t, path, bad.body)
			if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), bad.why) {
				t.Fatalf("Reload() = %v, want an error with %q", err, bad.why)
			}
			logged(t, logs, "ERROR", "reload refused", bad.why)
			if r := dnsFrom(t, "127.0.0.3", addr, "a.example.test", dns.TypeA, dns.ClassINET); r != nil {
				t.Fatalf("127.0.0.3 answered after a refused reload (the old allow_from leaves it out): %v", r)
			}
			if r := ask(t, "127.0.0.1", addr, "b.example.test"); !answered(r, upstreamAnswer) {
				t.Fatalf("a query after a refused reload: %v", r)
			}
			if r := ask(t, "127.0.0.2", addr, "blocked.rpz.test"); r.Rcode != dns.RcodeNameError {
				t.Fatalf("the zone after a refused reload: %v", r)
			}
			if !lg.Logger.Enabled(context.Background(), slog.LevelDebug) {
				t.Fatal("a refused reload changed the log level")
			}
		})
	}

	// A key that needs a restart is named; the rest applies.
	writeFile(t, path, strings.Replace(resolverReloadFile(up, "[127.0.0.0/8]", "debug", "rpz:\n  - name: op\n    file: "+zone+"\n"),
		"listen: [127.0.0.1:0]", "listen: [127.0.0.1:0, '[::1]:0']", 1))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	logged(t, logs, "WARN", "reload: dns.listen changed; restart to apply")
	if r := ask(t, "127.0.0.3", addr, "c.example.test"); !answered(r, upstreamAnswer) {
		t.Fatalf("127.0.0.3 after allow_from 127.0.0.0/8: %v", r)
	}
	if got := rl.Current().AllowFrom; len(got) != 1 || got[0] != "127.0.0.0/8" {
		t.Fatalf("the reloader's config in force: allow_from %v", got)
	}
}

// startUpstreamAnswering is a forwarder on loopback that answers every A
// question with a.
func startUpstreamAnswering(t *testing.T, a netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		if q := req.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: a.AsSlice()}}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// TestResolverReloadForwarders: a reload moves the resolver to new
// forwarders, and says so.
func TestResolverReloadForwarders(t *testing.T) {
	up := startUpstream(t)
	other := netip.MustParseAddr("198.51.100.77")
	up2 := startUpstreamAnswering(t, other)
	dir := t.TempDir()
	path := filepath.Join(dir, "resolver.yaml")
	writeFile(t, path, resolverReloadFile(up, "[127.0.0.0/8]", "info", ""))
	rl, addr, logs, _ := startReloadableResolver(t, path)
	if r := ask(t, "127.0.0.1", addr, "first.example.test"); !answered(r, upstreamAnswer) {
		t.Fatalf("before: %v", r)
	}
	writeFile(t, path, resolverReloadFile(up2, "[127.0.0.0/8]", "info", ""))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	logged(t, logs, "INFO", fmt.Sprintf("forwarders [%s] → [%s]", up, up2))
	if r := ask(t, "127.0.0.1", addr, "second.example.test"); !answered(r, other) {
		t.Fatalf("a new name after the reload was not asked of the new forwarder: %v", r)
	}
}

func TestRestartKeys(t *testing.T) {
	a := DefaultAllConfig()
	b := DefaultAllConfig()
	b.Log.Level = "debug"
	b.Log.Format = "json"
	b.Resolver.DNS.Listen = []string{"127.0.0.1:53"}
	b.Resolver.DNS.Cache.Packet.Entries++
	b.Resolver.AllowFrom = []string{"10.0.0.0/8"}
	b.Feeds = nil
	b.NATS.Listen = "127.0.0.1:4224"
	got := restartKeys(a, b, []string{"log.level", "resolver.allow_from", "feeds"})
	want := []string{"log.format", "nats.listen", "resolver.dns.listen", "resolver.dns.packet_cache.entries"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restartKeys = %v, want %v", got, want)
	}
	if got := restartKeys(a, a, nil); len(got) != 0 {
		t.Fatalf("restartKeys of one config = %v", got)
	}
}

// TestAllReload: under `svc-pf all` a reload applies resolver.allow_from
// and log.level and names a changed key of another service as needing a
// restart.
func TestAllReload(t *testing.T) {
	cfg := testAllConfig(t)
	cfg.Resolver.Forwarders = []string{startUpstream(t)}
	cfg.Resolver.AllowFrom = []string{"127.0.0.2/32"}
	cfg.Log = LogConfig{Level: "info", Format: "json"}
	next := cfg
	logs := new(syncBuffer)
	lg := NewLogging(logs, cfg.Log, false)
	rl, err := NewReloader(ReloaderConfig[AllConfig]{Path: "all.yaml", Current: cfg, Logger: lg.Logger,
		Load: func(string) (AllConfig, error) { return next, next.Check() }})
	if err != nil {
		t.Fatal(err)
	}
	rl.Register(LogLevelStep(lg, func(c AllConfig) LogConfig { return c.Log }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunAll(ctx, cfg, "test", lg.Logger, rl) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunAll: %v", err)
		}
	}()
	rec := logged(t, logs, "INFO", "resolver listening")
	addr := rec["dns"].([]any)[0].(string)
	if r := dnsFrom(t, "127.0.0.1", addr, "a.example.test", dns.TypeA, dns.ClassINET); r != nil {
		t.Fatalf("127.0.0.1 outside allow_from was answered: %v", r)
	}

	next.Resolver.AllowFrom = []string{"127.0.0.0/8"}
	next.Log.Level = "debug"
	next.OrgManager.HTTP.Address = "127.0.0.1:1"
	next.Resolver.DNS.Block.TTL = 5 * time.Minute
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	logged(t, logs, "INFO", "resolver.allow_from [127.0.0.2/32] → [127.0.0.0/8]", "log.level info → debug", "rpz unchanged", "feeds unchanged")
	logged(t, logs, "WARN", "reload: orgmanager.http.address, resolver.dns.block.ttl changed; restart to apply")
	if r := ask(t, "127.0.0.1", addr, "a.example.test"); !answered(r, upstreamAnswer) {
		t.Fatalf("127.0.0.1 after the reload: %v", r)
	}

	bad := next
	bad.Resolver.AllowFrom = []string{"127.0.0.1/32"}
	bad.Resolver.HTTP.Address = "127.0.0.1:9" // refused under svc-pf all
	next = bad
	if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), "resolver.http: under svc-pf all") {
		t.Fatalf("Reload of a bad config: %v", err)
	}
	if r := ask(t, "127.0.0.3", addr, "b.example.test"); !answered(r, upstreamAnswer) {
		t.Fatalf("127.0.0.3 after a refused reload (allow_from 127.0.0.0/8 stays): %v", r)
	}
}

// TestSimulatorReload: `svc-pf simulator` applies a reload's rpz and
// feeds to its node, as the resolver does: a zone and a feed added by the
// file show in simulations at once, a bad file changes nothing, and a
// feed removed stops counting.
func TestSimulatorReload(t *testing.T) {
	bus := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, b := range []string{session.Bucket, settings.Bucket} {
		if _, err := bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	zone := filepath.Join(dir, "op.rpz")
	writeFile(t, zone, "$TTL 60\n@ SOA ns.op.rpz. h.op.rpz. 1 3600 600 86400 60\nblocked.rpz.test CNAME .\n")
	feedDir := smallFeed(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	file := func(more string) string {
		return fmt.Sprintf("http:\n  address: %s\nnats:\n  url: %s\nlog:\n  level: info\n  format: json\n%s", httpAddr, bus.Srv.ClientURL(), more)
	}
	path := filepath.Join(dir, "simulator.yaml")
	writeFile(t, path, file(""))
	cfg, rl, logs, lg := loadReloadable(t, path, DefaultSimulatorConfig, func(c SimulatorConfig) LogConfig { return c.Log })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- RunSimulator(runCtx, cfg, "test", lg.Logger, false, rl) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("simulator: %v", err)
		}
	}()
	base := "http://" + httpAddr
	waitHealth(t, base, http.StatusOK, 30*time.Second)
	reason := func(domain string) string {
		t.Helper()
		code, body := httpGet(t, base+"/api/v1/simulate?ip=127.0.0.2&domain="+domain)
		var out struct{ Reason string }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
			t.Fatalf("simulate %s: %d %s", domain, code, body)
		}
		return out.Reason
	}
	categorised := func() bool {
		t.Helper()
		code, body := httpGet(t, base+"/api/v1/domain?domain=bad.example")
		if code != http.StatusOK {
			t.Fatalf("domain: %d %s", code, body)
		}
		return strings.Contains(body, `"code":3`)
	}
	if r := reason("blocked.rpz.test"); r != "default" || categorised() {
		t.Fatalf("before the reload: reason %q, categorised %v", r, categorised())
	}

	withBoth := "rpz:\n  - name: op\n    file: " + zone + "\nfeeds:\n  - name: g\n    url: " + feedDir + "\n    poll_interval: 100ms\n"
	writeFile(t, path, file(withBoth))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	logged(t, logs, "INFO", "reload: ", "rpz [] → [op="+zone+"]", "feeds [] → [g="+feedDir+"]")
	if r := reason("blocked.rpz.test"); r != "rpz" {
		t.Fatalf("the zone added by the reload: reason %q, want rpz", r)
	}
	natstest.Eventually(t, "the feed added by the reload", func() (bool, string) { return categorised(), "" })

	// A bad file (a zone name that is not one) drops nothing.
	writeFile(t, path, file("rpz: [{name: Op, file: x}]\n"))
	if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), `rpz[0]: name "Op"`) {
		t.Fatalf("a reload naming a bad zone: %v", err)
	}
	logged(t, logs, "ERROR", "reload refused", `rpz[0]: name "Op"`)
	if r := reason("blocked.rpz.test"); r != "rpz" || !categorised() {
		t.Fatalf("after a refused reload: reason %q, categorised %v", r, categorised())
	}

	writeFile(t, path, file(""))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := reason("blocked.rpz.test"); r != "default" || categorised() {
		t.Fatalf("after the reload removing both: reason %q, categorised %v", r, categorised())
	}
}

// TestResolverReloadForwardZones: in forward mode a reload adds a forward
// zone (a name under it, asked before of the default forwarder and cached,
// now comes from the zone's server), says so, and removes it again; a bad
// zone is refused naming the key, and the routing stays.
func TestResolverReloadForwardZones(t *testing.T) {
	up := startUpstream(t)
	corpA := netip.MustParseAddr("198.51.100.10")
	corp := startUpstreamAnswering(t, corpA)
	dir := t.TempDir()
	path := filepath.Join(dir, "resolver.yaml")
	writeFile(t, path, resolverReloadFile(up, "[127.0.0.0/8]", "info", ""))
	rl, addr, logs, _ := startReloadableResolver(t, path)
	if r := ask(t, "127.0.0.1", addr, "www.corp.example"); !answered(r, upstreamAnswer) {
		t.Fatalf("before: %v", r)
	}
	zones := fmt.Sprintf("forward_zones:\n  - {zone: corp.example, forwarders: ['%s'], recurse: true}\n", corp)
	writeFile(t, path, resolverReloadFile(up, "[127.0.0.0/8]", "info", zones))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	logged(t, logs, "INFO", "forwarders ["+up+"] → ["+up+"]", fmt.Sprintf("forward_zones [] → [corp.example.=[%s]]", corp))
	for _, name := range []string{"www.corp.example", "corp.example", "x.y.corp.example"} {
		if r := ask(t, "127.0.0.1", addr, name); !answered(r, corpA) {
			t.Fatalf("%s after adding the zone: %v", name, r)
		}
	}
	if r := ask(t, "127.0.0.1", addr, "www.example.test"); !answered(r, upstreamAnswer) {
		t.Fatalf("a name outside the zone: %v", r)
	}

	writeFile(t, path, resolverReloadFile(up, "[127.0.0.0/8]", "info", "forward_zones: [{zone: corp.example, forwarders: ['nope']}]\n"))
	if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), `forward_zones[0].forwarders[0] "nope"`) {
		t.Fatalf("bad zone: Reload() = %v", err)
	}
	if r := ask(t, "127.0.0.1", addr, "z.corp.example"); !answered(r, corpA) {
		t.Fatalf("after a refused reload: %v", r)
	}

	writeFile(t, path, resolverReloadFile(up, "[127.0.0.0/8]", "info", ""))
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := ask(t, "127.0.0.1", addr, "www.corp.example"); !answered(r, upstreamAnswer) {
		t.Fatalf("after removing the zone: %v", r)
	}
}
