package httpapi

import (
	"encoding/json"
	"html/template"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// StandardConfig describes the pages every listener serves outside its API.
type StandardConfig struct {
	Service string
	Version string
	// Gatherer backs /metrics.
	Gatherer prometheus.Gatherer
	// Ready reports whether the service can serve; nil means always ready.
	// /health answers 503 with the error until it returns nil.
	Ready func() error
	// Info, when set, is rendered on the status page as JSON.
	Info func() any
	// Health, when set, adds fields to /health's body whatever its status
	// (the IP Mapper's active/standby role, say). It cannot replace the
	// standard fields.
	Health func() map[string]any
	// Links are extra links on the status page (e.g. API documents).
	Links map[string]string
	// Clock is injectable for tests; defaults to time.Now.
	Clock func() time.Time
}

var statusPage = template.Must(template.New("status").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>svc-pf {{.Service}}</title>
<style>body{font-family:sans-serif;margin:2em}pre{background:#f4f4f4;padding:1em}</style></head>
<body><h1>svc-pf {{.Service}}</h1>
<p>Version {{.Version}} · up {{.Uptime}} · status <b>{{.Status}}</b></p>
<ul><li><a href="/health">/health</a></li><li><a href="/metrics">/metrics</a></li>
{{range $name, $href := .Links}}<li><a href="{{$href}}">{{$name}}</a></li>{{end}}</ul>
{{if .Info}}<h2>Info</h2><pre>{{.Info}}</pre>{{end}}
</body></html>
`))

// MountStandard registers /, /health and /metrics on r.
func MountStandard(r *Router, cfg StandardConfig) {
	now := cfg.Clock
	if now == nil {
		now = time.Now
	}
	started := now()
	ready := cfg.Ready
	if ready == nil {
		ready = func() error { return nil }
	}

	r.Handle(http.MethodGet, "/{$}", func(w http.ResponseWriter, _ *http.Request) {
		status := "ok"
		if err := ready(); err != nil {
			status = "unavailable: " + err.Error()
		}
		var info string
		if cfg.Info != nil {
			b, err := json.MarshalIndent(cfg.Info(), "", "  ")
			if err != nil {
				info = "info unavailable: " + err.Error()
			} else {
				info = string(b)
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = statusPage.Execute(w, map[string]any{
			"Service": cfg.Service, "Version": cfg.Version, "Status": status,
			"Uptime": now().Sub(started).Round(time.Second).String(), "Links": cfg.Links, "Info": info,
		})
	})

	r.Handle(http.MethodGet, "/health", func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{}
		if cfg.Health != nil {
			for k, v := range cfg.Health() {
				body[k] = v
			}
		}
		body["status"], body["service"], body["version"] = "ok", cfg.Service, cfg.Version
		body["uptime_seconds"] = int64(now().Sub(started).Seconds())
		if err := ready(); err != nil {
			body["status"] = "unavailable"
			body["error"] = err.Error()
			WriteJSON(w, http.StatusServiceUnavailable, body)
			return
		}
		WriteJSON(w, http.StatusOK, body)
	})

	metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
	r.Handle(http.MethodGet, "/metrics", func(w http.ResponseWriter, req *http.Request) {
		// promhttp sets the exposition format's own content type.
		w.Header().Del("Content-Type")
		metrics.ServeHTTP(w, req)
	})
}
