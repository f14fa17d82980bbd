package resolver_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// TestForwarderTTLCapped: a TTL from the forwarder is served as the record
// cache serves it, on a miss as on a hit: one with the top bit set is 0
// (RFC 2181 §8), raised to record_cache.min_ttl (1 s); a huge one is cut
// to max_ttl (24 h). The miss, the record-cache hit (another class) and
// the packet-cache hit say the same.
func TestForwarderTTLCapped(t *testing.T) {
	fwd := handlerUpstream(t, func(req *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		ttl := uint32(1<<32 - 1)
		if strings.HasPrefix(q.Name, "big.") {
			ttl = 1<<31 - 1
		}
		m.Answer = []dns.RR{rrA(q.Name, ttl, "192.0.2.1")}
		return m
	})
	e := newEnv(t, func(c *resolver.Config) { c.Forwarders = []netip.AddrPort{fwd} })
	for _, tc := range []struct {
		name string
		want uint32
	}{{"top-bit.test", 1}, {"big.test", 86400}} {
		for _, st := range []struct{ from, what string }{
			{"127.0.0.1", "miss"}, {"127.0.0.8", "record cache hit"}, {"127.0.0.1", "packet cache hit"}} {
			r := e.mustAsk("udp", st.from, query(tc.name, dns.TypeA, 1232, false))
			if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != tc.want {
				t.Errorf("%s, %s: %v; want TTL %d", tc.name, st.what, r.Answer, tc.want)
			}
		}
	}
	if n := e.stat("cache-hits"); n != 2 {
		t.Errorf("cache-hits %d, want 2", n)
	}
}

// TestForwarderBADVERS: a forwarder's BADVERS (to our EDNS version 0) is
// its failure, not the client's rcode: SERVFAIL over UDP and TCP, or the
// next forwarder's answer.
func TestForwarderBADVERS(t *testing.T) {
	badvers := rawUpstream(t, 0, func(q []byte) [][]byte {
		return [][]byte{answerFor(q, func(m *dns.Msg) {
			m.Answer = nil
			m.SetEdns0(1232, false)
			m.Rcode = dns.RcodeBadVers
		})}
	})
	e := newEnv(t, func(c *resolver.Config) {
		c.Forwarders = []netip.AddrPort{badvers}
		c.Upstream = upstream.Config{Timeout: 200 * time.Millisecond, MaxTime: 600 * time.Millisecond}
	})
	for _, netw := range []string{"udp", "tcp"} {
		r := e.mustAsk(netw, "", query("badvers-"+netw+".test", dns.TypeA, 1232, false))
		if r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: rcode %s, want SERVFAIL", netw, dns.RcodeToString[r.Rcode])
		}
	}
	good := startUpstream(t).addr
	e = newEnv(t, func(c *resolver.Config) { c.Forwarders = []netip.AddrPort{badvers, good} })
	for i := range 3 { // whichever comes first
		r := e.mustAsk("udp", "", query(fmt.Sprintf("badvers-%d.test", i), dns.TypeA, 1232, false))
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("with a good forwarder beside it: %v", r)
		}
	}
}

