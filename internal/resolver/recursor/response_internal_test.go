package recursor

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func mustRR(t testing.TB, s string) dns.RR {
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func reply(t testing.TB, rcode int, aa bool, ans, ns, extra []string) *dns.Msg {
	m := new(dns.Msg)
	m.Response = true
	m.Rcode = rcode
	m.Authoritative = aa
	for _, s := range ans {
		m.Answer = append(m.Answer, mustRR(t, s))
	}
	for _, s := range ns {
		m.Ns = append(m.Ns, mustRR(t, s))
	}
	for _, s := range extra {
		m.Extra = append(m.Extra, mustRR(t, s))
	}
	return m
}

// TestJudge is the table of what a server's reply is taken to mean, and
// what of it is kept, for a server asked as the authority of zone.
func TestJudge(t *testing.T) {
	cases := []struct {
		name        string
		zone, qname string
		qtype       uint16
		msg         *dns.Msg
		kind        kind
		answer      int      // records kept in the answer
		delegZone   string   // for a referral
		nsNames     []string // for a referral
		glue        []string // names with glue kept
		target      string   // the chain's end, if given
	}{
		{name: "referral with glue in bailiwick", zone: "test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg: reply(t, 0, false, nil, []string{"example.test. 60 IN NS ns1.example.test.", "example.test. 60 IN NS ns.other.net."},
				[]string{"ns1.example.test. 60 IN A 192.0.2.1", "ns.other.net. 60 IN A 6.6.6.6", "www.example.test. 60 IN A 6.6.6.6"}),
			kind: kindReferral, delegZone: "example.test.", nsNames: []string{"ns1.example.test.", "ns.other.net."}, glue: []string{"ns1.example.test."}},
		{name: "glue for a name that is not a nameserver dropped", zone: ".", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, nil, []string{"test. 60 IN NS a.nic.test."}, []string{"a.nic.test. 60 IN A 192.0.2.1", "b.nic.test. 60 IN A 6.6.6.6"}),
			kind: kindReferral, delegZone: "test.", nsNames: []string{"a.nic.test."}, glue: []string{"a.nic.test."}},
		{name: "referral to the zone itself is lame", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, nil, []string{"example.test. 60 IN NS ns1.example.test."}, nil),
			kind: kindLame},
		{name: "upward referral is lame", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, nil, []string{". 60 IN NS a.root-servers.net."}, nil),
			kind: kindLame},
		{name: "sideways referral is lame", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, nil, []string{"other.test. 60 IN NS ns.evil."}, nil),
			kind: kindLame},
		{name: "referral not above the name is lame", zone: "test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, nil, []string{"bank.test. 60 IN NS ns.evil."}, nil),
			kind: kindLame},
		{name: "NS for two cuts is lame", zone: "test.", qname: "www.a.b.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, nil, []string{"b.test. 60 IN NS ns.x.", "a.b.test. 60 IN NS ns.y."}, nil),
			kind: kindLame},
		{name: "answer keeps only the chain", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg: reply(t, 0, true, []string{"www.example.test. 60 IN CNAME web.example.test.", "web.example.test. 60 IN A 192.0.2.1",
				"bank.test. 60 IN A 6.6.6.6", "other.example.test. 60 IN A 6.6.6.6"}, nil, nil),
			kind: kindAnswer, answer: 2},
		{name: "chain leaving the zone stops there", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, true, []string{"www.example.test. 60 IN CNAME www.bank.test.", "www.bank.test. 60 IN A 6.6.6.6"}, nil, nil),
			kind: kindAnswer, answer: 1},
		{name: "DNAME with its CNAME", zone: "example.test.", qname: "www.old.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, true, []string{"old.example.test. 60 IN DNAME new.other.test.", "www.old.example.test. 60 IN CNAME www.new.other.test."}, nil, nil),
			kind: kindAnswer, answer: 2},
		{name: "DNAME without CNAME: ours", zone: "example.test.", qname: "www.old.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, true, []string{"old.example.test. 60 IN DNAME new.other.test."}, nil, nil),
			kind: kindAnswer, answer: 2},
		{name: "DNAME with a CNAME that disagrees: ours", zone: "example.test.", qname: "www.old.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, true, []string{"old.example.test. 60 IN DNAME new.other.test.", "www.old.example.test. 60 IN CNAME evil.test."}, nil, nil),
			kind: kindAnswer, answer: 2, target: "www.new.other.test."},
		{name: "DNAME outside the zone ignored", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, []string{"test. 60 IN DNAME evil."}, nil, nil),
			kind: kindLame},
		{name: "NXDOMAIN with SOA", zone: "example.test.", qname: "nx.example.test.", qtype: dns.TypeA,
			msg:  reply(t, dns.RcodeNameError, true, nil, []string{"example.test. 60 IN SOA ns h 1 2 3 4 5"}, nil),
			kind: kindNXDomain},
		{name: "NXDOMAIN at the end of a chain leaving the zone is about another zone", zone: "example.test.", qname: "a.example.test.", qtype: dns.TypeA,
			msg:  reply(t, dns.RcodeNameError, true, []string{"a.example.test. 60 IN CNAME nx.other.test."}, []string{"other.test. 60 IN SOA ns h 1 2 3 4 5"}, nil),
			kind: kindAnswer, answer: 1},
		{name: "NODATA", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeTXT,
			msg:  reply(t, 0, true, nil, []string{"example.test. 60 IN SOA ns h 1 2 3 4 5"}, nil),
			kind: kindNoData},
		{name: "empty non-authoritative reply is lame", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, 0, false, nil, nil, nil),
			kind: kindLame},
		{name: "REFUSED is lame", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, dns.RcodeRefused, false, nil, nil, nil),
			kind: kindLame},
		{name: "SERVFAIL is lame", zone: "example.test.", qname: "www.example.test.", qtype: dns.TypeA,
			msg:  reply(t, dns.RcodeServerFailure, true, nil, nil, nil),
			kind: kindLame},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := judge(c.msg, c.zone, c.qname, c.qtype)
			if j.kind != c.kind {
				t.Fatalf("kind %v, want %v", j.kind, c.kind)
			}
			if len(j.answer) != c.answer {
				t.Errorf("answer %v, want %d records", j.answer, c.answer)
			}
			if c.target != "" && j.end != c.target {
				t.Errorf("chain ends at %s, want %s", j.end, c.target)
			}
			if c.kind != kindReferral {
				return
			}
			if j.deleg.zone != c.delegZone || !slices.Equal(j.deleg.names, c.nsNames) {
				t.Errorf("delegation %s %v, want %s %v", j.deleg.zone, j.deleg.names, c.delegZone, c.nsNames)
			}
			var glue []string
			for n := range j.deleg.glue {
				glue = append(glue, n)
			}
			slices.Sort(glue)
			if !slices.Equal(glue, c.glue) {
				t.Errorf("glue for %v, want %v", glue, c.glue)
			}
		})
	}
}

