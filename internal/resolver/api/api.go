// Package api serves the PowerDNS-compatible statistics API
// (docs/resolver.md): the resolver's HTTP API root, its server object and its
// statistics, in PowerDNS Recursor 4.8's wire format so that tools written
// for PowerDNS (its own API tests, exporters, agents) work against svc-pf.
//
// Place in the data flow: the resolver pipeline counts into
// resolver/stats; this package reads them (Source) for
// /api/v1/servers/{id}/statistics, next to the /metrics page, which reads
// the same counters through their Prometheus collector. It holds no state
// of its own.
package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// Source is what the API reads statistics from: *stats.Counters.
type Source interface {
	// Snapshot returns every statistic, in the order to list them.
	Snapshot() []stats.Item
	// Lookup returns one statistic by its exact name.
	Lookup(name string) (stats.Item, bool)
}

var _ Source = (*stats.Counters)(nil)

// Config configures the API.
type Config struct {
	// Stats is required.
	Stats Source
	// APIKey is the resolver's api.key, asked for on every /api path in
	// the X-API-Key header or the api-key query parameter. Empty refuses
	// every request with 401, as PowerDNS does without an api-key: the
	// API is never open by omission.
	APIKey string
	// Password, when set, is also accepted as an HTTP Basic password (any
	// user name) on the server object and the statistics, where PowerDNS
	// accepts its webserver-password; monitoring agents use that. Unlike
	// PowerDNS, no password does not open those two endpoints.
	Password string
	// Version is reported in the server object; required.
	Version string
	// ServerID is the one server's id (default "localhost", as PowerDNS).
	ServerID string
	Logger   *slog.Logger
}

// API serves the statistics API's endpoints.
type API struct {
	stats    Source
	key      []byte // sha256 of APIKey; nil when none is configured
	password []byte // sha256 of Password; nil when none
	serverID string
	server   serverObject
	log      *slog.Logger
}

// The JSON shapes. Fields are in byte order of their names, the order
// PowerDNS's JSON library writes object keys in.
type (
	versionEntry struct {
		URL     string `json:"url"`
		Version int    `json:"version"`
	}
	rootObject struct {
		APIFeatures []string `json:"api_features"`
		ServerURL   string   `json:"server_url"`
	}
	serverObject struct {
		ConfigURL  string `json:"config_url"`
		DaemonType string `json:"daemon_type"`
		ID         string `json:"id"`
		Type       string `json:"type"`
		URL        string `json:"url"`
		Version    string `json:"version"`
		ZonesURL   string `json:"zones_url"`
	}
	statisticItem struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Value string `json:"value"`
	}
)

// PowerDNS's messages, which its API tests and clients look for.
const (
	msgUnauthorized     = "Unauthorized"
	msgNotFound         = "Not Found"
	msgUnknownStatistic = "Unknown statistic name"
)

// New validates cfg and returns the API; Register mounts it.
func New(cfg Config) (*API, error) {
	if cfg.Stats == nil {
		return nil, errors.New("resolver api: Stats is required")
	}
	if cfg.Version == "" {
		return nil, errors.New("resolver api: Version is required")
	}
	id := cfg.ServerID
	if id == "" {
		id = "localhost"
	}
	if err := validServerID(id); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &API{stats: cfg.Stats, serverID: id, log: log}
	if cfg.APIKey != "" {
		a.key = digest(cfg.APIKey)
	} else {
		// Info, not a warning: a node may run without the API on purpose.
		log.Info("resolver api: no api.key set: every /api request is refused with 401 until api.key is set")
	}
	if cfg.Password != "" {
		a.password = digest(cfg.Password)
	}
	base := "/api/v1/servers/" + id
	a.server = serverObject{
		ConfigURL:  base + "/config{/config_setting}",
		DaemonType: "recursor",
		ID:         id,
		Type:       "Server",
		URL:        base,
		Version:    cfg.Version,
		ZonesURL:   base + "/zones{/zone}",
	}
	return a, nil
}

