package recursor

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
)

// kind is what an authoritative server's reply means for the name asked.
type kind int

const (
	// kindLame: the reply says nothing usable about the name (a failure
	// rcode, a referral sideways or upwards, an empty non-authoritative
	// reply): ask another server of the zone.
	kindLame kind = iota
	// kindAnswer: records for the name (perhaps a CNAME chain that ends
	// outside the reply); rcode NOERROR.
	kindAnswer
	// kindNXDomain: the name (or the end of the CNAME chain in answer)
	// does not exist.
	kindNXDomain
	// kindNoData: the name exists without records of the type.
	kindNoData
	// kindReferral: the zone is delegated further down; deleg says where.
	kindReferral
	// kindYXDomain: a DNAME substitution made a name too long.
	kindYXDomain
)

func (k kind) String() string {
	return [...]string{"lame", "answer", "NXDOMAIN", "NODATA", "referral", "YXDOMAIN"}[k]
}

// delegation is a zone's nameservers as a referral gave them, with the glue
// that passed the bailiwick check.
type delegation struct {
	zone  string   // lower case
	names []string // nameserver names, lower case
	ttl   uint32   // the NS RRset's smallest TTL
	glue  map[string][]netip.Addr
	gttl  uint32 // the smallest TTL of the glue kept
}

// judged is a reply's meaning.
type judged struct {
	kind kind
	// answer: the CNAME chain from qname and the records of qtype at its
	// end, as far as the reply has them within the server's zone.
	answer []dns.RR
	// end is the last name of the chain (qname when there is no CNAME).
	end string
	// soa: the zone's SOA of a negative reply, if it had one in bailiwick.
	soa *dns.SOA
	// deleg: where a referral points.
	deleg *delegation
	// glue, gttl: for an NS answer, the addresses of the NS names that the
	// additional section gave within the zone (a priming answer's).
	glue map[string][]netip.Addr
	gttl uint32
	// sigs, proof: with DNSSEC on, the answer's RRSIGs and the authority
	// section's denial proofs (see attachSec).
	sigs  []*dns.RRSIG
	proof []dns.RR
}

// maxChainInReply bounds the CNAMEs taken from one reply.
const maxChainInReply = 16

// judge reads reply, the answer of a server asked as an authority for zone
// about qname/qtype, and keeps only what that server may speak for: records
// owned by names within zone. qname and zone are lower case, FQDN.
//
// Rules (as unbound's and PowerDNS's iterators apply them):
//   - Only NOERROR, NXDOMAIN and YXDOMAIN speak about the name; any other
//     rcode makes the server lame for this query.
//   - The answer is the chain from qname: records of qtype owned by the
//     current name, or else its CNAME, whose target becomes the current
//     name; records owned by other names are dropped (an injected
//     "www.bank. A" in the answer section of evil.example.'s reply is not
//     taken), and so is any record outside zone.
//   - A referral is NS records in the authority section, all owned by one
//     name strictly below zone and at or above the name sought, in a reply
//     without answer records. Glue is an A/AAAA record in the additional
//     section owned by one of those NS names and within zone; other glue
//     is dropped (an out-of-bailiwick server is resolved on its own).
//     A referral to zone itself or above it is lame (a loop otherwise).
//   - A negative reply's SOA must be owned by zone or a name within it
//     that is at or above the name sought.
//   - NOERROR with nothing at all is NODATA only from an authoritative
//     server (AA); otherwise lame.
func judge(reply *dns.Msg, zone, qname string, qtype uint16) judged {
	switch reply.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeYXDomain:
	default:
		return judged{kind: kindLame}
	}
	j := judged{end: qname}
	j.answer, j.end = chain(reply.Answer, zone, qname, qtype)
	switch reply.Rcode {
	case dns.RcodeNameError:
		if !dnssec.IsSubDomain(zone, j.end) {
			// The chain left the zone: the NXDOMAIN is about a name
			// this server is not asked about.
			j.kind = kindAnswer
			return j
		}
		j.kind = kindNXDomain
		j.soa = negativeSOA(reply.Ns, zone, j.end)
		return j
	case dns.RcodeYXDomain:
		j.kind = kindYXDomain
		return j
	}
	if len(j.answer) > 0 {
		last := j.answer[len(j.answer)-1]
		if last.Header().Rrtype == dns.TypeCNAME && qtype != dns.TypeCNAME {
			// The chain leaves the reply: the rest is the caller's to
			// follow, unless the server said the target has no data.
			if soa := negativeSOA(reply.Ns, zone, j.end); soa != nil && reply.Authoritative && dnssec.IsSubDomain(zone, j.end) {
				j.kind, j.soa = kindNoData, soa
				return j
			}
		}
		j.kind = kindAnswer
		if qtype == dns.TypeNS {
			var names []string
			for _, rr := range j.answer {
				if ns, ok := rr.(*dns.NS); ok {
					names = append(names, strings.ToLower(dns.Fqdn(ns.Ns)))
				}
			}
			j.glue, j.gttl = glueFor(reply.Extra, zone, names)
		}
		return j
	}
	if d := referral(reply, zone, qname); d != nil {
		j.kind, j.deleg = kindReferral, d
		return j
	}
	if soa := negativeSOA(reply.Ns, zone, qname); soa != nil {
		j.kind, j.soa = kindNoData, soa
		return j
	}
	if reply.Authoritative && !hasNS(reply.Ns) {
		j.kind = kindNoData
		return j
	}
	return judged{kind: kindLame}
}

