// Package httpapi is the HTTP plumbing every svc-pf listener shares: routing
// with JSON 404/405 bodies, request ids, panic recovery into a 500 that names
// the request, request metrics, the status page, /health and /metrics, and a
// server that speaks TLS on the same listener when configured. Services
// register their API handlers on a Router; nothing here knows about them.
package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Route is one registered method and path pattern.
type Route struct {
	Method  string
	Pattern string
}

// RouterConfig configures a Router.
type RouterConfig struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// BodyStallTimeout is how long a request body may make no progress
	// before its connection is closed (default 30s): a client that stalls
	// mid-body must not hold a connection and a handler for minutes. A
	// large body that keeps arriving is never cut off.
	BodyStallTimeout time.Duration
	// Guard, when set, runs before a request is routed by method (and
	// before the 404 of an unknown path): it returns the request to serve,
	// or false once it has answered itself. Access control goes here, so
	// that a caller without the right is refused before a 404 or 405
	// could tell it what exists.
	Guard Guard
	// Wrap, when set, wraps every routed handler, inside the guard: what
	// needs to know the caller the guard found (the audit of writes)
	// goes here. Unknown paths and the guard's own refusals do not reach
	// it.
	Wrap func(http.Handler) http.Handler
}

// Guard is RouterConfig.Guard: it may replace the request (to carry what
// it learned, such as the caller) or answer it and return false.
type Guard func(w http.ResponseWriter, r *http.Request) (*http.Request, bool)

// Router dispatches by path pattern (net/http ServeMux syntax, without the
// method) and then by method, so a known path with an unknown method gets a
// JSON 405 with an Allow header instead of ServeMux's plain-text one.
//
// Every response the Router writes carries X-Request-ID and, unless a
// handler sets another, Content-Type application/json: ServeMux's own
// answers (its redirects to a cleaned path or to a subtree's trailing slash)
// never happen, see ServeHTTP and Handle.
type Router struct {
	mux       *http.ServeMux
	log       *slog.Logger
	paths     map[string]map[string]http.HandlerFunc
	metrics   *routerMetrics
	unmatched http.Handler
	stall     time.Duration
	guard     Guard
	wrap      func(http.Handler) http.Handler
}

type routerMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

// NewRouter returns a router whose unknown paths answer a JSON 404.
func NewRouter(cfg RouterConfig) (*Router, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &routerMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svcpf_http_requests_total",
			Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "svcpf_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svcpf_http_requests_in_flight",
			Help: "HTTP requests being served.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration, m.inFlight} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("httpapi: register metrics: %w", err)
			}
		}
	}
	if cfg.BodyStallTimeout <= 0 {
		cfg.BodyStallTimeout = 30 * time.Second
	}
	r := &Router{mux: http.NewServeMux(), log: log, paths: map[string]map[string]http.HandlerFunc{}, metrics: m,
		stall: cfg.BodyStallTimeout, guard: cfg.Guard, wrap: cfg.Wrap}
	r.unmatched = r.instrument("unmatched", func(w http.ResponseWriter, req *http.Request) {
		req, ok := r.guarded(w, req)
		if !ok {
			return
		}
		WriteError(w, http.StatusNotFound, "no such endpoint: "+req.URL.Path)
	})
	r.mux.Handle("/", r.unmatched)
	return r, nil
}

// Handle registers h for method on the path pattern. It panics on a
// duplicate, like ServeMux, because that is a programming error, and on a
// subtree pattern (one ending in "/" or a {name...} wildcard): for those
// ServeMux redirects the path without the slash with an HTML body, outside
// the JSON conventions every response here keeps.
func (r *Router) Handle(method, pattern string, h http.HandlerFunc) {
	if strings.HasSuffix(pattern, "/") || strings.HasSuffix(pattern, "...}") {
		panic("httpapi: subtree pattern " + pattern + " is not supported")
	}
	methods, ok := r.paths[pattern]
	if !ok {
		methods = map[string]http.HandlerFunc{}
		r.paths[pattern] = methods
		var routed http.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.dispatch(methods, w, req)
		})
		if r.wrap != nil {
			routed = r.wrap(routed)
		}
		r.mux.Handle(pattern, r.instrument(pattern, func(w http.ResponseWriter, req *http.Request) {
			if req, ok := r.guarded(w, req); ok {
				routed.ServeHTTP(w, req)
			}
		}))
	}
	if _, dup := methods[method]; dup {
		panic("httpapi: duplicate route " + method + " " + pattern)
	}
	methods[method] = h
}

// guarded runs the guard, if any.
func (r *Router) guarded(w http.ResponseWriter, req *http.Request) (*http.Request, bool) {
	if r.guard == nil {
		return req, true
	}
	return r.guard(w, req)
}