// validServerID keeps the id one plain path segment, since it is written
// into the server object's URLs unescaped.
func validServerID(id string) error {
	if len(id) > 64 || id == "." || id == ".." {
		return fmt.Errorf("resolver api: ServerID %q is not a plain path segment", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("resolver api: ServerID %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

// Register mounts the statistics API's endpoints, and PowerDNS's server
// object and list beside them, on r. Each path answers OPTIONS as PowerDNS
// does (a CORS preflight, without a key); other paths under /api are the
// router's 404.
func (a *API) Register(r *httpapi.Router) {
	for _, rt := range []struct {
		pattern       string
		h             http.HandlerFunc
		allowPassword bool
	}{
		{"/api", a.discovery, false},
		{"/api/v1", a.root, false},
		{"/api/v1/servers", a.servers, false},
		{"/api/v1/servers/{server}", a.serverDetail, true},
		{"/api/v1/servers/{server}/statistics", a.statistics, true},
	} {
		r.Handle(http.MethodGet, rt.pattern, a.guard(rt.h, rt.allowPassword))
		r.Handle(http.MethodOptions, rt.pattern, preflight)
	}
}

// preflight answers a CORS preflight with PowerDNS's headers and an empty
// text body.
func preflight(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Headers", "Content-Type, X-API-Key")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
	h.Set("Access-Control-Max-Age", "3600")
	h.Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
}

// guard checks the credentials before h runs and adds PowerDNS's response
// headers: CORS on every answer, the security headers once authenticated.
func (a *API) guard(h http.HandlerFunc, allowPassword bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if !a.authorized(r, allowPassword) {
			// PowerDNS names its key scheme in the challenge.
			w.Header().Set("WWW-Authenticate", `X-API-Key realm="PowerDNS"`)
			httpapi.WriteError(w, http.StatusUnauthorized, msgUnauthorized)
			return
		}
		hdr := w.Header()
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("X-Frame-Options", "deny")
		hdr.Set("X-Permitted-Cross-Domain-Policies", "none")
		hdr.Set("X-XSS-Protection", "1; mode=block")
		hdr.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
		h(w, r)
	}
}

// authorized accepts the key in the X-API-Key header or the api-key query
// parameter (both PowerDNS's), or, where allowed, the password by Basic
// auth. Secrets are compared as digests in constant time, so neither
// their content nor their length shows in the timing.
func (a *API) authorized(r *http.Request, allowPassword bool) bool {
	if a.key != nil {
		if v := r.Header.Get("X-API-Key"); v != "" && equal(a.key, v) {
			return true
		}
		if v := r.URL.Query().Get("api-key"); v != "" && equal(a.key, v) {
			return true
		}
	} else {
		// No key configured: PowerDNS refuses before it looks at a password.
		return false
	}
	if allowPassword && a.password != nil {
		if _, pw, ok := r.BasicAuth(); ok && equal(a.password, pw) {
			return true
		}
	}
	return false
}

func digest(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

func equal(want []byte, got string) bool {
	return subtle.ConstantTimeCompare(want, digest(got)) == 1
}

// discovery is GET /api: the API versions.
func (a *API) discovery(w http.ResponseWriter, _ *http.Request) {
	httpapi.WriteJSON(w, http.StatusOK, []versionEntry{{URL: "/api/v1", Version: 1}})
}

// root is GET /api/v1: PowerDNS answers an array holding the one root
// object, and its API tests expect that.
func (a *API) root(w http.ResponseWriter, _ *http.Request) {
	httpapi.WriteJSON(w, http.StatusOK, []rootObject{{APIFeatures: []string{}, ServerURL: "/api/v1/servers{/server}"}})
}

// servers is GET /api/v1/servers: the one server.
func (a *API) servers(w http.ResponseWriter, _ *http.Request) {
	httpapi.WriteJSON(w, http.StatusOK, []serverObject{a.server})
}

// serverDetail is GET /api/v1/servers/{server}.
func (a *API) serverDetail(w http.ResponseWriter, r *http.Request) {
	if !a.knownServer(w, r) {
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, a.server)
}

// statistics is GET /api/v1/servers/{server}/statistics[?statistic=NAME].
// An empty statistic parameter lists them all, as in PowerDNS.
func (a *API) statistics(w http.ResponseWriter, r *http.Request) {
	if !a.knownServer(w, r) {
		return
	}
	if name := r.URL.Query().Get("statistic"); name != "" {
		it, ok := a.stats.Lookup(name)
		if !ok {
			httpapi.WriteError(w, http.StatusUnprocessableEntity, msgUnknownStatistic)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, []statisticItem{{Name: it.Name, Type: "StatisticItem", Value: it.Value}})
		return
	}
	snap := a.stats.Snapshot()
	out := make([]statisticItem, len(snap))
	for i, it := range snap {
		out[i] = statisticItem{Name: it.Name, Type: "StatisticItem", Value: it.Value}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// knownServer answers 404 for any server id but ours: PowerDNS routes only
// its own id, and its 404 body is the status text.
func (a *API) knownServer(w http.ResponseWriter, r *http.Request) bool {
	if r.PathValue("server") != a.serverID {
		httpapi.WriteError(w, http.StatusNotFound, msgNotFound)
		return false
	}
	return true
}
