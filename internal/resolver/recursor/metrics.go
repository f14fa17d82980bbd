package recursor

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
)

// counts are the recursor's own counters, read by its collector.
type counts struct {
	answered, nxdomain, failed atomic.Uint64
	queries                    atomic.Uint64 // queries sent by all exchanges
	// results counts validations by dnssec.State (indeterminate, secure,
	// insecure, bogus); nta the insecure ones a negative trust anchor
	// made so (not in results: PowerDNS counts them apart).
	results [4]atomic.Uint64
	nta     atomic.Uint64
	// throttledOut counts queries not sent because their server was
	// throttled (PowerDNS's throttled-out and throttled-outqueries);
	// nssetInvalidations NS sets forgotten because none of their servers
	// worked (nsset-invalidations).
	throttledOut, nssetInvalidations atomic.Uint64
	// dontOut counts queries not sent because dont_query bars their
	// server's address (PowerDNS's dont-outqueries).
	dontOut atomic.Uint64
}

func (c *counts) validated(r dnssec.Result) {
	switch {
	case r.NTA:
		c.nta.Add(1)
	case int(r.State) < len(c.results):
		c.results[r.State].Add(1)
	}
}

// Counters are the recursor's PowerDNS statistics that count events (the
// sizes are in Stats).
type Counters struct {
	ThrottledOut       uint64 // throttled-out, throttled-outqueries
	NSSetInvalidations uint64 // nsset-invalidations
	DontOutqueries     uint64 // dont-outqueries
}

// Counters returns the event counters.
func (r *Recursor) Counters() Counters {
	return Counters{ThrottledOut: r.counts.throttledOut.Load(), NSSetInvalidations: r.counts.nssetInvalidations.Load(),
		DontOutqueries: r.counts.dontOut.Load()}
}

// DNSSECCounters returns the validator's counters under PowerDNS
// Recursor's statistic names (dnssec-validations, dnssec-result-secure,
// -insecure, -bogus, -indeterminate, -nta), for the statistics API to map.
func (r *Recursor) DNSSECCounters() map[string]uint64 {
	n := &r.counts
	out := map[string]uint64{}
	var total uint64
	for s := range n.results {
		v := n.results[s].Load()
		out["dnssec-result-"+dnssec.State(s).String()] = v
		total += v
	}
	out["dnssec-result-nta"] = n.nta.Load()
	out["dnssec-validations"] = total + n.nta.Load()
	return out
}

// collector exports the sizes of the recursor's state (PowerDNS's
// nsspeeds-entries, throttle-entries, …) and its outcomes, read at scrape
// time: nothing is counted twice on the query path.
type collector struct {
	r                                                  *Recursor
	speeds, throttled, failed, lame, deleg, addrs, neg *prometheus.Desc
	throttledOut, invalidations, dontOut               *prometheus.Desc
	exchanges, queries                                 *prometheus.Desc
	dnssecResults, validations                         *prometheus.Desc
}

func newCollector(r *Recursor) *collector {
	g := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("svcpf_recursor_"+name, help, nil, nil)
	}
	return &collector{r: r,
		speeds:    g("nsspeeds_entries", "Authoritative servers whose speed is known (PowerDNS's nsspeeds-entries)."),
		throttled: g("throttle_entries", "Authoritative servers throttled now after failing (PowerDNS's throttle-entries)."),
		failed:    g("failed_host_entries", "Authoritative servers that failed in the last minute and have not answered since (PowerDNS's failed-host-entries)."),
		throttledOut: prometheus.NewDesc("svcpf_recursor_throttled_queries_total",
			"Queries not sent because their server was throttled (PowerDNS's throttled-out).", nil, nil),
		dontOut: prometheus.NewDesc("svcpf_recursor_dont_query_total",
			"Queries not sent because dont_query bars their server's address (PowerDNS's dont-outqueries).", nil, nil),
		invalidations: prometheus.NewDesc("svcpf_recursor_nsset_invalidations_total",
			"Zones' nameserver sets forgotten because none of their servers worked (PowerDNS's nsset-invalidations).", nil, nil),
		lame:  g("lame_entries", "Zone and server pairs marked lame: the server answered for the zone without serving it."),
		deleg: g("delegation_entries", "Zones whose nameservers are cached."),
		addrs: g("address_entries", "Nameserver names whose addresses are cached."),
		neg:   g("negative_entries", "Negative answers (NXDOMAIN, NODATA) cached, as RFC 2308 allows."),
		exchanges: prometheus.NewDesc("svcpf_recursor_exchanges_total",
			"Resolutions by result: noerror, nxdomain (answers), servfail (no answer within the bounds).", []string{"result"}, nil),
		queries: prometheus.NewDesc("svcpf_recursor_queries_total",
			"Queries sent to authoritative servers by all resolutions (TCP retries included).", nil, nil),
		dnssecResults: prometheus.NewDesc("svcpf_recursor_dnssec_results_total",
			"DNSSEC validations by result: secure, insecure, bogus, indeterminate, nta (PowerDNS's dnssec-result-*).", []string{"result"}, nil),
		validations: prometheus.NewDesc("svcpf_recursor_dnssec_validations_total",
			"Answers validated (PowerDNS's dnssec-validations).", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.speeds, c.throttled, c.failed, c.throttledOut, c.invalidations, c.dontOut, c.lame, c.deleg, c.addrs, c.neg, c.exchanges, c.queries, c.dnssecResults, c.validations} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.Stats()
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(c.speeds, st.NSSpeeds)
	gauge(c.throttled, st.Throttled)
	gauge(c.failed, st.Failed)
	gauge(c.lame, st.Lame)
	gauge(c.deleg, st.Delegation)
	gauge(c.addrs, st.Addresses)
	gauge(c.neg, st.Negative)
	n := &c.r.counts
	ch <- prometheus.MustNewConstMetric(c.exchanges, prometheus.CounterValue, float64(n.answered.Load()), "noerror")
	ch <- prometheus.MustNewConstMetric(c.exchanges, prometheus.CounterValue, float64(n.nxdomain.Load()), "nxdomain")
	ch <- prometheus.MustNewConstMetric(c.exchanges, prometheus.CounterValue, float64(n.failed.Load()), "servfail")
	ch <- prometheus.MustNewConstMetric(c.queries, prometheus.CounterValue, float64(n.queries.Load()))
	ch <- prometheus.MustNewConstMetric(c.throttledOut, prometheus.CounterValue, float64(n.throttledOut.Load()))
	ch <- prometheus.MustNewConstMetric(c.invalidations, prometheus.CounterValue, float64(n.nssetInvalidations.Load()))
	ch <- prometheus.MustNewConstMetric(c.dontOut, prometheus.CounterValue, float64(n.dontOut.Load()))
	for k, v := range c.r.DNSSECCounters() {
		if res, ok := strings.CutPrefix(k, "dnssec-result-"); ok {
			ch <- prometheus.MustNewConstMetric(c.dnssecResults, prometheus.CounterValue, float64(v), res)
		} else {
			ch <- prometheus.MustNewConstMetric(c.validations, prometheus.CounterValue, float64(v))
		}
	}
}
