package stats

import (
	"strings"
	"testing"
)

// TestPolicyResultHelpSaysRPZ: PowerDNS's policy-result-* count what its
// RPZ zones did, and so do ours (the resolver moves them only for an RPZ
// decision): their HELP must not read as a count of subscriber blocks,
// which an operator would then find far too low.
func TestPolicyResultHelpSaysRPZ(t *testing.T) {
	n := 0
	for _, d := range defs {
		if !strings.HasPrefix(d.name, "policy-result-") {
			continue
		}
		n++
		if !strings.Contains(d.help, "RPZ") || strings.Contains(d.help, "by the filter") {
			t.Errorf("%s: HELP %q does not say it counts RPZ results", PrometheusName(d.name), d.help)
		}
	}
	if n != 6 {
		t.Errorf("%d policy-result-* statistics, want PowerDNS's 6", n)
	}
}
