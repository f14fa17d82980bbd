package access

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The audit: every write through a management API leaves a record in the
// database (docs/orgmanager.md, Audit). The Auditor's HTTP wrapper records
// the REST API's writes as they leave the handlers; the console, which
// knows better what a form did, calls Record for its own.

// AuditStore is what the Auditor needs of the database (the orgstore).
type AuditStore interface {
	AppendAudit(ctx context.Context, rec AuditRecord) error
	PruneAudit(ctx context.Context, before time.Time) (int64, error)
}

// AuditorConfig configures NewAuditor.
type AuditorConfig struct {
	Store AuditStore
	// Retention is how long records are kept; Run deletes older ones
	// every PruneInterval. 0 keeps them for good.
	Retention time.Duration
	// PruneInterval is how often Run prunes (default: hourly), so no
	// record outlives Retention by more than it.
	PruneInterval time.Duration
	// RequestID returns the id of the request being served from its
	// context (the HTTP router's, httpapi.RequestID). Without it, or when
	// it returns "", the wrapper takes the response's X-Request-ID header.
	RequestID func(context.Context) string
	// Skip, when set, exempts requests from the HTTP wrapper: the
	// console's, which it records itself through Record.
	Skip       func(*http.Request) bool
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock of the records' times; nil is time.Now.
	Now func() time.Time
}

// Auditor writes audit records.
type Auditor struct {
	store     AuditStore
	retention time.Duration
	interval  time.Duration
	requestID func(context.Context) string
	skip      func(*http.Request) bool
	log       *slog.Logger
	now       func() time.Time

	written  prometheus.Counter
	failures prometheus.Counter
	pruned   prometheus.Counter
}

// storeTimeout bounds one record's write. The write runs on a context of
// its own (not the client's, which ends when the client goes away: the
// record of a write the client did not wait for is still owed).
const storeTimeout = 10 * time.Second

// defaultPruneInterval is PruneInterval's default.
const defaultPruneInterval = time.Hour

// NewAuditor checks cfg and returns the Auditor.
func NewAuditor(cfg AuditorConfig) (*Auditor, error) {
	if cfg.Store == nil {
		return nil, errors.New("access: the auditor needs a Store")
	}
	if cfg.Retention < 0 {
		return nil, errors.New("access: the audit retention must not be negative (0 keeps records for good)")
	}
	if cfg.PruneInterval < 0 {
		return nil, errors.New("access: the audit prune interval must not be negative")
	}
	a := &Auditor{store: cfg.Store, retention: cfg.Retention, interval: cfg.PruneInterval, requestID: cfg.RequestID,
		skip: cfg.Skip, log: cfg.Logger, now: cfg.Now}
	if a.interval == 0 {
		a.interval = defaultPruneInterval
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	a.written = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcpf_audit_records_total",
		Help: "Audit records written.",
	})
	a.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcpf_audit_write_failures_total",
		Help: "Audit records that could not be written to the database (each is also logged at ERROR with what it recorded); the write they describe was answered as it was.",
	})
	a.pruned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcpf_audit_pruned_total",
		Help: "Audit records deleted for being older than audit.retention.",
	})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{a.written, a.failures, a.pruned} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// Record stores rec, for a writer that records its own writes (the
