package recursor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/dnslab"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// BenchmarkExchangeWarm resolves a name in a zone whose servers are known:
// one query to one authoritative server (nsd on loopback), the recursor's
// work around it included.
func BenchmarkExchangeWarm(b *testing.B) {
	lab := dnslab.Start(b, dnslab.Standard())
	r := newLabRecursor(b, lab.Hints, nil)
	ctx := context.Background()
	q := question("www.secure.test.", dns.TypeA)
	if _, err := r.Exchange(ctx, q); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Exchange(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExchangeCold resolves from the root on a fresh recursor each
// time: three referrals' worth of queries (root, test., secure.test.).
func BenchmarkExchangeCold(b *testing.B) {
	lab := dnslab.Start(b, dnslab.Standard())
	ctx := context.Background()
	q := question("www.secure.test.", dns.TypeA)
	b.ReportAllocs()
	for b.Loop() {
		r := newLabRecursor(b, lab.Hints, nil)
		if _, err := r.Exchange(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExchangeDNSSEC is a warm miss (the zone's servers and keys
// known: one query to nsd) with DNSSEC off and validating, and a cached
// NSEC3 NXDOMAIN (no query at all: the validation is nearly all the work).
// The difference between off and validate is what validation adds to a
// miss.
func BenchmarkExchangeDNSSEC(b *testing.B) {
	lab := dnslab.Start(b, dnslab.Standard())
	ctx := context.Background()
	for _, mode := range []recursor.Mode{recursor.ModeOff, recursor.ModeValidate} {
		r := newLabRecursor(b, lab.Hints, func(c *recursor.Config) {
			c.DNSSEC, c.TrustAnchors = mode, lab.TrustAnchor
		})
		for _, name := range []string{"www.secure.test.", "nx.nsec3.test."} {
			b.Run(mode.String()+"/"+name, func(b *testing.B) {
				q := question(name, dns.TypeA)
				if _, err := r.Exchange(ctx, q); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := r.Exchange(ctx, q); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		// Misses: every iteration a name never asked, an NXDOMAIN under
		// nsec3.test. or a wildcard answer under *.wild.nsec3.test.: one
		// query to nsd, and with validate the whole check (signatures
		// met before, so the signature cache's; the NSEC3 hashing).
		// The count goes on across runs (-count): a name is never asked
		// twice.
		i := 0
		for _, kind := range []string{"nx", "wild"} {
			b.Run(mode.String()+"/fresh-"+kind, func(b *testing.B) {
				suffix := ".nsec3.test."
				if kind == "wild" {
					suffix = ".wild.nsec3.test."
				}
				ask := func() {
					i++
					if _, err := r.Exchange(ctx, question(fmt.Sprintf("f%d-%d%s", mode, i, suffix), dns.TypeA)); err != nil {
						b.Fatal(err)
					}
				}
				ask()
				b.ReportAllocs()
				for b.Loop() {
					ask()
				}
			})
		}
	}
}
