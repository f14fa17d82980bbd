package recursor

import (
	"strings"

	"github.com/miekg/dns"
)

// uncase undoes 0x20 in a reply: a server that compresses names points
// into the question, so owner and target names come back in the random
// case we sent. Every name whose suffix is, byte for byte, a suffix (at a
// label boundary) of the name sent gets that suffix in the case asked.
// A zone's own letter case elsewhere is left alone: an exact match of a
// random case pattern by chance is unlikely, and harmless (DNS names are
// case-insensitive).
func uncase(reply *dns.Msg, sent, asked string) {
	if sent == asked {
		return
	}
	// A signed answer repeats names (an NSEC3 record's owner is its
	// RRSIG's; the SOA's in a proof): each name rebuilt is remembered, in
	// a few slots, so that it is built once.
	type fixed struct{ from, to string }
	var memo [8]fixed
	nmemo := 0
	fix := func(n *string) {
		for _, m := range memo[:nmemo] {
			if m.from == *n {
				*n = m.to
				return
			}
		}
		to := restore(*n, sent, asked)
		if to != *n && nmemo < len(memo) {
			memo[nmemo] = fixed{*n, to}
			nmemo++
		}
		*n = to
	}
	for _, sec := range [][]dns.RR{reply.Answer, reply.Ns, reply.Extra} {
		for _, rr := range sec {
			fix(&rr.Header().Name)
			switch rr := rr.(type) {
			case *dns.NS:
				fix(&rr.Ns)
			case *dns.CNAME:
				fix(&rr.Target)
			case *dns.DNAME:
				fix(&rr.Target)
			case *dns.MX:
				fix(&rr.Mx)
			case *dns.SOA:
				fix(&rr.Ns)
				fix(&rr.Mbox)
			case *dns.PTR:
				fix(&rr.Ptr)
			case *dns.SRV:
				fix(&rr.Target)
			case *dns.RRSIG:
				fix(&rr.SignerName)
			case *dns.NSEC:
				fix(&rr.NextDomain)
			case *dns.SVCB:
				fix(&rr.Target)
			case *dns.HTTPS:
				fix(&rr.Target)
			}
		}
	}
	for i := range reply.Question {
		fix(&reply.Question[i].Name)
	}
}

// restore replaces the longest suffix of n equal byte for byte to a suffix
// of sent starting at a label boundary of both, with asked's same suffix.
func restore(n, sent, asked string) string {
	if len(sent) != len(asked) {
		return n
	}
	for off, end := 0, false; !end; off, end = dns.NextLabel(sent, off) {
		s := sent[off:]
		if len(s) <= 1 {
			break
		}
		if strings.HasSuffix(n, s) && (len(n) == len(s) || n[len(n)-len(s)-1] == '.') {
			return n[:len(n)-len(s)] + asked[off:]
		}
	}
	return n
}
