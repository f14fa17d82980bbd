package recursor_test

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/dnslab"
	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// recursiveStub is a Go server standing for a recursive forwarder of
// rec.example.: it answers only queries with RD, and records the names it
// was asked.
type recursiveStub struct {
	mu    sync.Mutex
	asked []string
	noRD  int
}

func (s *recursiveStub) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	q := req.Question[0]
	s.mu.Lock()
	s.asked = append(s.asked, strings.ToLower(q.Name))
	if !req.RecursionDesired {
		s.noRD++
	}
	s.mu.Unlock()
	switch {
	case !req.RecursionDesired:
		m.Rcode = dns.RcodeRefused
	case strings.EqualFold(q.Name, "www.rec.example.") && q.Qtype == dns.TypeA:
		rr, _ := dns.NewRR(q.Name + " 300 IN A 192.0.2.99")
		m.Answer = []dns.RR{rr}
	case strings.EqualFold(q.Name, "alias.rec.example."):
		// A chain out of the forward zone, with a record the stub
		// may not speak for (www.secure.test.'s is 192.0.2.10).
		c, _ := dns.NewRR(q.Name + " 300 IN CNAME www.secure.test.")
		a, _ := dns.NewRR("www.secure.test. 300 IN A 203.0.113.66")
		m.Answer = []dns.RR{c, a}
	default:
		soa, _ := dns.NewRR("rec.example. 300 IN SOA ns.rec.example. h.rec.example. 1 3600 600 86400 300")
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	}
	_ = w.WriteMsg(m)
}

// forwardLab is the standard lab with corp.example. (and its child
// dept.corp.example.) served but delegated by nobody, and a recursive
// forwarder stub for rec.example.
func forwardLab(t *testing.T) (*dnslab.Lab, *recursiveStub) {
	d := dnslab.Standard()
	stub := &recursiveStub{}
	for i := range d.Servers {
		if d.Servers[i].Name == "sub" {
			d.Servers[i].Zones = append(d.Servers[i].Zones, "dept.corp.example.")
		}
	}
	d.Servers = append(d.Servers,
		dnslab.Server{Name: "corp", Host: "ns.corp.example.", Zones: []string{"corp.example."}},
		dnslab.Server{Name: "rec", Host: "ns.rec.example.", Handler: stub})
	d.Zones = append(d.Zones,
		dnslab.Zone{Name: "corp.example.", Records: `
@ SOA ns hostmaster 1 3600 600 86400 300
@ NS ns
ns A %corp%
www A 192.0.2.70
intranet CNAME www.secure.test.
dept NS ns.dept
ns.dept A %sub%
`},
		dnslab.Zone{Name: "dept.corp.example.", Records: `
@ SOA ns hostmaster 1 3600 600 86400 300
@ NS ns
ns A %sub%
www A 192.0.2.71
`})
	return dnslab.Start(t, d), stub
}

