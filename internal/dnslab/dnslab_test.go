package dnslab_test

import (
	"context"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/dnslab"
)

// TestStandardLabAnswers starts the standard lab and unbound on it, and
// checks that unbound resolves through it: a name in the signed zone, one
// behind an out-of-bailiwick nameserver, a lame delegation that fails.
func TestStandardLabAnswers(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	l := dnslab.Start(t, dnslab.Standard())
	if l.TrustAnchor == "" || l.Hints == "" {
		t.Fatalf("no trust anchor or hints: %q %q", l.TrustAnchor, l.Hints)
	}
	ub := l.StartUnbound(dnslab.UnboundOptions{})
	for _, c := range []struct {
		name  string
		rcode int
		n     int
	}{
		{"www.secure.test.", dns.RcodeSuccess, 1},
		{"www.outofzone.test.", dns.RcodeSuccess, 1},
		{"www.sub.secure.test.", dns.RcodeSuccess, 1},
		{"nx.secure.test.", dns.RcodeNameError, 0},
		{"www.lame.test.", dns.RcodeServerFailure, 0},
	} {
		r, err := dnslab.Query(context.Background(), ub, c.name, dns.TypeA, true)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		n := 0
		for _, rr := range r.Answer {
			if rr.Header().Rrtype == dns.TypeA {
				n++
			}
		}
		if r.Rcode != c.rcode || n != c.n {
			t.Errorf("%s: rcode %s, %d A records; want %s, %d:\n%v", c.name, dns.RcodeToString[r.Rcode], n, dns.RcodeToString[c.rcode], c.n, r)
		}
	}
}

// TestValidatingUnbound checks the lab's signatures and trust anchor
// against a validating unbound: AD on the secure zones, no AD on the
// insecure ones, SERVFAIL on every bogus variant.
func TestValidatingUnbound(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	l := dnslab.Start(t, dnslab.Standard())
	ub := l.StartUnbound(dnslab.UnboundOptions{Validate: true})
	const secure, insecure, bogus = "secure", "insecure", "bogus"
	for _, c := range []struct {
		name  string
		qtype uint16
		want  string
		rcode int
	}{
		{"www.secure.test.", dns.TypeA, secure, dns.RcodeSuccess},
		{"nx.secure.test.", dns.TypeA, secure, dns.RcodeNameError},
		{"www.secure.test.", dns.TypeTXT, secure, dns.RcodeSuccess},
		{"foo.wild.secure.test.", dns.TypeA, secure, dns.RcodeSuccess},
		{"www.sub.secure.test.", dns.TypeA, secure, dns.RcodeSuccess},
		{"www.nsec3.test.", dns.TypeA, secure, dns.RcodeSuccess},
		{"nx.nsec3.test.", dns.TypeA, secure, dns.RcodeNameError},
		{"a.wild.nsec3.test.", dns.TypeA, secure, dns.RcodeSuccess},
		{"www.optout.test.", dns.TypeA, secure, dns.RcodeSuccess},
		{"www.child.optout.test.", dns.TypeA, insecure, dns.RcodeSuccess},
		{"www.insecure.test.", dns.TypeA, insecure, dns.RcodeSuccess},
		{"toinsecure.secure.test.", dns.TypeA, insecure, dns.RcodeSuccess},
		{"www.example.", dns.TypeA, insecure, dns.RcodeSuccess},
		{"www.island.test.", dns.TypeA, insecure, dns.RcodeSuccess},
		{"www.expired.test.", dns.TypeA, bogus, dns.RcodeServerFailure},
		{"www.future.test.", dns.TypeA, bogus, dns.RcodeServerFailure},
		{"www.wrongds.test.", dns.TypeA, bogus, dns.RcodeServerFailure},
		{"www.badsig.test.", dns.TypeA, bogus, dns.RcodeServerFailure},
		{"txt.badsig.test.", dns.TypeTXT, secure, dns.RcodeSuccess}, // only www is damaged
		{"www.nosig.test.", dns.TypeA, bogus, dns.RcodeServerFailure},
	} {
		r, err := dnslab.Query(context.Background(), ub, c.name, c.qtype, true)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rcode != c.rcode || r.AuthenticatedData != (c.want == secure) {
			t.Errorf("%s %s: rcode %s AD %v, want %s (%s)\n%v", c.name, dns.TypeToString[c.qtype],
				dns.RcodeToString[r.Rcode], r.AuthenticatedData, dns.RcodeToString[c.rcode], c.want, r)
		}
	}
}

// TestPdnsRecursorLab checks the second reference resolver on the lab:
// PowerDNS Recursor resolves through it without validation (a bogus zone
// answers, never AD).
func TestPdnsRecursorLab(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	l := dnslab.Start(t, dnslab.Standard())
	pdns := l.StartPdnsRecursor(dnslab.PdnsOptions{})
	for _, c := range []struct {
		name  string
		rcode int
	}{
		{"www.secure.test.", dns.RcodeSuccess},
		{"www.outofzone.test.", dns.RcodeSuccess},
		{"www.sub.secure.test.", dns.RcodeSuccess},
		{"www.expired.test.", dns.RcodeSuccess}, // not validated
		{"nx.secure.test.", dns.RcodeNameError},
		{"www.lame.test.", dns.RcodeServerFailure},
	} {
		r, err := dnslab.Query(context.Background(), pdns, c.name, dns.TypeA, true)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.Rcode != c.rcode || r.AuthenticatedData {
			t.Errorf("%s: rcode %s AD %v, want %s without AD:\n%v", c.name, dns.RcodeToString[r.Rcode], r.AuthenticatedData, dns.RcodeToString[c.rcode], r)
		}
	}
}

// TestValidatingPdnsRecursor checks the lab's signatures and trust anchor
// against a validating PowerDNS Recursor, with the extended error codes it
// gives bogus answers.
func TestValidatingPdnsRecursor(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	l := dnslab.Start(t, dnslab.Standard())
	pdns := l.StartPdnsRecursor(dnslab.PdnsOptions{Validate: true})
	for _, c := range []struct {
		name  string
		rcode int
		ad    bool
	}{
		{"www.secure.test.", dns.RcodeSuccess, true},
		{"nx.secure.test.", dns.RcodeNameError, true},
		{"www.sub.secure.test.", dns.RcodeSuccess, true},
		{"www.nsec3.test.", dns.RcodeSuccess, true},
		{"www.insecure.test.", dns.RcodeSuccess, false},
		{"www.island.test.", dns.RcodeSuccess, false},
		{"www.child.optout.test.", dns.RcodeSuccess, false},
		{"www.expired.test.", dns.RcodeServerFailure, false},
		{"www.future.test.", dns.RcodeServerFailure, false},
		{"www.wrongds.test.", dns.RcodeServerFailure, false},
		{"www.badsig.test.", dns.RcodeServerFailure, false},
		{"www.nosig.test.", dns.RcodeServerFailure, false},
	} {
		r, err := dnslab.Query(context.Background(), pdns, c.name, dns.TypeA, true)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rcode != c.rcode || r.AuthenticatedData != c.ad {
			t.Errorf("%s: rcode %s AD %v, want %s AD %v\n%v", c.name, dns.RcodeToString[r.Rcode], r.AuthenticatedData,
				dns.RcodeToString[c.rcode], c.ad, r)
		}
	}
}