func (r *Router) dispatch(methods map[string]http.HandlerFunc, w http.ResponseWriter, req *http.Request) {
	method := req.Method
	if method == http.MethodHead && methods[http.MethodHead] == nil {
		method = http.MethodGet // net/http drops the body of a HEAD response
	}
	if h := methods[method]; h != nil {
		h(w, req)
		return
	}
	allow := make([]string, 0, len(methods)+1)
	for m := range methods {
		allow = append(allow, m)
	}
	if methods[http.MethodGet] != nil && methods[http.MethodHead] == nil {
		allow = append(allow, http.MethodHead)
	}
	slices.Sort(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", req.Method, req.URL.Path))
}

// Routes lists every registered route, sorted; the OpenAPI test uses it.
func (r *Router) Routes() []Route {
	var out []Route
	for p, methods := range r.paths {
		for m := range methods {
			out = append(out, Route{Method: m, Pattern: p})
		}
	}
	slices.SortFunc(out, func(a, b Route) int {
		if c := strings.Compare(a.Pattern, b.Pattern); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}

// ServeHTTP answers a path that is not in clean form (such as //org/acme or
// /org/x/../acme) with a JSON 404 itself: ServeMux would answer a 307 to the
// cleaned path (with an HTML body to a GET) without the request id. The
// check mirrors ServeMux's own (cleanPath on the escaped path; CONNECT paths
// are left alone), so an escaped %2E%2E stays a path segment.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Body != nil && req.Body != http.NoBody {
		// On a copy: the server looks at its own request's Body after the
		// handler to decide how to finish the connection.
		req = req.WithContext(req.Context())
		req.Body = &stallGuard{body: req.Body, rc: http.NewResponseController(w), idle: r.stall}
	}
	if req.Method != http.MethodConnect {
		if p := req.URL.EscapedPath(); cleanPath(p) != p {
			r.unmatched.ServeHTTP(w, req)
			return
		}
	}
	r.mux.ServeHTTP(w, req)
}

// cleanPath is net/http's cleanPath: the canonical path, "/" for an empty
// one, with a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// instrument wraps a handler with what every request gets: a request id,
// the JSON content type, panic recovery, metrics and a debug access log.
func (r *Router) instrument(route string, h http.HandlerFunc) http.Handler {
	requests := r.metrics.requests
	duration := r.metrics.duration.WithLabelValues(route)
	// counters memoizes this route's counters by method and status: the
	// label lookup (a hash of three strings and a status formatted with
	// fmt) was a per-request cost. Both are bounded: methodLabel's eight
	// values, and the status codes handlers write.
	var counters sync.Map // counterKey → prometheus.Counter
	counter := func(method string, status int) prometheus.Counter {
		k := counterKey{method: methodLabel(method), status: status}
		if c, ok := counters.Load(k); ok {
			return c.(prometheus.Counter)
		}
		c := requests.WithLabelValues(route, k.method, strconv.Itoa(status))
		counters.Store(k, c)
		return c
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		r.metrics.inFlight.Inc()
		defer r.metrics.inFlight.Dec()

		id := requestIDFrom(req.Header.Get("X-Request-ID"))
		w.Header().Set("X-Request-ID", id)
		// The default for every response; non-API pages override it.
		w.Header().Set("Content-Type", "application/json")
		sw := &statusWriter{ResponseWriter: w}
		req = req.WithContext(withRequestID(req.Context(), id))

		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				r.log.Error("panic in handler", "route", route, "request_id", id, "panic", p)
				if !sw.wroteHeader {
					writeInternal(sw, id, fmt.Errorf("panic: %v", p))
				}
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			counter(req.Method, status).Inc()
			elapsed := time.Since(start)
			duration.Observe(elapsed.Seconds())
			r.log.Debug("request", "method", req.Method, "path", req.URL.Path, "status", status,
				"duration", elapsed, "request_id", id)
		}()
		h(sw, req)
	})
}

// counterKey is a request counter's labels beside its route.
type counterKey struct {
	method string
	status int
}

// methodLabel bounds the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// requestIDFrom keeps a client-supplied id when it is short printable ASCII
// (it is echoed in headers and logs) and generates one otherwise.
func requestIDFrom(s string) string {
	if s != "" && len(s) <= 128 {
		ok := true
		for i := 0; i < len(s); i++ {
			if s[i] < 0x21 || s[i] > 0x7e {
				ok = false
				break
			}
		}
		if ok {
			return s
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// stallGuard gives every read of a request body a fresh read deadline of
// idle, so a body must keep arriving, however long it is.
type stallGuard struct {
	body io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
}

func (g *stallGuard) Read(p []byte) (int, error) {
	// An error means the connection cannot take deadlines (a test
	// recorder): the body is then read without one.
	_ = g.rc.SetReadDeadline(time.Now().Add(g.idle))
	return g.body.Read(p)
}

func (g *stallGuard) Close() error { return g.body.Close() }
