package simulator

import (
	"context"
	"crypto/subtle"
	_ "embed" // the default entry file
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/pprof"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/luapool"
	"github.com/svc-pf/svc-pf/internal/policy"
)

// defaultEntry is the embedded entry file used when lua.file is empty.
//
//go:embed default.lua
var defaultEntry []byte

// Config configures a Service.
type Config struct {
	// Engine decides; its View is the node's read models.
	Engine *policy.Engine
	// Feeds is the feed backend for codemappings and info; nil when no
	// feed is configured (codemappings answers 204).
	Feeds FeedSet
	// Sizes sizes the read models for the info payload; nil counts 0.
	Sizes Sizes
	// Workers is lua.workers (>= 1); File is lua.file ("" for the
	// embedded default); CallTimeout bounds one call (default 5s).
	Workers     int
	File        string
	CallTimeout time.Duration
	// APIKeys are the keys X-API-Key may carry on domain, simulate,
	// codemappings and /debug/pprof/; empty asks for none.
	APIKeys []string
	// PProf serves Go's profiler under /debug/pprof/ (http.pprof). Off by
	// default: a profile shows the process's command line, symbols and
	// heap, and a CPU profile or trace costs CPU while it runs.
	PProf   bool
	Region  string
	Version string
	// MaxBodyBytes bounds a form-encoded POST body (default 1 MiB: the
	// settings parameter may carry a whole document).
	MaxBodyBytes int64
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
	Clock        func() time.Time
}

// Service is the simulator: the simulator API over HTTP and its Lua workers.
type Service struct {
	cfg     Config
	pool    *luapool.Pool
	metrics *metrics
	log     *slog.Logger
	// info is the last info payload (JSON), refreshed every second.
	info atomic.Pointer[[]byte]
	// infoValue is the same payload decoded, for the status page.
	infoValue atomic.Pointer[any]
	// bodies encodes the domain and simulate bodies (jsonbody.go).
	bodies bodyEncoders
}

// New builds the workers (each loads the entry file once) and the
// metrics. A worker that fails to load the entry file fails New, with the
// worker-create error counter already counted: the caller exits non-zero.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil {
		return nil, errors.New("simulator: Engine is required")
	}
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("lua.workers must be at least 1, not %d", cfg.Workers)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Sizes == nil {
		cfg.Sizes = noSizes{}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	m, err := newMetrics(cfg.Registerer, cfg.Version)
	if err != nil {
		return nil, err
	}
	m.workers.Set(float64(cfg.Workers))
	b := &builtins{engine: cfg.Engine, feeds: cfg.Feeds, sizes: cfg.Sizes, clock: cfg.Clock,
		region: cfg.Region, version: cfg.Version}
	pool, err := luapool.New(luapool.Config{
		Workers: cfg.Workers, File: cfg.File, Source: defaultEntry,
		Modules:     map[string]luapool.Module{ModuleName: b.module()},
		CallTimeout: cfg.CallTimeout, Metrics: m,
	})
	if err != nil {
		return nil, fmt.Errorf("lua: %w", err)
	}
	s := &Service{cfg: cfg, pool: pool, metrics: m, log: cfg.Logger}
	empty := []byte("{}")
	s.info.Store(&empty)
	return s, nil
}

// Close stops the workers.
func (s *Service) Close() { s.pool.Close() }

// Do runs one entry function with a request table (nil for the calls
// without one) and returns its result: nil, bool, string, numbers, []any,
// map[string]any, or — simulate_user's body returned untouched by the
// script — the built-in's body object, which AppendBody writes and
// encoding/json marshals as the same JSON.
func (s *Service) Do(ctx context.Context, call string, req *Request) (any, error) {
	var arg any
	if req != nil {
		t := req.Table()
		arg = t
		// A built-in handed this table back unchanged (luapool gives it
		// the very map) takes req as it is instead of parsing it again.
		ctx = context.WithValue(ctx, requestKey{}, &given{table: t, req: req})
	}
	v, err := s.pool.Call(ctx, call, arg)
	return withNulls(call, v), err
}

