package dnssec

import (
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkVerifyRRset is one signature check: the cost validation adds
// to a positive answer once the zone's keys are known.
func BenchmarkVerifyRRset(b *testing.B) {
	zsk := newSigner(b, "example.", 256)
	set := []dns.RR{rr(b, "www.example. 300 IN A 192.0.2.1")}
	sigs := []*dns.RRSIG{zsk.sign(b, set, nil)}
	keys := []*dns.DNSKEY{zsk.key}
	b.ReportAllocs()
	for b.Loop() {
		if r := VerifyRRset(set, sigs, keys, "example.", t0, 0); r.State != Secure {
			b.Fatal(r)
		}
	}
}

// BenchmarkDenyNSEC3 is an NSEC3 NXDOMAIN proof (hashing, one iteration),
// signatures aside.
func BenchmarkDenyNSEC3(b *testing.B) {
	proof := nsec3Chain(false, 1)
	b.ReportAllocs()
	for b.Loop() {
		if r := Deny(NXDomain, "b.example.", dns.TypeA, "example.", proof); r.State != Secure {
			b.Fatal(r)
		}
	}
}
