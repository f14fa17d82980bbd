package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// upstreamAnswer is what the fake forwarder answers for every A question.
var upstreamAnswer = netip.MustParseAddr("192.0.2.1")

// startUpstream runs a forwarder on loopback that answers every A query
// with upstreamAnswer (and 10.9.9.9 for names under private.test, for
// blocked_networks), every other type with NODATA.
func startUpstream(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		if q.Qtype == dns.TypeA {
			a := upstreamAnswer.AsSlice()
			if strings.HasSuffix(strings.ToLower(q.Name), "private.test.") {
				a = []byte{10, 9, 9, 9}
			}
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: a}}
		} else {
			m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300},
				Ns: "ns.test.", Mbox: "h.test.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: 60}}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// dnsFrom asks server from the local address from over UDP (EDNS on); a
// nil message is no answer in time (a drop).
func dnsFrom(t testing.TB, from, server, name string, qtype uint16, class uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: time.Second,
		Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}, Timeout: time.Second}}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.Question[0].Qclass = class
	m.SetEdns0(1232, false)
	r, _, err := c.Exchange(m, server)
	if err != nil {
		var ne net.Error
		if asNetErr(err, &ne) && ne.Timeout() {
			return nil
		}
		t.Fatalf("dig @%s -b %s %s: %v", server, from, name, err)
	}
	return r
}

func asNetErr(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// ede returns the Extended DNS Error of m, if any.
func ede(m *dns.Msg) (*dns.EDNS0_EDE, bool) {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return e, true
			}
		}
	}
	return nil, false
}

type platformNode struct {
	t                   testing.TB
	org, sim, node, dns string
}

func (p *platformNode) rest(method, path string, body any, want int) {
	p.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, p.org+path, bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		p.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, rb, want)
	}
}

func (p *platformNode) simulate(q url.Values) map[string]any {
	p.t.Helper()
	resp, err := http.Get(p.sim + "/api/v1/simulate?" + q.Encode())
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		p.t.Fatalf("simulate %s: %d %v %v", q.Encode(), resp.StatusCode, m, err)
	}
	return m
}

func startPlatformNode(t *testing.T, rpzFile string) *platformNode {
	dir := badwareFeed(t)
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: dir, PollInterval: 100 * time.Millisecond}}
	if rpzFile != "" {
		cfg.RPZ = []rpz.ZoneConfig{{Name: "operator", File: rpzFile}}
	}
	cfg.Resolver.Forwarders = []string{startUpstream(t)}
	cfg.Resolver.API.Key = "secret"
	cfg.Resolver.DNS.Debug = true
	cfg.Region = "test-region"
	all := startAll(t, cfg)
	return &platformNode{t: t, org: "http://" + all.OrgManager.Addr().String(), sim: "http://" + all.Simulator.Addr().String(),
		node: "http://" + all.Node.Addr().String(), dns: all.Resolver.DNS.UDPAddrs()[0].String()}
}

