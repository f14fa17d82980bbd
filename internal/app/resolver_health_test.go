package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// TestResolverHealthShowsForwarders: a node's /health lists its
// forwarders with their state; when none answers it stays ready (the
// caches still answer and filtering holds) but says so in a warning, and
// the warning leaves once a probe finds the forwarder back.
func TestResolverHealthShowsForwarders(t *testing.T) {
	ports := freePorts(t, 4)
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	fwd := fmt.Sprintf("127.0.0.1:%d", ports[3]) // nothing listens yet
	_, _, js := startNATSOn(t, ports[0])
	natstest.CreateBucket(t, js, session.Bucket)
	natstest.Put(t, natstest.CreateBucket(t, js, settings.Bucket), settings.GlobalKey, []byte(`{}`))
	cfg := testResolverConfig(t, ports)
	cfg.Forwarders = []string{fwd}
	runResolver(t, cfg)
	type health struct {
		Status     string `json:"status"`
		Warning    string `json:"warning"`
		Forwarders []struct {
			Address string `json:"address"`
			Up      bool   `json:"up"`
		} `json:"forwarders"`
	}
	get := func() (int, health, string) {
		code, body := httpGet(t, base+"/health")
		var h health
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("/health: %v: %s", err, body)
		}
		return code, h, body
	}
	waitHealth(t, base, http.StatusOK, 30*time.Second)
	if _, h, body := get(); len(h.Forwarders) != 1 || h.Forwarders[0].Address != fwd || !h.Forwarders[0].Up || h.Warning != "" {
		t.Fatalf("before any query: %s", body)
	}

	// A miss goes to the dead forwarder: refused, so down.
	if m := dnsFrom(t, "127.0.0.1", dnsAddr, "miss.test", dns.TypeA, dns.ClassINET); m == nil || m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("miss with the forwarder down: %v", m)
	}
	natstest.Eventually(t, "/health warning that no forwarder answers", func() (bool, string) {
		code, h, body := get()
		return code == http.StatusOK && h.Status == "ok" && len(h.Forwarders) == 1 && !h.Forwarders[0].Up &&
			strings.Contains(h.Warning, "none of the 1 forwarders answers"), body
	})

	// The forwarder comes up on its address: a probe finds it.
	pc, err := net.ListenPacket("udp", fwd)
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	natstest.Eventually(t, "/health without the warning once the forwarder answers", func() (bool, string) {
		code, h, body := get()
		return code == http.StatusOK && len(h.Forwarders) == 1 && h.Forwarders[0].Up && h.Warning == "", body
	})
}

// TestResolverHealthShowsForwardZones: /health lists a forward zone's
// servers beside the default forwarders, each with its zone; a zone whose
// servers do not answer gets a warning of its own while the default
// forwarders stay up.
func TestResolverHealthShowsForwardZones(t *testing.T) {
	ports := freePorts(t, 4)
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	dead := fmt.Sprintf("127.0.0.1:%d", ports[3]) // nothing listens
	_, _, js := startNATSOn(t, ports[0])
	natstest.CreateBucket(t, js, session.Bucket)
	natstest.Put(t, natstest.CreateBucket(t, js, settings.Bucket), settings.GlobalKey, []byte(`{}`))
	cfg := testResolverConfig(t, ports)
	cfg.ForwardZones = []ForwardZoneConfig{{Zone: "corp.example", Forwarders: []string{dead}, Recurse: true}}
	runResolver(t, cfg)
	type health struct {
		Warning    string `json:"warning"`
		Forwarders []struct {
			Address string `json:"address"`
			Up      bool   `json:"up"`
			Zone    string `json:"zone"`
		} `json:"forwarders"`
	}
	get := func() (int, health, string) {
		code, body := httpGet(t, base+"/health")
		var h health
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("/health: %v: %s", err, body)
		}
		return code, h, body
	}
	waitHealth(t, base, http.StatusOK, 30*time.Second)
	if _, h, body := get(); len(h.Forwarders) != 2 || h.Forwarders[0].Address != cfg.Forwarders[0] || h.Forwarders[0].Zone != "" ||
		h.Forwarders[1].Address != dead || h.Forwarders[1].Zone != "corp.example." || !strings.Contains(body, `"zone":"corp.example."`) {
		t.Fatalf("forwarders: %s", body)
	}
	if m := dnsFrom(t, "127.0.0.1", dnsAddr, "www.corp.example", dns.TypeA, dns.ClassINET); m == nil || m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("a name of the dead zone: %v", m)
	}
	if m := dnsFrom(t, "127.0.0.1", dnsAddr, "www.example.test", dns.TypeA, dns.ClassINET); m == nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("a name outside the zone: %v", m)
	}
	natstest.Eventually(t, "/health warning for the zone only", func() (bool, string) {
		code, h, body := get()
		return code == http.StatusOK && len(h.Forwarders) == 2 && h.Forwarders[0].Up && !h.Forwarders[1].Up &&
			strings.Contains(h.Warning, "forward zone corp.example.") && !strings.Contains(h.Warning, "none of the 1 forwarders"), body
	})
}

