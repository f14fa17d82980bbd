package simulator

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the simulator API's, named exactly as it names them. Label
// values are bounded: `call` is one of Calls(), `error` is a worker-creation
// failure (the service exits after the first), `region` and `version` are
// constants of the process.
type metrics struct {
	workers     prometheus.Gauge
	createError *prometheus.CounterVec
	calls       *prometheus.CounterVec
	callErrors  *prometheus.CounterVec
	info        *prometheus.GaugeVec
	region      string // the label value set in info
}

func newMetrics(reg prometheus.Registerer, version string) (*metrics, error) {
	m := &metrics{
		workers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "svc_pf_simulator_lua_workers",
			Help: "Number of Lua workers configured (lua.workers)."}),
		createError: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_pf_simulator_lua_worker_create_error_total",
			Help: "Lua worker creation failures by error; non-zero means the entry file failed to load and the service exits."}, []string{"error"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_pf_simulator_lua_call_total",
			Help: "Lua worker calls by entry function."}, []string{"call"}),
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_pf_simulator_lua_call_error_total",
			Help: "Lua worker calls that returned an error, by entry function."}, []string{"call"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svc_pf_simulator_info",
			Help: "1, labelled with the region of the last info payload."}, []string{"region"}),
	}
	versionInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svc_platform_version_info",
		Help: "1, labelled with the binary's version string."}, []string{"version"})
	for _, c := range []prometheus.Collector{m.workers, m.createError, m.calls, m.callErrors, m.info, versionInfo} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	versionInfo.WithLabelValues(version).Set(1)
	for _, c := range Calls() { // every series exists from the start, at 0
		m.calls.WithLabelValues(c)
		m.callErrors.WithLabelValues(c)
	}
	return m, nil
}

// luapool.Metrics.
func (m *metrics) WorkerCreateError(msg string) { m.createError.WithLabelValues(msg).Inc() }
func (m *metrics) Call(fn string)               { m.calls.WithLabelValues(fn).Inc() }
func (m *metrics) CallError(fn string)          { m.callErrors.WithLabelValues(fn).Inc() }

// setRegion moves the info gauge to region (one series at a time).
func (m *metrics) setRegion(region string) {
	if region == m.region && region != "" {
		return
	}
	m.info.Reset()
	m.info.WithLabelValues(region).Set(1)
	m.region = region
}