// bailiwickAnswer is a forwarder that stuffs every section with records
// of other names beside the ones asked for.
func bailiwickAnswer(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	q := req.Question[0]
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		return r
	}
	switch strings.ToLower(q.Name) {
	case "www.scrub.test.":
		m.Answer = []dns.RR{rr("www.scrub.test. 300 IN A 192.0.2.1"), rr("bank.example. 300 IN A 203.0.113.66"),
			rr("www.scrub.test. 300 IN TXT \"other type\""), rr("www.scrub.test. 300 CH A 192.0.2.9")}
		m.Ns = []dns.RR{rr("scrub.test. 300 IN NS ns.scrub.test."), rr("bank.example. 300 IN NS ns.evil.example."),
			rr("www.scrub.test. 300 IN A 192.0.2.2"), rr("other.example. 300 IN SOA ns. h. 1 1 1 1 60"),
			rr("bank.example. 300 IN NSEC z.bank.example. A")}
		m.Extra = []dns.RR{rr("ns.scrub.test. 300 IN A 192.0.2.53"), rr("ns.evil.example. 300 IN A 203.0.113.53"),
			rr("www.bank.example. 300 IN A 203.0.113.80"), rr("scrub.test. 300 IN TXT \"extra\"")}
	case "chain.scrub.test.":
		m.Answer = []dns.RR{rr("chain.scrub.test. 300 IN CNAME a.scrub.test."), rr("unrelated.example. 300 IN A 203.0.113.1"),
			rr("a.scrub.test. 300 IN A 192.0.2.3"), rr("a.scrub.test. 300 IN AAAA 2001:db8::3")}
	case "nx.scrub.test.":
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{rr("scrub.test. 300 IN SOA ns.scrub.test. h.scrub.test. 1 1 1 1 60"),
			rr("scrub.test. 300 IN NS ns.scrub.test."), rr("bank.example. 300 IN SOA ns. h. 1 1 1 1 60"),
			rr("mx.scrub.test. 300 IN NSEC ny.scrub.test. A"), rr("bank.example. 300 IN NSEC z.bank.example. A")}
		m.Extra = []dns.RR{rr("ns.scrub.test. 300 IN A 192.0.2.53")}
	case "x.d.scrub.test.":
		m.Answer = []dns.RR{rr("d.scrub.test. 300 IN DNAME e.example."), rr("x.d.scrub.test. 300 IN CNAME x.e.example."),
			rr("x.e.example. 300 IN A 192.0.2.5"), rr("y.e.example. 300 IN A 203.0.113.5")}
	case "x.dd.scrub.test.": // a DNAME without the CNAME synthesised from it
		m.Answer = []dns.RR{rr("dd.scrub.test. 300 IN DNAME f.example."), rr("x.f.example. 300 IN A 192.0.2.6"),
			rr("z.f.example. 300 IN A 203.0.113.6")}
	case "w.wild.scrub.test.": // a wildcard's answer, its proof in the authority section
		m.Answer = []dns.RR{rr("w.wild.scrub.test. 300 IN A 192.0.2.8"),
			rr("w.wild.scrub.test. 300 IN RRSIG A 13 3 300 20300101000000 20200101000000 1 scrub.test. c2ln")}
		m.Ns = []dns.RR{rr("v.wild.scrub.test. 300 IN NSEC x.wild.scrub.test. A RRSIG NSEC"),
			rr("v.wild.scrub.test. 300 IN RRSIG NSEC 13 4 300 20300101000000 20200101000000 1 scrub.test. c2ln"),
			rr("a.bank.example. 300 IN NSEC c.bank.example. A")}
	case "loop.scrub.test.":
		m.Answer = []dns.RR{rr("loop.scrub.test. 300 IN CNAME loop2.scrub.test."), rr("loop2.scrub.test. 300 IN CNAME loop.scrub.test.")}
	case "long.scrub.test.", "ten.scrub.test.":
		hops := 11
		if strings.HasPrefix(q.Name, "ten.") {
			hops = 10
		}
		owner := q.Name
		for i := range hops {
			next := fmt.Sprintf("h%d.scrub.test.", i)
			m.Answer = append(m.Answer, rrCNAME(owner, next))
			owner = next
		}
		m.Answer = append(m.Answer, rrA(owner, 300, "192.0.2.4"))
	}
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(1232, opt.Do())
	}
	return m
}

// sectionText is the records of a section as text, TTLs left out.
func sectionText(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		f := strings.Fields(rr.String())
		out = append(out, f[0]+" "+strings.Join(f[2:], " "))
	}
	return out
}

