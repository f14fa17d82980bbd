package subscriber

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	sessions         prometheus.Gauge
	ready            prometheus.Gauge
	revision         prometheus.Gauge
	applied          prometheus.Counter
	swaps            prometheus.Counter
	decodeErrors     prometheus.Counter
	resumes          prometheus.Counter
	fullLoads        prometheus.Counter
	reconcileRemoved prometheus.Counter
	applySeconds     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, x *Index) (*metrics, error) {
	m := &metrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_subscriber_sessions", Help: "Sessions in the current snapshot of the subscriber index."}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_subscriber_ready", Help: "1 once the initial snapshot of the sessions bucket is loaded."}),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_subscriber_revision", Help: "Highest KV revision (stream sequence) applied."}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_subscriber_updates_applied_total", Help: "KV entries (puts, deletes, purges) applied to the index."}),
		swaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_subscriber_snapshots_total", Help: "Snapshots published (one per initial load, burst of updates or reconcile)."}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_subscriber_decode_errors_total", Help: "Bucket values skipped because they are not a valid session."}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_subscriber_resumes_total", Help: "Watches resumed after a NATS reconnect or a closed watcher."}),
		fullLoads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_subscriber_full_loads_total", Help: "Complete loads of the bucket (the initial one, and reloads after the bucket was recreated)."}),
		reconcileRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_subscriber_reconcile_removed_total", Help: "Sessions removed by the reconcile after a resume because their keys were no longer live in the bucket."}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "svcpf_subscriber_apply_seconds", Help: "Time to apply one burst of live updates and publish the snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
	}
	if reg == nil {
		return m, nil
	}
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "svcpf_subscriber_lag_seconds", Help: "How stale the subscriber index may be (see docs/subscriber-index.md)."},
		func() float64 { return x.Lag().Seconds() })
	for _, c := range []prometheus.Collector{m.sessions, m.ready, m.revision, m.applied, m.swaps, m.decodeErrors,
		m.resumes, m.fullLoads, m.reconcileRemoved, m.applySeconds, lag} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("subscriber: register metrics"), err)
		}
	}
	return m, nil
}
