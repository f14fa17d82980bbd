// Package reports answers what the activity store holds: the REST
// reports on the orgmanager's listener (docs/activity.md, Reports) and the
// parsing the console's Activity page shares with them. Its place in the
// data flow is the end of it:
//
//	… collector → store (activity.Reader) → reports → operator, customer
//
// The orgmanager's guard checks access before a request gets here (a
// scoped token reads only its own organisation's activity); this package
// checks the parameters, so that every question it passes to the store is
// bounded (activity.EventQuery.Validate, SummaryQuery.Validate).
package reports

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/identity"
)

// NotConfigured is the 503 answer's text when no store is wired in.
const NotConfigured = "activity store not configured: set activity.store.url (or leave it empty for the per-day SQLite files under the data directory) in the orgmanager's configuration, and run a collector (svc-pf activity, or svc-pf all) that writes there"

// Config configures the reports.
type Config struct {
	// Reader is the store; nil answers every report 503 (NotConfigured).
	Reader activity.Reader
	// Timeout bounds one question to the store (default 30s); past it the
	// answer is a 503.
	Timeout time.Duration
	Logger  *slog.Logger
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// Reports serves the two report endpoints.
type Reports struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg.
func New(cfg Config) (*Reports, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("reports: Timeout must be positive")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reports{cfg: cfg, log: log}, nil
}

// Router is where Register mounts the endpoints: *httpapi.Router.
type Router interface {
	Handle(method, pattern string, h http.HandlerFunc)
}

// Register mounts GET /org/{org}/activity and GET
// /org/{org}/activity/summary.
func (rp *Reports) Register(r Router) {
	r.Handle(http.MethodGet, "/org/{org}/activity", rp.events)
	r.Handle(http.MethodGet, "/org/{org}/activity/summary", rp.summary)
}

// EventJSON is one event as the reports write it: the store's Event with
// its qtype as the type's mnemonic ("A", "HTTPS"), or its number for a
// type without one.
type EventJSON struct {
	activity.Event
	QType any `json:"qtype"`
}

// QTypeName is a query type's mnemonic, or its number as text when it
// has none.
func QTypeName(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// ToJSON is e as the reports write it.
func ToJSON(e activity.Event) EventJSON {
	var qt any = e.QType
	if s, ok := dns.TypeToString[e.QType]; ok {
		qt = s
	}
	return EventJSON{Event: e, QType: qt}
}

// EventsBody is the answer of GET /org/{org}/activity.
type EventsBody struct {
	Events []EventJSON `json:"events"`
	// NextCursor continues the listing (cursor=…); Next is the next
	// page's path and query. Both absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	Next       string `json:"next,omitempty"`
}

// SummaryBody is the answer of GET /org/{org}/activity/summary: the
// store's Summary, with the interval and each series bucket's start when
// an interval was asked for.
type SummaryBody struct {
	activity.Summary
	Interval string      `json:"interval,omitempty"`
	Buckets  []time.Time `json:"buckets,omitempty"`
}

// Buckets returns the start of each interval of a series over s's range:
// From, From+Interval, … before To (nil without an interval).
func Buckets(s activity.Summary) []time.Time {
	if s.Interval <= 0 || !s.From.Before(s.To) {
		return nil
	}
	n := int(min(intervals(s.To.Sub(s.From), s.Interval), activity.MaxBuckets))
	out := make([]time.Time, n)
	for i := range out {
		out[i] = s.From.Add(time.Duration(i) * s.Interval).UTC()
	}
	return out
}

// ask reads the {org} segment and the query string into a question with
// parse, and checks that a store is configured: both endpoints' first
// steps. It answers 400 or 503 itself and reports false when it did.
func ask[Q any](rp *Reports, w http.ResponseWriter, r *http.Request,
	parse func(string, url.Values, time.Time) (Q, error)) (q Q, org string, v url.Values, ok bool) {
	org = r.PathValue("org")
	err := identity.ValidateOrg(org)
	if err == nil {
		v, err = httpapi.ParseQuery(r.URL.RawQuery)
	}
	if err == nil {
		q, err = parse(org, v, rp.cfg.Clock())
	}
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return q, "", nil, false
	}
	if rp.cfg.Reader == nil {
		httpapi.WriteError(w, http.StatusServiceUnavailable, NotConfigured)
		return q, "", nil, false
	}
	return q, org, v, true
}

func (rp *Reports) events(w http.ResponseWriter, r *http.Request) {
	q, o, v, ok := ask(rp, w, r, ParseEvents)
	if !ok {
		return
	}
	page, err := rp.Events(r.Context(), q)
	if err != nil {
		rp.unavailable(w, r, err)
		return
	}
	body := EventsBody{Events: make([]EventJSON, len(page.Events))}
	for i, e := range page.Events {
		body.Events[i] = ToJSON(e.Event)
	}
	if page.Next != nil {
		body.NextCursor = page.Next.String()
		next := url.Values{}
		for k, vs := range v {
			if k != "cursor" && vs[0] != "" {
				next.Set(k, vs[0])
			}
		}
		// The next page keeps the range it started with: a relative or
		// defaulted to would move with the clock.
		next.Set("from", q.From.Format(time.RFC3339Nano))
		next.Set("to", q.To.Format(time.RFC3339Nano))
		next.Set("cursor", body.NextCursor)
		body.Next = "/org/" + url.PathEscape(o) + "/activity?" + next.Encode()
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
}

func (rp *Reports) summary(w http.ResponseWriter, r *http.Request) {
	q, _, _, ok := ask(rp, w, r, ParseSummary)
	if !ok {
		return
	}
	s, err := rp.Summary(r.Context(), q)
	if err != nil {
		rp.unavailable(w, r, err)
		return
	}
	body := SummaryBody{Summary: s}
	if q.Interval > 0 {
		body.Interval = s.Interval.String()
		body.Buckets = Buckets(s)
	}
	if body.Rows == nil {
		body.Rows = []activity.SummaryRow{}
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
}

// ErrNotConfigured is what Events and Summary return without a store.
var ErrNotConfigured = errors.New(NotConfigured)

// Events asks the store, within the timeout; the console calls it too.
func (rp *Reports) Events(ctx context.Context, q activity.EventQuery) (activity.EventPage, error) {
	if rp.cfg.Reader == nil {
		return activity.EventPage{}, ErrNotConfigured
	}
	ctx, cancel := context.WithTimeout(ctx, rp.cfg.Timeout)
	defer cancel()
	return rp.cfg.Reader.Events(ctx, q)
}

// Summary asks the store, within the timeout; the console calls it too.
// The answer's By, From, To and Interval are the store's when it set
// them (it may widen them), else the question's.
func (rp *Reports) Summary(ctx context.Context, q activity.SummaryQuery) (activity.Summary, error) {
	if rp.cfg.Reader == nil {
		return activity.Summary{}, ErrNotConfigured
	}
	ctx, cancel := context.WithTimeout(ctx, rp.cfg.Timeout)
	defer cancel()
	s, err := rp.cfg.Reader.Summary(ctx, q)
	if err != nil {
		return s, err
	}
	// A store may widen the range and the interval to its granularity
	// (whole hours, say) and says which it used: those are what the
	// series count over. What it leaves unsaid is the question's.
	if s.By == "" {
		s.By = q.By
	}
	if s.From.IsZero() || s.To.IsZero() {
		s.From, s.To = q.From, q.To
	}
	if s.Interval == 0 {
		s.Interval = q.Interval
	}
	return s, nil
}

// Configured reports whether a store is wired in.
func (rp *Reports) Configured() bool { return rp.cfg.Reader != nil }

// UnavailableMessage is what a failed question to the store is answered
// with (503): where to look, and the request id that finds the log line
// holding the store's own error (which may name hosts and paths a
// customer's token should not learn).
func UnavailableMessage(requestID string) string {
	return "activity store did not answer (request " + requestID + "): check that the store at activity.store.url is reachable and that its collector runs; the orgmanager's log has the error"
}

func (rp *Reports) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	id := httpapi.RequestID(r.Context())
	rp.log.Error("activity report failed", "path", r.URL.Path, "request_id", id, "err", err)
	httpapi.WriteError(w, http.StatusServiceUnavailable, UnavailableMessage(id))
}
