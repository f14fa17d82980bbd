package ipmapper

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
)

// Result label values of svcpf_ipmapper_requests_total.
const (
	resultOK      = "ok"
	resultInvalid = "invalid" // refused request (400), or a batch with refused items
	resultError   = "error"   // the IP Mapper failed (500), e.g. a KV write
)

// Reason label values of svcpf_ipmapper_sessions_removed_total.
const (
	reasonClean   = "clean"
	reasonExpired = "expired"
)

type metrics struct {
	requests         *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	sessionsSet      prometheus.Counter
	removedClean     prometheus.Counter
	removedExpired   prometheus.Counter
	loadDuration     prometheus.Gauge
	loadSkipped      prometheus.Counter
	kvWriteErrors    prometheus.Counter
	markersPurged    prometheus.Counter
	snapshotErrors   prometheus.Counter
	snapshotSequence prometheus.Gauge
	stored           prometheus.GaugeFunc
	active           prometheus.GaugeFunc
	takeovers        prometheus.Counter
	lockLost         prometheus.Counter
	probeMissed      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, sessions, active func() float64) (*metrics, error) {
	removed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcpf_ipmapper_sessions_removed_total",
		Help: "Sessions removed from the table, by reason (clean request or TTL expiry).",
	}, []string{"reason"})
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svcpf_ipmapper_requests_total",
			Help: "IP Mapper requests by command and result (ok, invalid, error).",
		}, []string{"command", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "svcpf_ipmapper_request_duration_seconds",
			Help:    "Time to answer an IP Mapper request, KV writes included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"command"}),
		sessionsSet: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_ipmapper_sessions_set_total",
			Help: "Sessions created or changed and persisted (unchanged updates are not counted).",
		}),
		removedClean:   removed.WithLabelValues(reasonClean),
		removedExpired: removed.WithLabelValues(reasonExpired),
		loadDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_ipmapper_load_duration_seconds",
			Help: "Time the last start took to load the session table from the KV bucket.",
		}),
		loadSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_ipmapper_load_skipped_total",
			Help: "KV entries skipped at load because they are not a valid session (undecodable, id not their key, or refused by validation).",
		}),
		kvWriteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_ipmapper_kv_write_errors_total",
			Help: "KV puts and deletes that failed; the request that caused them got an error.",
		}),
		markersPurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_ipmapper_delete_markers_purged_total",
			Help: "KV delete markers of removed sessions purged from the bucket once old enough.",
		}),
		snapshotErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_ipmapper_snapshot_errors_total",
			Help: "Periodic snapshots of the table (what nodes start from) that could not be written.",
		}),
		snapshotSequence: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_ipmapper_snapshot_sequence",
			Help: "Stream sequence of the bucket covered by the last snapshot written; 0 before the first.",
		}),
	}
	m.stored = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "svcpf_ipmapper_sessions",
		Help: "Sessions in the table.",
	}, sessions)
	m.active = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "svcpf_ipmapper_active",
		Help: "1 while this instance holds its bucket's lock, has loaded the table and serves; 0 on standby. Summed over the instances of a bucket it must be 1.",
	}, active)
	m.takeovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcpf_ipmapper_takeovers_total",
		Help: "Times this instance became active (took the lock and loaded the table), the first start included.",
	})
	m.lockLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcpf_ipmapper_lock_lost_total",
		Help: "Times this instance lost the lock while holding it (taken by another, or not refreshed within its TTL) and stopped serving.",
	})
	m.probeMissed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcpf_ipmapper_probes_unanswered_total",
		Help: "Self-probes of the active instance that its micro service did not answer in time (each makes /health 503 until a round is answered in full).",
	})
	for _, c := range []prometheus.Collector{
		m.requests, m.duration, m.sessionsSet, removed, m.loadDuration, m.loadSkipped, m.kvWriteErrors, m.markersPurged, m.stored,
		m.snapshotErrors, m.snapshotSequence,
		m.active, m.takeovers, m.lockLost, m.probeMissed,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create the bounded series so dashboards see zeros, not gaps.
	for _, cmd := range wire.Commands() {
		for _, r := range []string{resultOK, resultInvalid, resultError} {
			m.requests.WithLabelValues(cmd, r)
		}
		m.duration.WithLabelValues(cmd)
	}
	return m, nil
}
