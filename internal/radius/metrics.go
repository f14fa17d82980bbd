package radius

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Result label values of svcpf_radius_requests_total.
const (
	resultAcknowledged = "acknowledged" // written, then answered
	resultDuplicate    = "duplicate"    // a retransmission of an answered request: answered again
	resultStale        = "stale"        // older than the session's newest event: answered, not written
	resultIgnored      = "ignored"      // a status type that writes nothing: answered
	resultUnavailable  = "mapper_unavailable"
	resultRefused      = "mapper_refused" // the IP Mapper refused the write (400)
	resultMapperError  = "mapper_error"
	resultOverload     = "overload" // the write queue was full
)

// Reason label values of svcpf_radius_dropped_total: packets never
// answered nor written.
const (
	dropUnknownNAS        = "unknown_nas"
	dropBadAuthenticator  = "bad_authenticator"
	dropMalformed         = "malformed"
	dropNotAccounting     = "not_accounting"
	dropDuplicateInFlight = "duplicate_in_flight"
)

type metrics struct {
	requests *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	inFlight prometheus.Gauge
	write    *prometheus.HistogramVec
	batch    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, state func() float64) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svcpf_radius_requests_total",
			Help: "Authenticated Accounting-Requests by Acct-Status-Type and result; only acknowledged, duplicate, stale and ignored were answered.",
		}, []string{"status_type", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svcpf_radius_dropped_total",
			Help: "Datagrams dropped without an answer, by reason.",
		}, []string{"reason"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_radius_in_flight",
			Help: "Accounting-Requests waiting for the IP Mapper to confirm their write.",
		}),
		write: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "svcpf_radius_mapper_write_seconds",
			Help:    "Duration of the IP Mapper calls, by operation (set, clean, list) and result (ok, error).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op", "result"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "svcpf_radius_batch_size",
			Help:    "Requests per IP Mapper call.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.requests, m.dropped, m.inFlight, m.write, m.batch,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "svcpf_radius_state_sessions",
			Help: "Sessions whose newest event the ordering memory holds (bounded by radius.state_size).",
		}, state)}
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
