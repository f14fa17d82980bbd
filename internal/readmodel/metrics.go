package readmodel

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one Follower, every series labelled with its bucket, so that
// the read models of one node share one set of names.
type metrics struct {
	entries          prometheus.Gauge
	ready            prometheus.Gauge
	sequence         prometheus.Gauge
	applied          prometheus.Counter
	swaps            prometheus.Counter
	decodeErrors     prometheus.Counter
	resumes          prometheus.Counter
	fullLoads        prometheus.Counter
	seededLoads      prometheus.Counter
	seedFailures     prometheus.Counter
	reconcileRemoved prometheus.Counter
	applySeconds     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, bucket string, lag func() float64) (*metrics, error) {
	labels := prometheus.Labels{"bucket": bucket}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		entries:  gauge("svcpf_readmodel_entries", "Entries in the read model's current snapshot."),
		ready:    gauge("svcpf_readmodel_ready", "1 once the initial contents of the bucket are loaded."),
		sequence: gauge("svcpf_readmodel_stream_sequence", "Highest stream sequence of the bucket applied."),
		applied: counter("svcpf_readmodel_updates_applied_total",
			"KV entries (puts, deletes, purges) applied to the read model."),
		swaps: counter("svcpf_readmodel_snapshots_total",
			"Snapshots published (one per initial load, burst of updates or reconcile)."),
		decodeErrors: counter("svcpf_readmodel_decode_errors_total", "Bucket values skipped because they are not valid."),
		resumes:      counter("svcpf_readmodel_resumes_total", "Watches resumed after a NATS reconnect or a closed watcher."),
		fullLoads: counter("svcpf_readmodel_full_loads_total",
			"Complete loads of the bucket (the initial one, and reloads after the bucket was recreated)."),
		seededLoads: counter("svcpf_readmodel_snapshot_loads_total",
			"Complete loads that started from a snapshot of the bucket and read only the stream after it."),
		seedFailures: counter("svcpf_readmodel_snapshot_failures_total",
			"Snapshots that could not be opened or read; the load replayed the whole stream instead."),
		reconcileRemoved: counter("svcpf_readmodel_reconcile_removed_total",
			"Entries removed by the reconcile after a resume because their keys were no longer live in the bucket."),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "svcpf_readmodel_apply_seconds", Help: "Time to apply one burst of live updates and publish the snapshot.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
	}
	if reg == nil {
		return m, nil
	}
	lagGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "svcpf_readmodel_lag_seconds", Help: "How stale the read model may be (see docs/subscriber-index.md).",
		ConstLabels: labels}, lag)
	for _, c := range []prometheus.Collector{m.entries, m.ready, m.sequence, m.applied, m.swaps, m.decodeErrors,
		m.resumes, m.fullLoads, m.seededLoads, m.seedFailures, m.reconcileRemoved, m.applySeconds, lagGauge} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("readmodel: register metrics"), err)
		}
	}
	return m, nil
}
