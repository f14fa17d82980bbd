package rpz

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the loader's series, labelled with the configured zone name
// only, so the series count is bounded by the config. Queries are not
// counted here (ResultOf, doc.go).
type metrics struct {
	triggers *prometheus.GaugeVec
	serial   *prometheus.GaugeVec
	loadedAt *prometheus.GaugeVec
	failing  *prometheus.GaugeVec
	failures *prometheus.CounterVec
}

// zoneMetrics are one zone's series, resolved once.
type zoneMetrics struct {
	triggers, serial, loadedAt, failing prometheus.Gauge
	failures                            prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	zone := []string{"zone"}
	m := &metrics{
		triggers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_rpz_triggers",
			Help: "QNAME triggers of the RPZ zone the node serves; 0 until it first loads."}, zone),
		serial: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_rpz_serial",
			Help: "SOA serial of the RPZ zone the node serves."}, zone),
		loadedAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_rpz_loaded_timestamp_seconds",
			Help: "Unix time the served version of the RPZ zone loaded."}, zone),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_rpz_load_failing",
			Help: "1 while the latest check of the RPZ zone's file failed (the last good version is served); alert on it."}, zone),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_rpz_load_failures_total",
			Help: "Checks of the RPZ zone's file that failed: unreadable, or a new version that did not parse."}, zone),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.triggers, m.serial, m.loadedAt, m.failing, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("rpz: register metrics"), err)
		}
	}
	return m, nil
}

func (m *metrics) zone(name string) zoneMetrics {
	return zoneMetrics{
		triggers: m.triggers.WithLabelValues(name),
		serial:   m.serial.WithLabelValues(name),
		loadedAt: m.loadedAt.WithLabelValues(name),
		failing:  m.failing.WithLabelValues(name),
		failures: m.failures.WithLabelValues(name),
	}
}

func (zm zoneMetrics) loaded(z *Zone, at time.Time) {
	zm.triggers.Set(float64(len(z.rules)))
	zm.serial.Set(float64(z.serial))
	zm.loadedAt.Set(float64(at.UnixNano()) / 1e9)
	zm.failing.Set(0)
}

func (zm zoneMetrics) failed() {
	zm.failing.Set(1)
	zm.failures.Inc()
}
