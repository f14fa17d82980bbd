package resolver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tlsCollector exports the encrypted listeners' certificate state, read
// at scrape time: its expiry (from the files or ACME) and, with ACME, the
// handshakes no certificate could be had for; and the DoT, DoH and DoQ
// handshakes that did not complete (tlshandshake.go, doq.go).
type tlsCollector struct {
	files         *certStore // nil with ACME
	acme          *acmeStore // nil with files
	dot, doh, doq *handshakeCounts
	doh3          *handshakeCounts
	expiry        *prometheus.Desc
	errors        *prometheus.Desc
	timeouts      *prometheus.Desc
	failures      *prometheus.Desc
}

func newTLSCollector(files *certStore, acme *acmeStore, dot, doh, doq, doh3 *handshakeCounts) *tlsCollector {
	return &tlsCollector{files: files, acme: acme, dot: dot, doh: doh, doq: doq, doh3: doh3,
		timeouts: prometheus.NewDesc("svcpf_resolver_tls_handshake_timeouts_total",
			"DoT, DoH, DoQ and DoH3 (listener doh3) connections closed because their handshake did not complete within dns.tls.handshake_timeout (DoQ, DoH3: that long without a packet from the client, or twice that long in all): a client that connected and stalled, or sent part of a ClientHello.", []string{"listener"}, nil),
		failures: prometheus.NewDesc("svcpf_resolver_tls_handshake_failures_total",
			"DoT, DoH, DoQ and DoH3 (listener doh3) connections whose handshake failed before the timeout: a malformed ClientHello, no common TLS version, cipher or ALPN protocol, or the client closed.", []string{"listener"}, nil),
		expiry: prometheus.NewDesc("svcpf_resolver_tls_certificate_expiry_timestamp_seconds",
			"When the certificate the DoT, DoH and DoQ listeners serve expires (Unix time); absent until one is served. Alert well before it: a certificate file not replaced, or an ACME renewal failing.", nil, nil),
		errors: prometheus.NewDesc("svcpf_resolver_acme_errors_total",
			"TLS handshakes (and the start-up request) for which no certificate could be obtained from the ACME CA (dns.tls.acme); the resolver log says why.", nil, nil),
	}
}

func (c *tlsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.expiry
	ch <- c.errors
	ch <- c.timeouts
	ch <- c.failures
}

func (c *tlsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range []struct {
		name string
		n    *handshakeCounts
	}{{"dot", c.dot}, {"doh", c.doh}, {"doq", c.doq}, {"doh3", c.doh3}} {
		ch <- prometheus.MustNewConstMetric(c.timeouts, prometheus.CounterValue, float64(l.n.timeouts.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(l.n.failures.Load()), l.name)
	}
	var na time.Time
	if c.files != nil {
		na = c.files.notAfter()
	}
	if c.acme != nil {
		if s := c.acme.notAfter.Load(); s != 0 {
			na = time.Unix(s, 0)
		}
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(c.acme.errors.Load()))
	}
	if !na.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(na.Unix()))
	}
}