// TestForwarderBailiwick: the forwarder's records outside the question's
// bailiwick are dropped from every section before the answer is cached or
// passed on (unbound's scrubber, PowerDNS's sanitizeRecords): the answer
// section keeps the query name's chain, the authority section SOA and NS
// at or above it (NS in positive answers only), the additional section the
// glue of kept NS records, DNSSEC records in the zone of a kept SOA or of
// the signer of the answer. A
// DNAME's substitution is followed as a CNAME's target. A CNAME chain that loops or is longer than
// policy.MaxChain is SERVFAIL. The miss (UDP) and the record-cache hit
// (TCP) carry the same answer and authority.
func TestForwarderBailiwick(t *testing.T) {
	fwd := handlerUpstream(t, bailiwickAnswer)
	e := newEnv(t, func(c *resolver.Config) { c.Forwarders = []netip.AddrPort{fwd} })
	cases := []struct {
		name              string
		rcode             int
		answer, ns, extra []string
	}{
		{name: "www.scrub.test", rcode: dns.RcodeSuccess,
			answer: []string{"www.scrub.test. IN A 192.0.2.1"},
			ns:     []string{"scrub.test. IN NS ns.scrub.test."},
			extra:  []string{"ns.scrub.test. IN A 192.0.2.53"}},
		{name: "chain.scrub.test", rcode: dns.RcodeSuccess,
			answer: []string{"chain.scrub.test. IN CNAME a.scrub.test.", "a.scrub.test. IN A 192.0.2.3"}},
		{name: "nx.scrub.test", rcode: dns.RcodeNameError,
			ns: []string{"scrub.test. IN SOA ns.scrub.test. h.scrub.test. 1 1 1 1 60", "mx.scrub.test. IN NSEC ny.scrub.test. A"}},
		{name: "x.d.scrub.test", rcode: dns.RcodeSuccess,
			answer: []string{"d.scrub.test. IN DNAME e.example.", "x.d.scrub.test. IN CNAME x.e.example.", "x.e.example. IN A 192.0.2.5"}},
		{name: "x.dd.scrub.test", rcode: dns.RcodeSuccess,
			answer: []string{"dd.scrub.test. IN DNAME f.example.", "x.f.example. IN A 192.0.2.6"}},
		{name: "w.wild.scrub.test", rcode: dns.RcodeSuccess,
			answer: []string{"w.wild.scrub.test. IN A 192.0.2.8",
				"w.wild.scrub.test. IN RRSIG A 13 3 300 20300101000000 20200101000000 1 scrub.test. c2ln"},
			ns: []string{"v.wild.scrub.test. IN NSEC x.wild.scrub.test. A RRSIG NSEC",
				"v.wild.scrub.test. IN RRSIG NSEC 13 4 300 20300101000000 20200101000000 1 scrub.test. c2ln"}},
		{name: "loop.scrub.test", rcode: dns.RcodeServerFailure},
		{name: "long.scrub.test", rcode: dns.RcodeServerFailure},
	}
	for _, tc := range cases {
		for _, netw := range []string{"udp", "tcp"} {
			r := e.mustAsk(netw, "", query(tc.name, dns.TypeA, 1232, false))
			what := tc.name + " over " + netw
			if r.Rcode != tc.rcode {
				t.Errorf("%s: rcode %s, want %s", what, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			wantExtra := tc.extra
			if netw == "tcp" {
				wantExtra = nil // the record cache keeps no additional section
			}
			for _, s := range []struct {
				name      string
				got, want []string
			}{{"answer", sectionText(r.Answer), tc.answer}, {"authority", sectionText(r.Ns), tc.ns},
				{"additional", sectionText(r.Extra), wantExtra}} {
				if strings.Join(s.got, "\n") != strings.Join(s.want, "\n") {
					t.Errorf("%s: %s section\n%s\nwant\n%s", what, s.name, strings.Join(s.got, "\n"), strings.Join(s.want, "\n"))
				}
			}
		}
	}
	r := e.mustAsk("udp", "", query("ten.scrub.test", dns.TypeA, 1232, false))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 11 || !r.Answer[10].(*dns.A).A.Equal(net.IPv4(192, 0, 2, 4)) {
		t.Errorf("a chain of 10 CNAMEs: %v", r)
	}
}