func TestRestoreCase(t *testing.T) {
	for _, c := range []struct{ n, want string }{
		{"wWw.ExAmple.TEST.", "www.example.test."},
		{"mail.ExAmple.TEST.", "mail.example.test."},
		{"ns.TEST.", "ns.test."},
		{"other.Example.TEST.", "other.Example.test."}, // only exact suffixes of what was sent
		{"xExAmple.TEST.", "xExAmple.test."},           // a label boundary only
		{"unrelated.net.", "unrelated.net."},
	} {
		if got := restore(c.n, "wWw.ExAmple.TEST.", "www.example.test."); got != c.want {
			t.Errorf("restore(%q) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestParseHints(t *testing.T) {
	h, err := ParseHints(BuiltinHints())
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Names) != 13 || len(h.Addrs["a.root-servers.net."]) != 2 {
		t.Fatalf("built-in hints: %d names, a: %v", len(h.Names), h.Addrs["a.root-servers.net."])
	}
	if !slices.Contains(h.Addrs["k.root-servers.net."], netip.MustParseAddr("193.0.14.129")) {
		t.Fatalf("k: %v", h.Addrs["k.root-servers.net."])
	}
	for _, bad := range []string{
		"",
		". NS a.\n",                             // no address
		"example. NS a.\na. A 192.0.2.1\n",      // not the root's NS
		". NS a.\nb. A 192.0.2.1\n",             // address of another name
		". NS a.\na. A 192.0.2.1\na. MX 1 b.\n", // another type
		". NS a.\na. CH A 192.0.2.1\n",          // another class
		". NS a.\na. A 300.0.2.1\n",             // syntax
	} {
		if _, err := ParseHints(bad); err == nil {
			t.Errorf("ParseHints(%q): no error", bad)
		}
	}
	if _, err := New(Config{Hints: "garbage"}); err == nil {
		t.Error("New with bad hints: no error")
	}
}

// FuzzJudge feeds any reply to the judgement of a server's answer: never a
// panic, and whatever is kept obeys the bailiwick rules.
func FuzzJudge(f *testing.F) {
	add := func(m *dns.Msg, zone, qname string) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, zone, qname)
	}
	add(reply(f, 0, false, nil, []string{"example.test. 60 IN NS ns1.example.test."}, []string{"ns1.example.test. 60 IN A 192.0.2.1"}), "test.", "www.example.test.")
	add(reply(f, 0, true, []string{"www.example.test. 60 IN CNAME a.example.test.", "a.example.test. 60 IN A 192.0.2.1"}, nil, nil), "example.test.", "www.example.test.")
	add(reply(f, 3, true, nil, []string{"example.test. 60 IN SOA ns h 1 2 3 4 5"}, nil), "example.test.", "nx.example.test.")
	add(reply(f, 0, true, []string{"a.x. 60 IN CNAME b.x.", "b.x. 60 IN CNAME a.x."}, nil, nil), "x.", "a.x.")
	f.Fuzz(func(t *testing.T, pkt []byte, zone, qname string) {
		m := new(dns.Msg)
		if m.Unpack(pkt) != nil {
			return
		}
		zone, qname = strings.ToLower(dns.Fqdn(zone)), strings.ToLower(dns.Fqdn(qname))
		if _, ok := dns.IsDomainName(zone); !ok {
			return
		}
		if _, ok := dns.IsDomainName(qname); !ok || !dns.IsSubDomain(zone, qname) {
			return
		}
		for _, qtype := range []uint16{dns.TypeA, dns.TypeCNAME, dns.TypeANY} {
			j := judge(m, zone, qname, qtype)
			for _, rr := range j.answer {
				if !dns.IsSubDomain(zone, strings.ToLower(rr.Header().Name)) {
					t.Fatalf("answer record %v outside %s", rr, zone)
				}
			}
			if j.kind == kindReferral {
				d := j.deleg
				if d.zone == zone || !dns.IsSubDomain(zone, d.zone) || !dns.IsSubDomain(d.zone, qname) || len(d.names) == 0 {
					t.Fatalf("referral to %s from %s for %s", d.zone, zone, qname)
				}
				for n, addrs := range d.glue {
					if !dns.IsSubDomain(zone, n) || !slices.Contains(d.names, n) || len(addrs) == 0 {
						t.Fatalf("glue for %s kept (zone %s, names %v)", n, zone, d.names)
					}
				}
			}
			if j.soa != nil && !dns.IsSubDomain(zone, strings.ToLower(j.soa.Hdr.Name)) {
				t.Fatalf("SOA %v outside %s", j.soa, zone)
			}
			if j.kind == kindNXDomain && m.Rcode != dns.RcodeNameError {
				t.Fatalf("NXDOMAIN from rcode %d", m.Rcode)
			}
			// And undoing 0x20 on it never panics.
			uncase(m, randomCase(qname), qname)
		}
	})
}
