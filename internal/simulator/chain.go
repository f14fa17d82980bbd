package simulator

import (
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/policy"
)

// parseChain reads the cname parameter: the names the answer's CNAME
// chain leads to after the domain, in order, separated by commas
// ("a.example,b.example"), each normalised as the domain is (IDNA A-label,
// lower case, no trailing dot), at most policy.MaxChain of them. The
// simulator does not resolve: the caller says what the forwarder would
// answer, as rules_ip says the address (policy.Input.Chain).
func parseChain(v string) ([]string, error) {
	parts := strings.Split(v, ",")
	if len(parts) > policy.MaxChain {
		return nil, badf("cname holds %d names; at most %d", len(parts), policy.MaxChain)
	}
	chain := make([]string, 0, len(parts))
	for i, p := range parts {
		n, err := feed.NormalizeName(strings.TrimSpace(p))
		if err != nil {
			return nil, badf("cname name %d: %v", i+1, err)
		}
		chain = append(chain, n)
	}
	return chain, nil
}
