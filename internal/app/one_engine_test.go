package app

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAllBuildsOneEngine: `svc-pf all` builds one policy engine, handed to
// the simulator and the resolver, so they share one cache of compiled
// policies: a client's policy compiled for a simulation is the one DNS
// answers that client from. The node's /metrics shows it: after a
// simulation and a DNS query from the same client, one miss (one
// compilation), and the DNS query a hit. Two engines would compile twice.
func TestAllBuildsOneEngine(t *testing.T) {
	cfg := testAllConfig(t)
	cfg.Resolver.Forwarders = []string{startUpstream(t)}
	all := startAll(t, cfg)
	p := &platformNode{t: t, sim: "http://" + all.Simulator.Addr().String(), node: "http://" + all.Node.Addr().String(),
		dns: all.Resolver.DNS.UDPAddrs()[0].String()}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(p.node + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Ready: the settings bucket is loaded, so the client's documents no
	// longer change under the test.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := get("/health")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node never ready: %d %s", code, body)
		}
	}
	lookups := func(result string) int {
		t.Helper()
		_, body := get("/metrics")
		m := regexp.MustCompile(`svcpf_policy_cache_lookups_total\{result="` + result + `"\} (\d+)`).FindStringSubmatch(body)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	sim := p.simulate(url.Values{"domain": {"clean.test"}, "ip": {"127.0.0.5"}})
	if sim["verdict"] != "allow" {
		t.Fatalf("simulate: %v", sim)
	}
	if miss := lookups("miss"); miss != 1 {
		t.Fatalf("after one simulation: %d misses, want 1", miss)
	}
	if m := dnsFrom(t, "127.0.0.5", p.dns, "clean.test", dns.TypeA, dns.ClassINET); m == nil || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("DNS: %v", m)
	}
	if miss, hit := lookups("miss"), lookups("hit"); miss != 1 || hit < 1 {
		t.Fatalf("after the simulation and a DNS query from the same client: %d misses, %d hits; want 1 miss (one engine, one compilation) and a hit", miss, hit)
	}
}
