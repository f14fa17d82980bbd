package stats

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes every statistic under PowerDNS 4.8's /metrics name,
// pdns_recursor_ and the statistic name with every character that is not a
// letter or digit turned into '_', read once per scrape like Snapshot.
// A collector rather than registered counters: the values live in the
// shards, and a scrape should read them, not copy them on every query.
type collector struct {
	c       *Counters
	descs   []*prometheus.Desc
	info    *prometheus.Desc
	version string
	// decisions is svcpf_resolver_decisions_total: svc-pf's own verdicts,
	// which the PowerDNS names have no place for.
	decisions *prometheus.Desc
}

func newCollector(c *Counters, version string) *collector {
	col := &collector{c: c, descs: make([]*prometheus.Desc, len(defs)), version: version}
	for i := range defs {
		col.descs[i] = prometheus.NewDesc(PrometheusName(defs[i].name), defs[i].help, nil, nil)
	}
	col.decisions = prometheus.NewDesc("svcpf_resolver_decisions_total",
		"Queries the resolver decided, by the decision's verdict (allow, block, redirect) and reason (docs/policy.md), packet-cache hits included; queries answered without a decision (FORMERR, CHAOS, refused for capacity) are not counted.",
		[]string{"verdict", "reason"}, nil)
	if version != "" {
		col.info = prometheus.NewDesc("pdns_recursor_info", "Info from the resolver, value is always 1.", []string{"version"}, nil)
	}
	return col
}

// PrometheusName is the /metrics name of a statistic, as PowerDNS makes
// it: byte by byte, so that any name gives a valid metric name.
func PrometheusName(stat string) string {
	var b strings.Builder
	b.Grow(len("pdns_recursor_") + len(stat))
	b.WriteString("pdns_recursor_")
	for i := 0; i < len(stat); i++ {
		ch := stat[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' {
			b.WriteByte(ch)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range col.descs {
		ch <- d
	}
	if col.info != nil {
		ch <- col.info
	}
	ch <- col.decisions
}

func (col *collector) Collect(ch chan<- prometheus.Metric) {
	for i, v := range col.c.values() {
		t := prometheus.CounterValue
		if defs[i].prom == promGauge {
			t = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(col.descs[i], t, float64(v))
	}
	if col.info != nil {
		ch <- prometheus.MustNewConstMetric(col.info, prometheus.GaugeValue, 1, col.version)
	}
	// Every verdict and reason, zeros included: 27 series, always there.
	for v := 1; v < len(Verdicts); v++ {
		for r := 1; r < len(Reasons); r++ {
			var n uint64
			for i := range col.c.shards {
				n += col.c.shards[i].decisions[v*len(Reasons)+r].Load()
			}
			ch <- prometheus.MustNewConstMetric(col.decisions, prometheus.CounterValue, float64(n), string(Verdicts[v]), string(Reasons[r]))
		}
	}
}
