package feeds

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a Client. Every series is labelled with the feed's configured
// name only (and the failures with one of a fixed set of reasons), so the
// series count is bounded by the config.
type metrics struct {
	version       *prometheus.GaugeVec
	entries       *prometheus.GaugeVec
	lastSuccess   *prometheus.GaugeVec
	failures      *prometheus.CounterVec
	updateSeconds *prometheus.HistogramVec
	fetchedBytes  *prometheus.CounterVec
	lineageResets *prometheus.CounterVec
}

// feedMetrics are one feed's series, resolved once.
type feedMetrics struct {
	version       prometheus.Gauge
	entries       prometheus.Gauge
	lastSuccess   prometheus.Gauge
	failures      [numReasons]prometheus.Counter
	updateSeconds prometheus.Observer
	fetchedBytes  prometheus.Counter
	lineageResets prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	feed := []string{"feed"}
	m := &metrics{
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_feed_version",
			Help: "Version of the feed the node serves; 0 until it first loads."}, feed),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_feed_entries",
			Help: "Keys (name and name/path entries) in the feed's served index."}, feed),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_feed_last_success_timestamp_seconds",
			Help: "Unix time of the last poll that left the feed at its newest applicable version; alert on its age."}, feed),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_feed_update_failures_total",
			Help: "Polls that failed, by reason (fetch, manifest, checksum, decode, size, backwards); the node kept its version."},
			[]string{"feed", "reason"}),
		updateSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "svcpf_feed_update_seconds",
			Help:    "Time of a poll that published a new version or titles: fetch, verify, decompress, parse, apply.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, feed),
		fetchedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_feed_fetched_bytes_total",
			Help: "Bytes of feed files read (manifests, codes, snapshots, deltas); unchanged polls add little."}, feed),
		lineageResets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_feed_lineage_resets_total",
			Help: "Updates that found the version held outside the manifest's history (a rebuilt or swapped directory) and loaded its snapshot instead of its deltas."}, feed),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.version, m.entries, m.lastSuccess, m.failures, m.updateSeconds, m.fetchedBytes, m.lineageResets} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("feeds: register metrics"), err)
		}
	}
	return m, nil
}

// feed resolves one feed's series. It creates them all at once, so a feed
// that never loads shows its zero version and its failures from the first
// scrape.
func (m *metrics) feed(name string) *feedMetrics {
	fm := &feedMetrics{
		version:       m.version.WithLabelValues(name),
		entries:       m.entries.WithLabelValues(name),
		lastSuccess:   m.lastSuccess.WithLabelValues(name),
		updateSeconds: m.updateSeconds.WithLabelValues(name),
		fetchedBytes:  m.fetchedBytes.WithLabelValues(name),
		lineageResets: m.lineageResets.WithLabelValues(name),
	}
	for r := range numReasons {
		fm.failures[r] = m.failures.WithLabelValues(name, r.String())
	}
	return fm
}
