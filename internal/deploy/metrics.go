package deploy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	lag             prometheus.Histogram
	duration        prometheus.Histogram
	failures        prometheus.Counter
	sessionsSet     prometheus.Counter
	sessionsCleaned prometheus.Counter
	settingsPut     prometheus.Counter
	settingsDeleted prometheus.Counter
	dirty           prometheus.Gauge
	oldestDirty     prometheus.GaugeFunc
}

// newMetrics defines the deploy metrics; oldestDirty reports, at scrape time,
// how long the longest-waiting change has waited. It is the lag an outage
// builds up: the lag histogram only sees deploys that completed.
func newMetrics(reg prometheus.Registerer, oldestDirty func() float64) (*metrics, error) {
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	m := &metrics{
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "svcpf_deploy_lag_seconds", Buckets: buckets,
			Help: "Time from an organisation becoming dirty to its deploy completing.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "svcpf_deploy_duration_seconds", Buckets: buckets,
			Help: "Duration of one successful deploy of one organisation.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_deploy_failures_total",
			Help: "Deploys that failed and will be retried.",
		}),
		sessionsSet: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_deploy_sessions_set_total",
			Help: "Sessions sent to the IP Mapper with set-session-batch.",
		}),
		sessionsCleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_deploy_sessions_cleaned_total",
			Help: "Session ids sent to the IP Mapper with clean-sessions.",
		}),
		settingsPut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_deploy_settings_put_total",
			Help: "Settings documents written to the settings bucket.",
		}),
		settingsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svcpf_deploy_settings_deleted_total",
			Help: "Settings documents removed from the settings bucket.",
		}),
		dirty: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_deploy_dirty_orgs",
			Help: "Organisations with changes not yet deployed.",
		}),
		oldestDirty: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "svcpf_deploy_oldest_dirty_seconds",
			Help: "Age of the oldest change not yet deployed; 0 when every organisation is deployed.",
		}, oldestDirty),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.lag, m.duration, m.failures, m.sessionsSet, m.sessionsCleaned, m.settingsPut, m.settingsDeleted, m.dirty, m.oldestDirty} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("deploy: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
