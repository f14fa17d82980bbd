package app

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"layeh.com/radius"
	"layeh.com/radius/rfc2865"
	"layeh.com/radius/rfc2866"

	internalradius "github.com/svc-pf/svc-pf/internal/radius"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

const e2eRadiusSecret = "e2e-radius-secret"

// radiusExchange sends one Accounting-Request from a NAS on 127.0.0.1,
// retransmitting it as a NAS would, and fails unless it is answered
// within 30s.
func radiusExchange(t testing.TB, to netip.AddrPort, status rfc2866.AcctStatusType, sid, user, ip string) {
	t.Helper()
	p := radius.New(radius.CodeAccountingRequest, []byte(e2eRadiusSecret))
	_ = rfc2866.AcctStatusType_Set(p, status)
	_ = rfc2866.AcctSessionID_SetString(p, sid)
	if user != "" {
		_ = rfc2865.UserName_SetString(p, user)
	}
	if ip != "" {
		_ = rfc2865.FramedIPAddress_Set(p, net.ParseIP(ip))
	}
	b, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// As a NAS does, the same request is sent again from the same port
	// until it is answered: the server leaves a request it could not
	// store unanswered (an IP Mapper that is still starting, a loaded
	// machine), and answers a retransmission of a stored one again.
	buf := make([]byte, 4096)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, err := c.Read(buf)
		if err == nil {
			if !radius.IsAuthenticResponse(buf[:n], b, []byte(e2eRadiusSecret)) {
				t.Fatalf("an answer that is not a valid Accounting-Response: % x", buf[:n])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Accounting-Response after 30s of retransmissions: %v", err)
		}
	}
}

// TestRadiusStartAppliesOrgPolicy runs `svc-pf all` with radius: and checks
// the whole path: an Accounting Start for an address makes DNS from that
// address follow the realm's organisation and the user's settings, and
// the Stop ends it. The Start follows the settings write at once, so the
// organisation's deploy (which cleans its sessions below its revision)
// runs beside it: it must leave the RADIUS session alone (producers).
func TestRadiusStartAppliesOrgPolicy(t *testing.T) {
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: badwareFeed(t), PollInterval: 100 * time.Millisecond}}
	cfg.Resolver.Forwarders = []string{startUpstream(t)}
	cfg.Radius = internalradius.Config{
		Listen:  []string{"127.0.0.1:0"},
		Clients: []internalradius.ClientConfig{{Network: "127.0.0.1", Secret: e2eRadiusSecret, Org: "acme"}},
		Realms:  map[string]string{"example.net": "netco"},
	}
	all := startAll(t, cfg)
	p := &platformNode{t: t, org: "http://" + all.OrgManager.Addr().String(), dns: all.Resolver.DNS.UDPAddrs()[0].String()}
	p.rest("PUT", "/org/netco", nil, 200)
	p.rest("PUT", "/org/netco/settings?username=dave", map[string]any{"blocklist": []string{"blocked.test"}}, 200)
	nasAddr := all.Radius.Server.Addrs()[0]

	const sub = "127.0.0.42"
	verdict := func(from string) string {
		v, _ := fromDNS(dnsFrom(t, from, p.dns, "blocked.test", dns.TypeA, dns.ClassINET))
		return v
	}
	waitFor := func(from, want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); verdict(from) != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("DNS from %s never got %q", sub, want)
			}
		}
	}
	radiusExchange(t, nasAddr, rfc2866.AcctStatusType_Value_Start, "e2e-1", "dave@example.net", sub)
	waitFor(sub, "block")
	radiusExchange(t, nasAddr, rfc2866.AcctStatusType_Value_Stop, "e2e-1", "dave@example.net", "")
	waitFor(sub, "allow")
}

// BenchmarkRadiusStartToPolicy measures, under `svc-pf all`, the time from
// sending an Accounting Start for a new address to the first DNS query
// from that address that gets the realm organisation's user's policy
// (polled every 2 ms, so figures are within 2 ms). One op is one new
// subscriber; p50 and p99 are reported. bench/radius.sh runs it.
func BenchmarkRadiusStartToPolicy(b *testing.B) {
	cfg := testAllConfig(b)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: badwareFeed(b), PollInterval: 100 * time.Millisecond}}
	cfg.Resolver.Forwarders = []string{startUpstream(b)}
	cfg.Radius = internalradius.Config{
		Listen:  []string{"127.0.0.1:0"},
		Clients: []internalradius.ClientConfig{{Network: "127.0.0.1", Secret: e2eRadiusSecret, Org: "acme"}},
		Realms:  map[string]string{"example.net": "netco"},
	}
	all := startAll(b, cfg)
	p := &platformNode{t: b, org: "http://" + all.OrgManager.Addr().String(), dns: all.Resolver.DNS.UDPAddrs()[0].String()}
	p.rest("PUT", "/org/netco", nil, 200)
	p.rest("PUT", "/org/netco/settings?username=dave", map[string]any{"blocklist": []string{"blocked.test"}}, 200)
	nasAddr := all.Radius.Server.Addrs()[0]
	verdict := func(from string) string {
		v, _ := fromDNS(dnsFrom(b, from, p.dns, "blocked.test", dns.TypeA, dns.ClassINET))
		return v
	}
	// The user's settings on the node first (see TestRadiusStartAppliesOrgPolicy).
	p.rest("PATCH", "/org/netco/prefixes", map[string]any{"add": []string{"127.0.0.250/32"}}, 200)
	p.rest("POST", "/org/netco/overrides", map[string]any{"cidr": "127.0.0.250/32", "username": "dave"}, 200)
	for deadline := time.Now().Add(30 * time.Second); verdict("127.0.0.250") != "block"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the settings never reached the node")
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		sub := netip.AddrFrom4([4]byte{127, byte(1 + i/250%200), byte(1 + i%250), 1}).String()
		t0 := time.Now()
		radiusExchange(b, nasAddr, rfc2866.AcctStatusType_Value_Start, fmt.Sprintf("lat-%d", i), "dave@example.net", sub)
		for verdict(sub) != "block" {
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("%s never got the policy: %v", sub, dnsFrom(b, sub, p.dns, "blocked.test", dns.TypeA, dns.ClassINET))
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}