// console). A zero Time is now; an empty RequestID is the request's
// (AuditorConfig.RequestID); an empty Role is the caller's in ctx (token
// id, name and role), AuditUnauthenticated when ctx has none. A failure is
// logged at ERROR and counted (svcpf_audit_write_failures_total) here, and
// returned: the caller decides what its user sees, and need not log again.
func (a *Auditor) Record(ctx context.Context, rec AuditRecord) error {
	if rec.Time.IsZero() {
		rec.Time = a.now()
	}
	rec.Time = rec.Time.UTC()
	if rec.RequestID == "" && a.requestID != nil {
		rec.RequestID = a.requestID(ctx)
	}
	if rec.Role == "" {
		rec.TokenID, rec.TokenName, rec.Role = caller(ctx)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := a.store.AppendAudit(sctx, rec); err != nil {
		a.failures.Inc()
		// Everything the record held, so that the log keeps what the
		// database could not. Never a secret: a record holds none.
		a.log.Error("audit record not written", "err", err, "time", rec.Time, "token_id", rec.TokenID,
			"token_name", rec.TokenName, "role", string(rec.Role), "method", rec.Method, "path", rec.Path,
			"org", rec.Org, "org_version", rec.OrgVersion, "request_id", rec.RequestID, "status", rec.Status)
		return err
	}
	a.written.Inc()
	return nil
}

// caller is the token id, name and role in ctx, or the unauthenticated
// role.
func caller(ctx context.Context) (id, name string, role Role) {
	p, ok := FromContext(ctx)
	if !ok {
		return "", "", AuditUnauthenticated
	}
	return p.TokenID, p.Name, p.Role
}

// Handler wraps the REST API: after every PUT, PATCH, POST and DELETE it
// records the caller (from the request's context: the wrapper runs inside
// the authentication), the method, the path with its query, the
// organisation (the {org} path segment of /org/{org}…; empty elsewhere),
// the X-Org-Version the handler answered (0 when none), the request id and
// the status. Failed writes are recorded too, except 401: a request without
// a valid token is the authentication's to count, and recording it would
// let anyone fill the table. The record is stored before the response is
// finished, so a client that reads the audit after its write finds it; a
// record that cannot be stored is logged and counted (see Record) and the
// client's response stays as the handler wrote it.
func (a *Auditor) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isWrite(r.Method) || (a.skip != nil && a.skip(r)) {
			next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		if status == http.StatusUnauthorized {
			return
		}
		version, _ := strconv.ParseInt(w.Header().Get("X-Org-Version"), 10, 64)
		rec := AuditRecord{
			Method:     r.Method,
			Path:       requestPath(r),
			Org:        orgOf(r),
			OrgVersion: version,
			Status:     status,
		}
		if a.requestID != nil {
			rec.RequestID = a.requestID(r.Context())
		}
		if rec.RequestID == "" {
			rec.RequestID = w.Header().Get("X-Request-ID")
		}
		_ = a.Record(r.Context(), rec) // logged and counted there
	})
}

// Refused records a write the guard refused with 403: a known caller
// reaching outside its organisation or role is what an operator reads an
// audit for. GuardConfig.Refused calls it.
func (a *Auditor) Refused(r *http.Request, p Principal) {
	if !isWrite(r.Method) || (a.skip != nil && a.skip(r)) {
		return
	}
	_ = a.Record(r.Context(), AuditRecord{TokenID: p.TokenID, TokenName: p.Name, Role: p.Role,
		Method: r.Method, Path: requestPath(r), Org: orgOf(r), Status: http.StatusForbidden}) // logged and counted there
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPut, http.MethodPatch, http.MethodPost, http.MethodDelete:
		return true
	}
	return false
}

// requestPath is the path as the client sent it, with the query: the
// query says which override or settings scope a write was for.
func requestPath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	return p
}

// orgOf is the organisation a request is about: the {org} path value when
// the wrapper sits on the route, else the segment after /org/, unescaped as
// the router matches it.
func orgOf(r *http.Request) string {
	if org := r.PathValue("org"); org != "" {
		return org
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/org/")
	if !ok {
		return ""
	}
	seg, _, _ := strings.Cut(rest, "/")
	if org, err := url.PathUnescape(seg); err == nil {
		return org
	}
	return seg
}

// statusWriter notes the status the handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes) through the wrapper.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Run prunes records older than the retention at start and every
// PruneInterval until ctx ends; with no retention it returns at once.
func (a *Auditor) Run(ctx context.Context) {
	if a.retention <= 0 {
		return
	}
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		a.Prune(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Prune deletes the records older than the retention once (Run's step),
// and returns how many; with no retention it deletes nothing.
func (a *Auditor) Prune(ctx context.Context) int64 {
	if a.retention <= 0 {
		return 0
	}
	cutoff := a.now().Add(-a.retention)
	n, err := a.store.PruneAudit(ctx, cutoff)
	a.pruned.Add(float64(n))
	switch {
	case err != nil && ctx.Err() == nil:
		a.log.Error("audit records not pruned", "err", err, "older_than", cutoff, "deleted", n)
	case n > 0:
		a.log.Info("audit records pruned", "older_than", cutoff, "deleted", n)
	}
	return n
}