// TestSimulateEqualsProduction sends many (client, domain) pairs through
// the resolver over real UDP and through the simulator's HTTP API and
// asserts the same verdict and action for every pair: different
// subscribers, settings, categories, actions, schedules, safe search,
// blocked networks and RPZ hits.
func TestSimulateEqualsProduction(t *testing.T) {
	zone := filepath.Join(t.TempDir(), "operator.rpz")
	if err := os.WriteFile(zone, []byte(`$TTL 60
@ SOA ns.operator.rpz. h.operator.rpz. 1 3600 600 86400 60
nx.rpz.test CNAME .
nodata.rpz.test CNAME *.
drop.rpz.test CNAME rpz-drop.
tc.rpz.test CNAME rpz-tcp-only.
local.rpz.test A 198.51.100.7
*.wild.rpz.test CNAME .
pass.rpz.test CNAME rpz-passthru.
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPlatformNode(t, zone)
	p.rest("PUT", "/org/acme", nil, 200)
	p.rest("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"127.0.0.0/8"}}, 200)
	subscribers := map[string]map[string]any{
		"127.0.0.2": {"blocked_categories": []int{3}},
		"127.0.0.3": {"blocklist": []string{"blocked.test"}, "action": map[string]any{"type": "refused"}},
		"127.0.0.4": {"paused": true, "allowlist": []string{"allowed.test"}},
		"127.0.0.5": {"safe_search": true},
		"127.0.0.6": {"blocked_networks": []string{"10.0.0.0/8"}, "action": map[string]any{"type": "redirect", "a": []string{"192.0.2.99"}}},
		"127.0.0.7": {"filtering": false},
		"127.0.0.8": {"schedules": []map[string]any{{"days": []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"},
			"from": "00:00", "to": "24:00", "tz": "UTC", "blocked_categories": []int{3}}},
			"action": map[string]any{"type": "nodata"}},
		"127.0.0.9": {"blocklist": []string{"blocked.test"}, "action": map[string]any{"type": "cname", "target": "blockpage.test"}},
	}
	for ip, doc := range subscribers {
		user := "u" + strings.ReplaceAll(ip, ".", "-")
		p.rest("POST", "/org/acme/overrides", map[string]any{"cidr": ip + "/32", "username": user}, 200)
		p.rest("PUT", "/org/acme/settings?username="+user, doc, 200)
	}
	p.rest("PUT", "/settings", map[string]any{"blocklist": []string{"global.test"}}, 200)
	clients := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9", "127.0.0.10"}
	domains := []string{"download.7zip.es", "blocked.test", "www.blocked.test", "allowed.test", "clean.test", "www.google.com",
		"www.youtube.com", "host.private.test", "global.test", "nx.rpz.test", "nodata.rpz.test", "drop.rpz.test",
		"tc.rpz.test", "local.rpz.test", "a.wild.rpz.test", "pass.rpz.test"}

	// Wait until the last subscriber's settings are visible to DNS.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m := dnsFrom(t, "127.0.0.9", p.dns, "blocked.test", dns.TypeA, dns.ClassINET)
		if m != nil && len(m.Answer) > 0 && m.Answer[0].Header().Rrtype == dns.TypeCNAME {
			if g := dnsFrom(t, "127.0.0.10", p.dns, "global.test", dns.TypeA, dns.ClassINET); g != nil && g.Rcode == dns.RcodeNameError {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("settings never reached DNS: %v", m)
		}
	}
	seen := map[string]bool{}
	for _, c := range clients {
		for _, d := range domains {
			// rules_ip is what the forwarder answers: DNS decides
			// blocked_networks on it.
			rulesIP := upstreamAnswer.String()
			if strings.HasSuffix(d, "private.test") {
				rulesIP = "10.9.9.9"
			}
			sim := p.simulate(url.Values{"domain": {d}, "ip": {c}, "rules_ip": {rulesIP}})
			m := dnsFrom(t, c, p.dns, d, dns.TypeA, dns.ClassINET)
			verdict, action := fromDNS(m)
			if verdict != sim["verdict"] || action != sim["action"] {
				t.Errorf("%s %s: DNS says %s/%s (%v), the simulator %s/%s (%s, rule %q)", c, d, verdict, action, m,
					sim["verdict"], sim["action"], sim["reason"], sim["rule"])
			}
			seen[fmt.Sprint(sim["action"])] = true
			seen[fmt.Sprint(sim["reason"])] = true
		}
	}
	for _, want := range []string{"allow", "nxdomain", "nodata", "refused", "drop", "truncate", "redirect", "cname",
		"category", "blocklist", "paused", "safe_search", "network", "rpz", "filtering_off", "allowlist", "default"} {
		if !seen[want] {
			t.Errorf("no pair exercised %q", want)
		}
	}
}

// fromDNS reads a verdict and an action off a DNS answer to an A query.
func fromDNS(m *dns.Msg) (verdict, action string) {
	if m == nil {
		return "block", "drop"
	}
	_, blocked := ede(m)
	switch {
	case m.Truncated:
		return "block", "truncate"
	case m.Rcode == dns.RcodeNameError:
		return "block", "nxdomain"
	case m.Rcode == dns.RcodeRefused:
		return "block", "refused"
	case m.Rcode != dns.RcodeSuccess:
		return "error", dns.RcodeToString[m.Rcode]
	case len(m.Answer) == 0:
		return "block", "nodata"
	}
	if cn, ok := m.Answer[0].(*dns.CNAME); ok {
		if blocked {
			return "block", "cname"
		}
		_ = cn
		return "redirect", "cname"
	}
	if a, ok := m.Answer[0].(*dns.A); ok && a.A.String() != upstreamAnswer.String() && a.A.String() != "10.9.9.9" {
		if a.A.String() == "192.0.2.99" { // the block page of 127.0.0.6's settings
			return "block", "redirect"
		}
		return "redirect", "redirect" // RPZ local data
	}
	return "allow", "allow"
}
