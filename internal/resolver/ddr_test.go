package resolver_test

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// TestDDR: _dns.resolver.arpa SVCB, asked over plain UDP, names the DoT
// and DoH endpoints (ALPN, port, the DoH path template, the bound
// address as a hint) under the certificate's name; another type is
// NODATA; without encrypted listeners the SVCB query is NODATA too.
func TestDDR(t *testing.T) {
	e := newEncEnv(t, nil)
	m := new(dns.Msg)
	m.SetQuestion("_dns.resolver.arpa.", dns.TypeSVCB)
	r := e.mustAsk("udp", "", m)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("DDR: %v", r)
	}
	dotPort, dohPort := e.r.DoTAddrs()[0].Port(), e.r.DoHAddrs()[0].Port()
	want := []struct {
		alpn, path string
		port       uint16
	}{{"dot", "", dotPort}, {"h2,http/1.1", "/dns-query{?dns}", dohPort}}
	for i, rr := range r.Answer {
		s, ok := rr.(*dns.SVCB)
		if !ok || s.Target != "dns.example.test." || s.Priority != uint16(i+1) {
			t.Fatalf("record %d: %v", i, rr)
		}
		got := map[string]string{}
		for _, kv := range s.Value {
			got[kv.Key().String()] = kv.String()
		}
		if got["alpn"] != want[i].alpn || got["port"] != strconv.Itoa(int(want[i].port)) || got["dohpath"] != want[i].path ||
			got["ipv4hint"] != "127.0.0.1" {
			t.Fatalf("record %d: %v, want %+v", i, got, want[i])
		}
	}
	m.SetQuestion("_dns.resolver.arpa.", dns.TypeA)
	if r := e.mustAsk("udp", "", m); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Fatalf("DDR type A: %v", r)
	}

	plain := newEnv(t, nil)
	m.SetQuestion("_dns.resolver.arpa.", dns.TypeSVCB)
	if r := plain.mustAsk("udp", "", m); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("DDR without encrypted listeners: %v", r)
	}
	if plain.up.queries.Load() != 0 || e.up.queries.Load() != 0 {
		t.Fatal("_dns.resolver.arpa was forwarded")
	}
}

// TestDDRName: dns.tls.name names the endpoints instead of the
// certificate.
func TestDDRName(t *testing.T) {
	e := newEncEnv(t, func(c *resolver.Config) {
		c.Encrypted.Name = "Resolver.Example.TEST"
		c.Encrypted.DoH = nil
		c.Encrypted.DoT = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}
	})
	m := new(dns.Msg)
	m.SetQuestion("_dns.resolver.arpa.", dns.TypeSVCB)
	r := e.mustAsk("tcp", "", m)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.SVCB).Target != "resolver.example.test." {
		t.Fatalf("DDR: %v", r)
	}
}
