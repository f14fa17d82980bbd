package resolver

import (
	"strings"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// A forwarder's answer is scrubbed before it is cached or passed on: what
// lies outside the question's bailiwick is dropped, section by section, as
// unbound's scrubber (iterator/iter_scrub.c) and PowerDNS Recursor
// (SyncRes::sanitizeRecords) drop it from what they accept. A forwarder
// is asked about every zone, so there is no zone to hold its answer to
// (unbound takes the root for one); the question and the answer's own
// CNAME chain are the bailiwick instead:
//
//   - answer: records owned by the query name or a name of its chain
//     (answerChain), of the query type (any type for ANY), CNAME or RRSIG;
//     a DNAME (and its RRSIG) at or above a name of the chain. Anything
//     else, another name's records above all, is dropped.
//   - authority: SOA, NS, DS, NSEC, NSEC3 and RRSIG only. An SOA or NS
//     must be at or above a name of the chain (the zone that speaks about
//     it), and NS only in a positive answer (both drop NS from NXDOMAIN and
//     NODATA, where spoofed fragments could carry them); DS, NSEC, NSEC3
//     and RRSIG must be at or below a zone of the answer: a kept SOA's or
//     NS's owner, or the signer of a kept answer RRSIG (at or above its
//     owner; a wildcard's proof).
//   - additional: A and AAAA (and their RRSIGs) of a chain name or of a
//     name a kept NS, MX, SRV, SVCB or HTTPS record points at, as glue;
//     nothing else (the forwarder's OPT is its own, the reply gets ours).
//   - every section: class IN only.

// answerChain appends to dst the names qname's answer leads to: the target
// of the (class IN) CNAME owned by qname, then that name's, and so on (a DNAME above
// a name, when no CNAME was synthesised from it, leads where its
// substitution does), fully qualified and lower case. ok is false for a
// chain longer than policy.MaxChain or one that loops.
func answerChain(qname string, answer []dns.RR, dst []string) (chain []string, ok bool) {
	start, cur := len(dst), qname
	for {
		next := ""
		for _, rr := range answer {
			if c, isC := rr.(*dns.CNAME); isC && c.Hdr.Class == dns.ClassINET && strings.EqualFold(c.Hdr.Name, cur) {
				next = c.Target
				break
			}
		}
		if next == "" {
			next = dnameTarget(cur, answer)
		}
		if next == "" {
			return dst, true
		}
		next = dns.CanonicalName(next)
		if len(dst)-start == policy.MaxChain || strings.EqualFold(next, qname) || contains(dst[start:], next) {
			return dst, false
		}
		dst, cur = append(dst, next), next
	}
}

// dnameTarget is the name a DNAME of answer substitutes for name (RFC
// 6672 §2.2), "" when none applies or the result is not a name.
func dnameTarget(name string, answer []dns.RR) string {
	for _, rr := range answer {
		d, ok := rr.(*dns.DNAME)
		if !ok || d.Hdr.Class != dns.ClassINET || d.Hdr.Name == "." || !strictlyBelow(name, d.Hdr.Name) {
			continue
		}
		t := name[:len(name)-len(d.Hdr.Name)] + d.Target
		if _, ok := dns.IsDomainName(t); ok && len(t) <= 255 {
			return t
		}
	}
	return ""
}

// strictlyBelow reports whether name is under parent (not parent itself),
// both fully qualified, on a label boundary, in any letter case.
func strictlyBelow(name, parent string) bool {
	n := len(name) - len(parent)
	return n > 1 && name[n-1] == '.' && strings.EqualFold(name[n:], parent) &&
		(n < 2 || name[n-2] != '\\')
}

// atOrBelow reports whether name is parent or under it.
func atOrBelow(name, parent string) bool {
	return strings.EqualFold(name, parent) || parent == "." || strictlyBelow(name, parent)
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// scrub drops from m, the forwarder's answer to qname and qtype, the
// records outside the question's bailiwick (the rules above); chain is
// answerChain's. It works in place.
func scrub(m *dns.Msg, qname string, qtype uint16, chain []string) {
	onChain := func(name string) bool { return strings.EqualFold(name, qname) || contains(chain, name) }
	aboveChain := func(name string) bool {
		if atOrBelow(qname, name) {
			return true
		}
		for _, c := range chain {
			if atOrBelow(c, name) {
				return true
			}
		}
		return false
	}
	// zones: the owners and signers the authority's DNSSEC records must be
	// under; glue: the names the additional section may hold addresses of.
	var zones, glue []string
	m.Answer = keep(m.Answer, func(rr dns.RR) bool {
		h := rr.Header()
		switch {
		case h.Rrtype == dns.TypeDNAME:
			return aboveChain(h.Name)
		case covers(rr, dns.TypeDNAME):
			return aboveChain(h.Name)
		case !onChain(h.Name):
			return false
		case h.Rrtype == qtype || qtype == dns.TypeANY || h.Rrtype == dns.TypeCNAME:
			glue = appendTargets(glue, rr)
			return true
		case h.Rrtype == dns.TypeRRSIG:
			if sig, ok := rr.(*dns.RRSIG); ok && atOrBelow(h.Name, sig.SignerName) {
				zones = append(zones, sig.SignerName) // the zone that signed it holds its owner
			}
			return true
		}
		return false
	})
	positive := m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0
	m.Ns = keep(m.Ns, func(rr dns.RR) bool {
		h := rr.Header()
		switch h.Rrtype {
		case dns.TypeSOA:
		case dns.TypeNS:
			if !positive {
				return false
			}
		case dns.TypeDS, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeRRSIG:
			return true // judged below, once the zones are known
		default:
			return false
		}
		if !aboveChain(h.Name) {
			return false
		}
		zones = append(zones, h.Name)
		glue = appendTargets(glue, rr)
		return true
	})
	m.Ns = keep(m.Ns, func(rr dns.RR) bool {
		switch h := rr.Header(); h.Rrtype {
		case dns.TypeSOA, dns.TypeNS:
			return true
		default:
			for _, z := range zones {
				if atOrBelow(h.Name, z) {
					return true
				}
			}
			return false
		}
	})
	m.Extra = keep(m.Extra, func(rr dns.RR) bool {
		h := rr.Header()
		if h.Rrtype != dns.TypeA && h.Rrtype != dns.TypeAAAA && !covers(rr, dns.TypeA) && !covers(rr, dns.TypeAAAA) {
			return false
		}
		return onChain(h.Name) || contains(glue, h.Name)
	})
}

// covers reports whether rr is an RRSIG over records of type t.
func covers(rr dns.RR, t uint16) bool {
	sig, ok := rr.(*dns.RRSIG)
	return ok && sig.TypeCovered == t
}

// keep compacts rrs to the records of class IN that ok accepts, in place;
// nil when none is left.
func keep(rrs []dns.RR, ok func(dns.RR) bool) []dns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		if rr.Header().Class == dns.ClassINET && ok(rr) {
			out = append(out, rr)
		}
	}
	clear(rrs[len(out):])
	if len(out) == 0 {
		return nil
	}
	return out
}

// appendTargets appends the names rr points at whose addresses may ride
// along as glue in the additional section.
func appendTargets(names []string, rr dns.RR) []string {
	switch x := rr.(type) {
	case *dns.NS:
		return append(names, x.Ns)
	case *dns.MX:
		return append(names, x.Mx)
	case *dns.SRV:
		return append(names, x.Target)
	case *dns.SVCB:
		return append(names, x.Target)
	case *dns.HTTPS:
		return append(names, x.Target)
	}
	return names
}