// Maintain runs the maintenance call and refreshes the info payload; Run
// calls it every second.
func (s *Service) Maintain(ctx context.Context) error {
	if _, err := s.pool.Call(ctx, CallMaintenance, nil); err != nil {
		s.log.Warn("maintenance call failed", "err", err)
	}
	v, err := s.pool.Call(ctx, CallInfo, nil)
	if err != nil {
		return fmt.Errorf("info call: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("info payload: %w", err)
	}
	s.info.Store(&b)
	s.infoValue.Store(&v)
	region := ""
	if m, ok := v.(map[string]any); ok {
		region, _ = m["region"].(string)
	}
	s.metrics.setRegion(region)
	return nil
}

// Run refreshes the info payload once per second until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := s.Maintain(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("info payload not refreshed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Info returns the last info payload, decoded (the status page's).
func (s *Service) Info() any {
	if v := s.infoValue.Load(); v != nil {
		return *v
	}
	return map[string]any{}
}

// Mount registers the simulator's endpoints on r, and /debug/pprof/ when
// Config.PProf is set, behind the API keys as the API is. The caller
// mounts /, /health and /metrics (httpapi.MountStandard with Info).
func (s *Service) Mount(r *httpapi.Router) {
	r.Handle(http.MethodGet, "/api/v1/domain", s.keyed(s.handleDomain))
	r.Handle(http.MethodGet, "/api/v1/simulate", s.keyed(s.handleSimulate))
	r.Handle(http.MethodPost, "/api/v1/simulate", s.keyed(s.handleSimulate))
	r.Handle(http.MethodGet, "/api/v1/codemappings", s.keyed(s.handleCodeMappings))
	r.Handle(http.MethodGet, "/api/v1/info", s.handleInfo)
	if !s.cfg.PProf {
		return
	}
	r.Handle(http.MethodGet, "/debug/pprof/{$}", s.keyed(pprof.Index))
	r.Handle(http.MethodGet, "/debug/pprof/{name}", s.keyed(pprof.Index))
	r.Handle(http.MethodGet, "/debug/pprof/cmdline", s.keyed(pprof.Cmdline))
	r.Handle(http.MethodGet, "/debug/pprof/profile", s.keyed(pprof.Profile))
	r.Handle(http.MethodGet, "/debug/pprof/symbol", s.keyed(pprof.Symbol))
	r.Handle(http.MethodPost, "/debug/pprof/symbol", s.keyed(pprof.Symbol))
	r.Handle(http.MethodGet, "/debug/pprof/trace", s.keyed(pprof.Trace))
}

// keyed checks X-API-Key against api_keys: 401 when the list is populated
// and the key is missing or unknown; an empty list asks none.
func (s *Service) keyed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(s.cfg.APIKeys) > 0 && !s.knownKey(r.Header.Get("X-API-Key")) {
			httpapi.WriteError(w, http.StatusUnauthorized, "missing or unknown X-API-Key")
			return
		}
		h(w, r)
	}
}

func (s *Service) knownKey(k string) bool {
	if k == "" {
		return false
	}
	found := 0
	for _, want := range s.cfg.APIKeys {
		found |= subtle.ConstantTimeCompare([]byte(k), []byte(want))
	}
	return found == 1
}

func (s *Service) handleDomain(w http.ResponseWriter, r *http.Request) {
	q, err := query(r)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	req, err := ParseLookup(q)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	s.answer(w, r, CallLookupDomain, req)
}

func (s *Service) handleSimulate(w http.ResponseWriter, r *http.Request) {
	var params url.Values
	var err error
	if r.Method == http.MethodPost {
		params, err = s.readForm(w, r)
	} else {
		params, err = query(r)
	}
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	req, err := ParseSimulate(params)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	s.answer(w, r, CallSimulateUser, req)
}

// query reads a GET's parameters: a malformed pair (`ip=%ZZ`) is a 400,
// as in the orgmanager, not a parameter silently left out.
func query(r *http.Request) (url.Values, error) {
	q, err := httpapi.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &BadRequest{Msg: err.Error()}
	}
	return q, nil
}

