package resolver

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/miekg/dns"
)

// Discovery of Designated Resolvers (RFC 9462): a client that learnt this
// resolver's plain address asks for the SVCB records of
// _dns.resolver.arpa and learns the encrypted endpoints of the same
// resolver, which it then uses instead. The answer is the node's own,
// never forwarded and never decided by a policy (it names no subscriber's
// data).

// ddrName is the special-use name a client asks.
const ddrName = "_dns.resolver.arpa."

// ddrTTL is how long a client may keep the answer: the endpoints change
// only with the config.
const ddrTTL = 300

// ddrRecords builds the SVCB records of the encrypted listeners (nil when
// there are none, or no name to give them): one per listener, DoT, DoH, DoQ,
// in config order, each with its ALPN, port and, for DoH, the URI template
// path; an address hint when the listener is bound to one address (not a
// wildcard). name is dns.tls.name, or the certificate's first DNS name
// that is not a wildcard. A dns.doh3 listener on a DoH listener's address
// and port (UDP beside TCP) adds "h3" to that record's ALPN (an SVCB
// record is one address and port, whatever the protocol); any other gets
// a record of its own, alpn h3, after the DoH ones.
func ddrRecords(c *EncryptedConfig, dot, doh, doq, doh3 []netip.AddrPort) []dns.RR {
	name := c.Name
	if name == "" && c.ACME != nil {
		name = c.ACME.Domains[0]
	}
	if name == "" {
		name = certName(c.CertFile)
	}
	if name == "" || len(dot)+len(doh)+len(doq)+len(doh3) == 0 {
		return nil
	}
	target := dns.Fqdn(strings.ToLower(name))
	var out []dns.RR
	prio := uint16(1)
	add := func(a netip.AddrPort, alpn []string, path string) {
		rr := &dns.SVCB{Hdr: dns.RR_Header{Name: ddrName, Rrtype: dns.TypeSVCB, Class: dns.ClassINET, Ttl: ddrTTL},
			Priority: prio, Target: target}
		prio++
		rr.Value = append(rr.Value, &dns.SVCBAlpn{Alpn: alpn}, &dns.SVCBPort{Port: a.Port()})
		if ip := a.Addr(); ip.IsValid() && !ip.IsUnspecified() {
			if ip.Unmap().Is4() {
				rr.Value = append(rr.Value, &dns.SVCBIPv4Hint{Hint: []net.IP{ip.Unmap().AsSlice()}})
			} else {
				rr.Value = append(rr.Value, &dns.SVCBIPv6Hint{Hint: []net.IP{ip.AsSlice()}})
			}
		}
		if path != "" {
			rr.Value = append(rr.Value, &dns.SVCBDoHPath{Template: path})
		}
		out = append(out, rr)
	}
	for _, a := range dot {
		add(a, []string{"dot"}, "")
	}
	merged := make([]bool, len(doh3))
	for _, a := range doh {
		alpn := []string{"h2", "http/1.1"}
		for i, h := range doh3 {
			if !merged[i] && h.Port() == a.Port() && h.Addr().Unmap() == a.Addr().Unmap() {
				merged[i] = true
				alpn = []string{"h3", "h2", "http/1.1"}
			}
		}
		add(a, alpn, dohPath+"{?dns}")
	}
	for i, a := range doh3 {
		if !merged[i] {
			add(a, []string{"h3"}, dohPath+"{?dns}")
		}
	}
	for _, a := range doq {
		add(a, []string{"doq"}, "")
	}
	return out
}

// certName is the first DNS name of the certificate file's leaf that is
// not a wildcard; "" when there is none or the file does not read.
func certName(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return ""
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return ""
	}
	for _, n := range cert.DNSNames {
		if !strings.HasPrefix(n, "*") {
			return n
		}
	}
	return ""
}

// ddrReply answers a query for _dns.resolver.arpa: the SVCB records for
// type SVCB, NODATA for any other type or when no encrypted listener is
// configured.
func (r *Resolver) ddrReply(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	if req.Question[0].Qtype == dns.TypeSVCB {
		m.Answer = append(m.Answer, r.ddr...)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{soa(ddrName, ddrTTL)}
	}
	return m
}
