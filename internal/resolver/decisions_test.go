package resolver_test

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// TestDecisionsCounted: svcpf_resolver_decisions_total counts every
// decision by verdict and reason, the miss and the packet-cache hits it
// filled alike, with an observer and without one (the packet cache then
// keeps the decision's head beside the answer for its hits); a query
// answered without a decision (FORMERR) is not counted.
func TestDecisionsCounted(t *testing.T) {
	for _, withObserver := range []bool{false, true} {
		name := "no observer"
		if withObserver {
			name = "observer"
		}
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := newEnv(t, func(c *resolver.Config) {
				c.Registerer = reg
				if withObserver {
					c.Observer = &recorder{}
				}
			})
			const alice = "127.0.0.2" // blocks category 3; bad.test is in it
			for range 3 {
				e.mustAsk("udp", alice, query("bad.test", dns.TypeA, 1232, false))
			}
			for range 2 {
				e.mustAsk("udp", alice, query("www.ok.test", dns.TypeA, 1232, false))
			}
			formerr := mustPack(t, query("form.test", dns.TypeA, 0, false))
			formerr[5] = 2 // QDCOUNT 2, one question there: FORMERR, no decision
			e.rawUDP(alice, formerr)
			if n := e.stat("packetcache-hits"); n != 3 {
				t.Fatalf("packetcache-hits %d, want 3 (2 of bad.test, 1 of www.ok.test)", n)
			}
			if n := e.r.Stats().Decisions(policy.VerdictBlock, policy.ReasonCategory); n != 3 {
				t.Errorf("decisions block/category %d, want 3", n)
			}
			if n := e.r.Stats().Decisions(policy.VerdictAllow, policy.ReasonDefault); n != 2 {
				t.Errorf("decisions allow/default %d, want 2", n)
			}
			// The metric, as scraped: 27 series, these two moved, none else.
			got, err := testutil.GatherAndCount(reg, "svcpf_resolver_decisions_total")
			if err != nil || got != 27 {
				t.Errorf("svcpf_resolver_decisions_total: %d series (%v), want 27 (3 verdicts × 9 reasons)", got, err)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var total float64
			var moved []string
			for _, mf := range mfs {
				if mf.GetName() != "svcpf_resolver_decisions_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					if v := m.GetCounter().GetValue(); v > 0 {
						total += v
						var l []string
						for _, lp := range m.GetLabel() {
							l = append(l, lp.GetName()+"="+lp.GetValue())
						}
						moved = append(moved, strings.Join(l, ","))
					}
				}
			}
			if total != 5 || len(moved) != 2 {
				t.Errorf("scraped decisions: %v series moved, total %v; want block/category and allow/default, total 5", moved, total)
			}
		})
	}
}