// TestForwardZones: names at and below a forward zone go to its servers
// (a zone no delegation leads to resolves; its child's referral is
// followed; a chain out of it is resolved by iteration), a recursive
// forwarder is asked with RD and the full name and trusted only within its
// zone, and validation still follows the chain of trust: a forwarded
// signed zone is secure, a forwarded broken one bogus.
func TestForwardZones(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab, stub := forwardLab(t)
	ap := func(name string) netip.AddrPort { return netip.AddrPortFrom(lab.Addr(name), 53) }
	type want struct {
		rcode int
		ans   []string
		state dnssec.State
	}
	check := func(t *testing.T, r *recursor.Recursor, name string, w want) {
		t.Helper()
		m, res, err := resolveDO(t, r, name, dns.TypeA, true, false)
		rcode := dns.RcodeServerFailure
		var ans []string
		if err == nil {
			rcode = m.Rcode
			for _, rr := range m.Answer {
				if a, ok := rr.(*dns.A); ok {
					ans = append(ans, a.A.String())
				}
			}
		}
		if rcode != w.rcode || !slices.Equal(ans, w.ans) || res.State != w.state {
			t.Errorf("%s: %s %q %s (%v); want %s %q %s", name, dns.RcodeToString[rcode], ans, res.State, err,
				dns.RcodeToString[w.rcode], w.ans, w.state)
		}
	}
	ok, nx, servfail := dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure
	t.Run("without", func(t *testing.T) {
		r := newLabRecursor(t, lab.Hints, func(c *recursor.Config) { c.DNSSEC, c.TrustAnchors = recursor.ModeValidate, lab.TrustAnchor })
		check(t, r, "www.corp.example.", want{nx, nil, dnssec.Insecure})
	})
	for _, qmin := range []bool{true, false} {
		r := newLabRecursor(t, lab.Hints, func(c *recursor.Config) {
			c.DNSSEC, c.TrustAnchors = recursor.ModeValidate, lab.TrustAnchor
			c.NoQNAMEMinimisation = !qmin
			c.ForwardZones = []recursor.ForwardZone{
				{Zone: "corp.example", Servers: []netip.AddrPort{ap("corp")}},
				{Zone: "rec.example.", Servers: []netip.AddrPort{ap("rec")}, Recurse: true},
				{Zone: "Secure.Test.", Servers: []netip.AddrPort{ap("sld")}},
				{Zone: "badsig.test.", Servers: []netip.AddrPort{ap("sld")}},
			}
		})
		name := "qmin=false"
		if qmin {
			name = "qmin=true"
		}
		t.Run(name, func(t *testing.T) {
			check(t, r, "www.corp.example.", want{ok, []string{"192.0.2.70"}, dnssec.Insecure})
			check(t, r, "nx.corp.example.", want{nx, nil, dnssec.Insecure})
			check(t, r, "www.dept.corp.example.", want{ok, []string{"192.0.2.71"}, dnssec.Insecure})
			// The chain starts in an insecure zone: insecure as a whole.
			check(t, r, "intranet.corp.example.", want{ok, []string{"192.0.2.10"}, dnssec.Insecure})
			check(t, r, "www.secure.test.", want{ok, []string{"192.0.2.10"}, dnssec.Secure})
			check(t, r, "www.sub.secure.test.", want{ok, []string{"192.0.2.60"}, dnssec.Secure})
			check(t, r, "www.badsig.test.", want{servfail, nil, dnssec.Bogus})
			check(t, r, "www.rec.example.", want{ok, []string{"192.0.2.99"}, dnssec.Insecure})
			check(t, r, "nx.rec.example.", want{nx, nil, dnssec.Insecure})
			// The stub's address for www.secure.test. is not taken.
			check(t, r, "alias.rec.example.", want{ok, []string{"192.0.2.10"}, dnssec.Insecure})
		})
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if stub.noRD != 0 || !slices.Contains(stub.asked, "www.rec.example.") {
		t.Errorf("recursive forwarder asked %q, %d without RD: want full names, all with RD", stub.asked, stub.noRD)
	}
	for _, n := range stub.asked {
		if !dns.IsSubDomain("rec.example.", n) {
			t.Errorf("recursive forwarder asked about %s, outside its zone", n)
		}
	}
}

func TestForwardZoneConfig(t *testing.T) {
	s := netip.MustParseAddrPort("192.0.2.1:53")
	for _, fz := range [][]recursor.ForwardZone{
		{{Zone: "", Servers: []netip.AddrPort{s}}},
		{{Zone: "a..b", Servers: []netip.AddrPort{s}}},
		{{Zone: "corp.example."}},
		{{Zone: "corp.example.", Servers: []netip.AddrPort{s}}, {Zone: "CORP.example", Servers: []netip.AddrPort{s}}},
		{{Zone: "corp.example.", Servers: []netip.AddrPort{{}}}},
		{{Zone: "corp.example.", Servers: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:53")}}},
		{{Zone: "corp.example.", Servers: []netip.AddrPort{s, netip.MustParseAddrPort("192.0.2.1:5353")}}},
	} {
		if _, err := recursor.New(recursor.Config{ForwardZones: fz}); err == nil {
			t.Errorf("New accepted forward zones %+v", fz)
		}
	}
	if _, err := recursor.New(recursor.Config{ForwardZones: []recursor.ForwardZone{{Zone: ".", Servers: []netip.AddrPort{s}, Recurse: true}}}); err != nil {
		t.Errorf("forwarding the root: %v", err)
	}
}