// readForm reads a POST body as application/x-www-form-urlencoded, the one
// form POST /api/v1/simulate takes.
func (s *Service) readForm(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != "application/x-www-form-urlencoded" {
			return nil, badf("POST /api/v1/simulate takes application/x-www-form-urlencoded, not %q", ct)
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, badf("the form is larger than %d bytes", s.cfg.MaxBodyBytes)
		}
		return nil, badf("reading the form: %v", err)
	}
	v, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, badf("the form is not URL-encoded: %v", err)
	}
	return v, nil
}

func (s *Service) handleCodeMappings(w http.ResponseWriter, r *http.Request) {
	v, err := s.pool.Call(r.Context(), CallCodeMappings, nil)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if isEmpty(v) {
		w.WriteHeader(http.StatusNoContent) // no feed backend, or not loaded yet
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, v)
}

func (s *Service) handleInfo(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(*s.info.Load())
}

// answer runs call for req and writes its result as the body.
func (s *Service) answer(w http.ResponseWriter, r *http.Request, call string, req *Request) {
	v, err := s.Do(r.Context(), call, req)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if err := s.bodies.writeBody(w, call, v); err != nil {
		s.writeErr(w, r, s.unencodable(call, err))
	}
}

// unencodable is a result that has no JSON body: a call error like a
// script's (counted, a 500), though the pool saw the call succeed. A
// script's own values are refused by luapool already (NaN, ±Inf, a
// function); this catches what a built-in might return.
func (s *Service) unencodable(call string, err error) error {
	s.metrics.CallError(call)
	return fmt.Errorf("%s: the result has no JSON form: %w", call, err)
}

// withNulls puts back the identity fields a trip through Lua dropped: a
// Lua table cannot hold nil, so an unknown ip or profile would vanish from
// the body instead of reading null.
func withNulls(call string, v any) any {
	if call != CallSimulateUser {
		return v
	}
	if m, ok := v.(map[string]any); ok {
		if id, ok := m["identity"].(map[string]any); ok {
			for _, k := range identityFields {
				if _, ok := id[k]; !ok {
					id[k] = nil
				}
			}
		}
	}
	return v
}

// writeErr maps an error to its status: a bad parameter 400, a client
// gone 499-style (nothing written), a script error or a timeout 500.
func (s *Service) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	if code, msg := Status(err); code != http.StatusInternalServerError {
		if code != 0 {
			httpapi.WriteError(w, code, msg)
		}
		return
	}
	s.log.Warn("simulator call failed", "path", r.URL.Path, "request_id", httpapi.RequestID(r.Context()), "err", err)
	httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
}

// Status maps a call's error to an HTTP status and message: 400 for a bad
// parameter, 0 when the client went away (nothing to answer), 500 for a
// script error or a call over its time bound.
func Status(err error) (int, string) {
	var bad *BadRequest
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest, bad.Msg
	case errors.Is(err, context.Canceled):
		return 0, ""
	}
	return http.StatusInternalServerError, err.Error()
}

// isEmpty reports a result that means "no content": nil or an empty table.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// Simulate runs the simulate call in-process for params (the HTTP API's
// parameters) and returns the body the HTTP API would answer; a bad
// parameter is a *BadRequest. The console's "why" page calls it under
// `svc-pf all`, where the simulator is in the same process.
func (s *Service) Simulate(ctx context.Context, params url.Values) ([]byte, error) {
	r, err := ParseSimulate(params)
	if err != nil {
		return nil, err
	}
	v, err := s.Do(ctx, CallSimulateUser, r)
	if err != nil {
		return nil, err
	}
	if b, err := AppendBody(nil, CallSimulateUser, v); err == nil {
		return b, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, s.unencodable(CallSimulateUser, err)
	}
	return b, nil
}

// InfoJSON returns the last info payload as JSON.
func (s *Service) InfoJSON(context.Context) ([]byte, error) { return *s.info.Load(), nil }