// chain follows qname through the answer section: CNAMEs and the records of
// qtype at the end, all owned by names within zone.
func chain(answer []dns.RR, zone, qname string, qtype uint16) ([]dns.RR, string) {
	var out []dns.RR
	cur := qname
	seen := 0
	for {
		if !dnssec.IsSubDomain(zone, cur) {
			return out, cur
		}
		var found []dns.RR
		var cname *dns.CNAME
		for _, rr := range answer {
			h := rr.Header()
			if h.Class != dns.ClassINET || !strings.EqualFold(h.Name, cur) {
				continue
			}
			if h.Rrtype == qtype || qtype == dns.TypeANY {
				found = append(found, rr)
			} else if c, ok := rr.(*dns.CNAME); ok && cname == nil {
				cname = c
			}
		}
		if len(found) > 0 {
			return append(out, found...), cur
		}
		var next string
		if d := dnameAbove(answer, zone, cur); d != nil && qtype != dns.TypeDNAME {
			// A DNAME above the name redirects its whole subtree: the
			// DNAME goes in the answer, then the CNAME it implies
			// (the server's synthesised one if it sent the same, ours
			// otherwise: old servers send none).
			owner := strings.ToLower(d.Hdr.Name)
			next = cur[:len(cur)-len(owner)] + strings.ToLower(dns.Fqdn(d.Target))
			if _, ok := dns.IsDomainName(next); !ok || len(next) > 255 {
				return out, cur
			}
			if cname == nil || !strings.EqualFold(dns.Fqdn(cname.Target), next) {
				cname = &dns.CNAME{Hdr: dns.RR_Header{Name: cur, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: d.Hdr.Ttl}, Target: next}
			}
			out = append(out, d, cname)
		} else if cname != nil {
			out = append(out, cname)
			next = strings.ToLower(dns.Fqdn(cname.Target))
		} else {
			return out, cur
		}
		if seen++; seen > maxChainInReply || inChain(out[:len(out)-1], next) || next == qname {
			// A loop, or too long: stop here; the caller bounds the
			// chain as a whole.
			return out, next
		}
		cur = next
	}
}

// dnameAbove finds a DNAME in answer owned by a proper ancestor of name
// within zone.
func dnameAbove(answer []dns.RR, zone, name string) *dns.DNAME {
	for _, rr := range answer {
		d, ok := rr.(*dns.DNAME)
		if !ok || d.Hdr.Class != dns.ClassINET {
			continue
		}
		owner := strings.ToLower(d.Hdr.Name)
		if owner != name && dnssec.IsSubDomain(owner, name) && dnssec.IsSubDomain(zone, owner) {
			return d
		}
	}
	return nil
}

func inChain(rrs []dns.RR, name string) bool {
	for _, rr := range rrs {
		if strings.EqualFold(rr.Header().Name, name) {
			return true
		}
	}
	return false
}

func negativeSOA(ns []dns.RR, zone, name string) *dns.SOA {
	for _, rr := range ns {
		soa, ok := rr.(*dns.SOA)
		if !ok || soa.Hdr.Class != dns.ClassINET {
			continue
		}
		owner := strings.ToLower(soa.Hdr.Name)
		if dnssec.IsSubDomain(zone, owner) && dnssec.IsSubDomain(owner, name) {
			return soa
		}
	}
	return nil
}

