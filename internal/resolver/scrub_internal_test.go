package resolver

import (
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// scrubSeeds are forwarder answers of the shapes scrub tells apart.
func scrubSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, recs := range [][3][]string{
		{{"www.scrub.test. 300 IN A 192.0.2.1", "bank.example. 300 IN A 203.0.113.66", "www.scrub.test. 300 CH A 192.0.2.9"},
			{"scrub.test. 300 IN NS ns.scrub.test.", "bank.example. 300 IN NS ns.evil.example.", "x.scrub.test. 300 IN NSEC z.scrub.test. A"},
			{"ns.scrub.test. 300 IN A 192.0.2.53", "www.bank.example. 300 IN A 203.0.113.80"}},
		{{"www.scrub.test. 300 IN CNAME a.scrub.test.", "a.scrub.test. 300 IN CNAME b.example.", "b.example. 300 IN A 192.0.2.3",
			"b.example. 300 IN RRSIG A 13 2 300 20300101000000 20200101000000 1 example. c2ln"}, nil, nil},
		{{"scrub.test. 300 IN DNAME e.example.", "e.example. 300 IN MX 10 mx.e.example."}, nil, {"mx.e.example. 300 IN A 192.0.2.25"}},
		{{"www.scrub.test. 300 IN CNAME www.scrub.test."}, {"scrub.test. 300 IN SOA ns. h. 1 1 1 1 60"}, nil},
	} {
		m := new(dns.Msg)
		m.SetQuestion("www.scrub.test.", dns.TypeA)
		m.Response = true
		for i, sec := range []*[]dns.RR{&m.Answer, &m.Ns, &m.Extra} {
			for _, s := range recs[i] {
				rr, err := dns.NewRR(s)
				if err != nil {
					t.Fatal(err)
				}
				*sec = append(*sec, rr)
			}
		}
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzScrub: whatever a forwarder answers, the chain and the scrub never
// panic; a chain holds at most policy.MaxChain distinct names; what scrub
// keeps lies in the question's bailiwick (scrub.go's rules); and the chain
// read again from the scrubbed answer, as a record-cache hit reads it, is
// the same.
func FuzzScrub(f *testing.F) {
	for _, s := range scrubSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		m := new(dns.Msg)
		if m.Unpack(pkt) != nil || len(m.Question) != 1 {
			return
		}
		q := m.Question[0]
		chain, ok := answerChain(q.Name, m.Answer, nil)
		if len(chain) > policy.MaxChain {
			t.Fatalf("%d names in the chain", len(chain))
		}
		for i, c := range chain {
			if strings.EqualFold(c, q.Name) || slices.Contains(chain[:i], c) {
				t.Fatalf("chain %v repeats %s", chain, c)
			}
		}
		if !ok {
			return
		}
		scrub(m, q.Name, q.Qtype, chain)
		onChain := func(n string) bool { return strings.EqualFold(n, q.Name) || contains(chain, n) }
		for _, rr := range m.Answer {
			h := rr.Header()
			if !onChain(h.Name) && h.Rrtype != dns.TypeDNAME && !covers(rr, dns.TypeDNAME) {
				t.Fatalf("answer keeps %v, off the chain %s %v", rr, q.Name, chain)
			}
		}
		for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			for _, rr := range rrs {
				if rr.Header().Class != dns.ClassINET {
					t.Fatalf("keeps %v, not of class IN", rr)
				}
			}
		}
		for _, rr := range m.Ns {
			switch rr.Header().Rrtype {
			case dns.TypeSOA, dns.TypeNS, dns.TypeDS, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeRRSIG:
			default:
				t.Fatalf("authority keeps %v", rr)
			}
		}
		for _, rr := range m.Extra {
			if t2 := rr.Header().Rrtype; t2 != dns.TypeA && t2 != dns.TypeAAAA && !covers(rr, dns.TypeA) && !covers(rr, dns.TypeAAAA) {
				t.Fatalf("additional keeps %v", rr)
			}
		}
		again, ok := answerChain(q.Name, m.Answer, nil)
		if !ok || !slices.Equal(again, chain) {
			t.Fatalf("chain %v, after the scrub %v (%v)", chain, again, ok)
		}
	})
}