// TestHeartbeatStatesWhatHealthStates: a resolver whose NATS has no
// sessions bucket yet answers unfiltered; its heartbeat in svcpf_nodes
// says so, as its /health does, not only that a bucket is missing.
func TestHeartbeatStatesWhatHealthStates(t *testing.T) {
	ports := freePorts(t, 3)
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	_, _, js := startNATSOn(t, ports[0])
	natstest.Put(t, natstest.CreateBucket(t, js, settings.Bucket), settings.GlobalKey, []byte(`{}`))

	cfg := testResolverConfig(t, ports)
	cfg.Node.Name, cfg.Node.Heartbeat = "beat-node", 50*time.Millisecond
	runResolver(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const line = "resolver answering unfiltered (resolver.unready: open)"
	natstest.Eventually(t, "/health stating the unready answers", func() (bool, string) {
		code, body := httpGet(t, base+"/health")
		return code == http.StatusServiceUnavailable && strings.Contains(body, line), body
	})
	kv, err := js.KeyValue(ctx, nodehealth.Bucket)
	natstest.Eventually(t, "the heartbeat stating the unready answers", func() (bool, string) {
		if err != nil {
			kv, err = js.KeyValue(ctx, nodehealth.Bucket)
			return false, fmt.Sprint(err)
		}
		e, gerr := kv.Get(ctx, "beat-node")
		if gerr != nil {
			return false, gerr.Error()
		}
		var beat struct {
			Ready    bool   `json:"ready"`
			NotReady string `json:"not_ready"`
		}
		if uerr := json.Unmarshal(e.Value(), &beat); uerr != nil {
			return false, uerr.Error()
		}
		return !beat.Ready && strings.Contains(beat.NotReady, line) && strings.Contains(beat.NotReady, "the sessions bucket"), string(e.Value())
	})
}

// testResolverConfig is `svc-pf resolver`'s default config with its NATS,
// HTTP and DNS on 127.0.0.1 at ports[0], ports[1] and ports[2], a
// forwarder that answers everything, and an API key.
func testResolverConfig(t *testing.T, ports []int) ResolverConfig {
	t.Helper()
	cfg := DefaultResolverConfig()
	cfg.NATS.URL = fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	cfg.HTTP.Address = fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg.DNS.Listen = []string{fmt.Sprintf("127.0.0.1:%d", ports[2])}
	cfg.Forwarders = []string{startUpstream(t)}
	cfg.API.Key = "k"
	return cfg
}

// runResolver runs `svc-pf resolver` with cfg until the test ends, and
// fails the test if it returns an error.
func runResolver(t *testing.T, cfg ResolverConfig) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunResolver(ctx, cfg, "test", slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("resolver: %v", err)
		}
	})
}
