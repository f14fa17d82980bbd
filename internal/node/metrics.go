package node

import "github.com/prometheus/client_golang/prometheus"

// policyMetrics is the engine's policy.Metrics on the node's registry:
// svcpf_policy_cache_lookups_total by result. The node's one engine
// serves the simulator and the resolver, so the count covers both.
type policyMetrics struct {
	hit, miss prometheus.Counter
}

// newPolicyMetrics registers the counters on reg; nil registers nowhere.
func newPolicyMetrics(reg prometheus.Registerer) (*policyMetrics, error) {
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_policy_cache_lookups_total",
		Help: "Lookups in the node's cache of compiled policies, by result: hit, or miss (a set of settings documents merged and compiled)."},
		[]string{"result"})
	if reg != nil {
		if err := reg.Register(lookups); err != nil {
			return nil, err
		}
	}
	return &policyMetrics{hit: lookups.WithLabelValues("hit"), miss: lookups.WithLabelValues("miss")}, nil
}

// PolicyLookup counts one lookup.
func (m *policyMetrics) PolicyLookup(hit bool) {
	if hit {
		m.hit.Inc()
		return
	}
	m.miss.Inc()
}
