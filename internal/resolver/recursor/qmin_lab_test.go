package recursor_test

import (
	"context"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/dnslab"
	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// TestMinimisedNoDataRemembered: on the way to a new name under the
// wildcard *.wild.nsec3.test., QNAME minimisation asks wild.nsec3.test. (an
// empty non-terminal: NODATA) once; the next new name under it costs one
// query, the full name, not two. The NODATA is kept as the answer to
// wild.nsec3.test. A: asked for, it comes from the cache, and validates
// (its proof kept with it); with DNSSEC off likewise, without validation.
func TestMinimisedNoDataRemembered(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab := dnslab.Start(t, dnslab.Standard())
	ctx := context.Background()
	for _, mode := range []recursor.Mode{recursor.ModeOff, recursor.ModeValidate} {
		t.Run(mode.String(), func(t *testing.T) {
			c := &counter{}
			r := newLabRecursor(t, lab.Hints, func(cfg *recursor.Config) {
				cfg.DNSSEC, cfg.TrustAnchors, cfg.Metrics = mode, lab.TrustAnchor, c
			})
			if m, err := r.Exchange(ctx, question("a1.wild.nsec3.test.", dns.TypeA)); err != nil || len(m.Answer) != 1 {
				t.Fatalf("a1.wild.nsec3.test.: %v %v", m, err)
			}
			for i, name := range []string{"a2.wild.nsec3.test.", "A3.Wild.nsec3.test."} {
				before := c.out.Load()
				m, vr, err := r.Resolve(ctx, question(name, dns.TypeA))
				if err != nil || len(m.Answer) != 1 {
					t.Fatalf("%s: %v %v", name, m, err)
				}
				if sent := c.out.Load() - before; sent != 1 {
					t.Errorf("%s (new name %d under the wildcard): %d queries, want 1", name, i+2, sent)
				}
				if mode == recursor.ModeValidate && vr.State != dnssec.Secure {
					t.Errorf("%s: %v, want secure", name, vr)
				}
			}
			before := c.out.Load()
			m, vr, err := r.Resolve(ctx, question("wild.nsec3.test.", dns.TypeA))
			if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 || len(m.Ns) != 1 {
				t.Fatalf("wild.nsec3.test.: %v %v, want NODATA with the SOA", m, err)
			}
			if sent := c.out.Load() - before; sent != 0 {
				t.Errorf("wild.nsec3.test.: %d queries, want the minimised answer from the cache", sent)
			}
			want := dnssec.Indeterminate
			if mode == recursor.ModeValidate {
				want = dnssec.Secure
			}
			if vr.State != want {
				t.Errorf("wild.nsec3.test. from the cache: %v, want %v", vr, want)
			}
		})
	}
}