func hasNS(rrs []dns.RR) bool {
	return slices.ContainsFunc(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeNS })
}

// referral reads a delegation from reply's authority and additional
// sections, or returns nil when there is none that the rules allow.
func referral(reply *dns.Msg, zone, qname string) *delegation {
	var d *delegation
	for _, rr := range reply.Ns {
		ns, ok := rr.(*dns.NS)
		if !ok || ns.Hdr.Class != dns.ClassINET {
			continue
		}
		owner := strings.ToLower(ns.Hdr.Name)
		if d == nil {
			// Strictly below the zone asked, at or above the name sought.
			if owner == zone || !dnssec.IsSubDomain(zone, owner) || !dnssec.IsSubDomain(owner, qname) {
				return nil
			}
			d = &delegation{zone: owner, ttl: ns.Hdr.Ttl}
		} else if owner != d.zone {
			// NS records for two different cuts: not a referral we trust.
			return nil
		}
		name := strings.ToLower(dns.Fqdn(ns.Ns))
		if _, ok := dns.IsDomainName(name); !ok || name == "." {
			continue
		}
		if !slices.Contains(d.names, name) {
			d.names = append(d.names, name)
		}
		d.ttl = min(d.ttl, ns.Hdr.Ttl)
	}
	if d == nil || len(d.names) == 0 {
		return nil
	}
	d.glue, d.gttl = glueFor(reply.Extra, zone, d.names)
	return d
}

// glueFor collects the A/AAAA records of extra owned by one of names and
// within zone (the bailiwick of the server that sent them), and their
// smallest TTL.
func glueFor(extra []dns.RR, zone string, names []string) (map[string][]netip.Addr, uint32) {
	var glue map[string][]netip.Addr
	var ttl uint32
	for _, rr := range extra {
		t := rr.Header().Rrtype
		if (t != dns.TypeA && t != dns.TypeAAAA) || rr.Header().Class != dns.ClassINET {
			continue
		}
		owner := strings.ToLower(rr.Header().Name)
		if !slices.Contains(names, owner) || !dnssec.IsSubDomain(zone, owner) {
			continue
		}
		a, ok := rrAddr(rr)
		if !ok || !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
			continue
		}
		if glue == nil {
			glue = map[string][]netip.Addr{}
			ttl = rr.Header().Ttl
		}
		if !slices.Contains(glue[owner], a) {
			glue[owner] = append(glue[owner], a)
		}
		ttl = min(ttl, rr.Header().Ttl)
	}
	return glue, ttl
}

// attachSec keeps, for the validator, the signatures of the answer's
// records and the denial proofs (NSEC, NSEC3, their signatures and the
// SOA's) of the authority section, all owned by names within zone.
func attachSec(j *judged, reply *dns.Msg, zone string) {
	owners := map[string]bool{}
	for _, rr := range j.answer {
		owners[strings.ToLower(rr.Header().Name)] = true
	}
	for _, rr := range reply.Answer {
		s, ok := rr.(*dns.RRSIG)
		if !ok || s.Hdr.Class != dns.ClassINET {
			continue
		}
		owner := strings.ToLower(s.Hdr.Name)
		if owners[owner] && dnssec.IsSubDomain(zone, owner) {
			j.sigs = append(j.sigs, s)
		}
	}
	// The proof's records counted first, so that j.proof is made once at
	// its size (a negative answer's proof has 2 to 8 records).
	n := 0
	for _, rr := range reply.Ns {
		if proofRecord(rr, zone) {
			n++
		}
	}
	if n == 0 {
		return
	}
	j.proof = slices.Grow(j.proof, n)
	for _, rr := range reply.Ns {
		if proofRecord(rr, zone) {
			j.proof = append(j.proof, rr)
		}
	}
}

// proofRecord: rr belongs to a denial proof from zone: an NSEC or NSEC3
// record, or a signature of one or of the SOA, owned within zone.
func proofRecord(rr dns.RR, zone string) bool {
	h := rr.Header()
	if h.Class != dns.ClassINET {
		return false
	}
	switch x := rr.(type) {
	case *dns.NSEC, *dns.NSEC3:
	case *dns.RRSIG:
		switch x.TypeCovered {
		case dns.TypeNSEC, dns.TypeNSEC3, dns.TypeSOA:
		default:
			return false
		}
	default:
		return false
	}
	return dnssec.IsSubDomain(zone, h.Name) // without case
}
