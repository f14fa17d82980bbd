package reports_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/reports"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// fakeReader stands in for the activity store (another part's work, at
// the activity.Reader boundary): it records each question and answers
// the canned page or summary, or err.
type fakeReader struct {
	mu      sync.Mutex
	events  []activity.EventQuery
	sums    []activity.SummaryQuery
	page    activity.EventPage
	summary activity.Summary
	err     error
}

func (f *fakeReader) Events(_ context.Context, q activity.EventQuery) (activity.EventPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, q)
	return f.page, f.err
}

func (f *fakeReader) Summary(_ context.Context, q activity.SummaryQuery) (activity.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sums = append(f.sums, q)
	return f.summary, f.err
}

var now = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// serve mounts the reports over rd (nil: no store) on a real listener.
func serve(t *testing.T, rd activity.Reader) (string, *natstest.LogBuffer) {
	t.Helper()
	logs := &natstest.LogBuffer{}
	rp, err := reports.New(reports.Config{Reader: rd, Clock: func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r, err := httpapi.NewRouter(httpapi.RouterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rp.Register(r)
	srv, err := httpapi.Listen(httpapi.Config{Address: "127.0.0.1:0"}, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + srv.Addr().String(), logs
}

func get(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestEvents(t *testing.T) {
	t0 := now.Add(-time.Hour)
	rd := &fakeReader{page: activity.EventPage{
		Events: []activity.StoredEvent{
			{ID: 7, Event: activity.Event{Time: t0, Node: "dns1", Org: "acme", Username: "alice", Client: "192.0.2.7",
				QName: "ads.example.", QType: 1, Transport: "udp", Verdict: "block", Action: "nxdomain", Reason: "category",
				Rule: "category 3", Categories: []uint16{3, 9}, Rcode: 3, LatencyUS: 120, Policy: "p1"}},
			{ID: 6, Event: activity.Event{Time: t0.Add(-time.Minute), Node: "dns1", QName: "odd.example.", QType: 65280,
				Verdict: "allow", Action: "allow", Reason: "default", Rcode: 0, Sampled: true}},
		},
		Next: &activity.Cursor{Time: t0.Add(-time.Minute), ID: 6},
	}}
	base, _ := serve(t, rd)
	status, body := get(t, base+"/org/acme/activity?from=-2h&verdict=block&limit=2")
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	var got struct {
		Events     []map[string]any `json:"events"`
		NextCursor string           `json:"next_cursor"`
		Next       string           `json:"next"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 2 || got.Events[0]["qtype"] != "A" || got.Events[1]["qtype"] != float64(65280) ||
		got.Events[0]["qname"] != "ads.example." || got.Events[0]["username"] != "alice" || got.Events[0]["rule"] != "category 3" ||
		got.Events[1]["sampled"] != true || len(got.Events[0]["categories"].([]any)) != 2 {
		t.Fatalf("events: %s", body)
	}
	if _, ok := got.Events[0]["ID"]; ok {
		t.Fatalf("the store's id leaked: %s", body)
	}
	if got.NextCursor != rd.page.Next.String() {
		t.Fatalf("next_cursor %q", got.NextCursor)
	}
	q := rd.events[0]
	if q.Org != "acme" || q.Verdict != "block" || q.Limit != 2 || !q.From.Equal(now.Add(-2*time.Hour)) || !q.To.Equal(now) {
		t.Fatalf("the store was asked %+v", q)
	}
	// The next page: the same filters and range, fixed, and the cursor.
	if status, body = get(t, base+got.Next); status != http.StatusOK {
		t.Fatalf("next page: %d %s", status, body)
	}
	q2 := rd.events[1]
	if q2.After == nil || *q2.After != *rd.page.Next || !q2.From.Equal(q.From) || !q2.To.Equal(q.To) || q2.Verdict != "block" || q2.Limit != 2 {
		t.Fatalf("next page asked %+v", q2)
	}

	// The last page has no next.
	rd.page.Next = nil
	_, body = get(t, base+"/org/acme/activity")
	if strings.Contains(string(body), "next") {
		t.Fatalf("last page: %s", body)
	}
}

func TestSummary(t *testing.T) {
	rd := &fakeReader{summary: activity.Summary{Total: 10, Blocked: 4, Other: 1, Rows: []activity.SummaryRow{
		{Key: "3", Count: 6, Blocked: 4, Series: []int64{1, 2, 3}},
		{Key: "0", Count: 3, Series: []int64{1, 1, 1}},
	}}}
	base, _ := serve(t, rd)
	status, body := get(t, base+"/org/acme/activity/summary?by=category&from=-3h&interval=1h&top=2")
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	var got struct {
		By       string    `json:"by"`
		From     time.Time `json:"from"`
		To       time.Time `json:"to"`
		Total    int64     `json:"total"`
		Blocked  int64     `json:"blocked"`
		Other    int64     `json:"other"`
		Interval string    `json:"interval"`
		Buckets  []time.Time
		Rows     []activity.SummaryRow `json:"rows"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.By != "category" || got.Total != 10 || got.Blocked != 4 || got.Other != 1 || got.Interval != "1h0m0s" ||
		len(got.Buckets) != 3 || !got.Buckets[0].Equal(now.Add(-3*time.Hour)) || !got.Buckets[2].Equal(now.Add(-time.Hour)) ||
		len(got.Rows) != 2 || got.Rows[0].Series[2] != 3 {
		t.Fatalf("summary: %s", body)
	}
	q := rd.sums[0]
	if q.By != activity.ByCategory || q.Top != 2 || q.Interval != time.Hour || !q.From.Equal(now.Add(-3*time.Hour)) {
		t.Fatalf("the store was asked %+v", q)
	}
	// Without an interval: no buckets, and rows is [] rather than null.
	rd.summary = activity.Summary{}
	_, body = get(t, base+"/org/acme/activity/summary?by=domain")
	if strings.Contains(string(body), "buckets") || !strings.Contains(string(body), `"rows":[]`) {
		t.Fatalf("no interval: %s", body)
	}
}

// TestSummaryWidened: a store that widens the range and the interval to
// whole hours (as the per-day store does) says so, and the buckets follow
// what it used, not what was asked.
func TestSummaryWidened(t *testing.T) {
	from, to := now.Add(-150*time.Minute), now.Add(-10*time.Minute)
	rd := &fakeReader{summary: activity.Summary{By: activity.ByReason, From: from.Truncate(time.Hour), To: to.Add(time.Hour - 1).Truncate(time.Hour),
		Interval: time.Hour, Rows: []activity.SummaryRow{{Key: "category", Count: 3, Series: []int64{1, 1, 1}}}}}
	base, _ := serve(t, rd)
	status, body := get(t, base+"/org/acme/activity/summary?by=reason&from="+from.Format(time.RFC3339)+"&to="+to.Format(time.RFC3339)+"&interval=5m")
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	var got struct {
		From     time.Time   `json:"from"`
		To       time.Time   `json:"to"`
		Interval string      `json:"interval"`
		Buckets  []time.Time `json:"buckets"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Interval != "1h0m0s" || len(got.Buckets) != 3 || !got.From.Equal(now.Add(-3*time.Hour)) || !got.To.Equal(now) ||
		!got.Buckets[0].Equal(got.From) || !got.Buckets[2].Equal(now.Add(-time.Hour)) {
		t.Fatalf("widened summary: %s", body)
	}
	if q := rd.sums[0]; q.Interval != 5*time.Minute || !q.From.Equal(from) {
		t.Fatalf("the store was asked %+v", q)
	}
}

// TestRefusals: bad input is a 400 naming the parameter, and the store is
// never asked.
func TestRefusals(t *testing.T) {
	rd := &fakeReader{}
	base, _ := serve(t, rd)
	for path, want := range map[string]string{
		"/org/acme/activity?from=soon":                     "from:",
		"/org/acme/activity?limit=5000":                    "limit:",
		"/org/acme/activity?cursor=zzz":                    "cursor:",
		"/org/acme/activity?ip=nope":                       "ip:",
		"/org/acme/activity?qname=a..b":                    "qname:",
		"/org/acme/activity?verdict=maybe":                 "verdict:",
		"/org/acme/activity?reason=x":                      "reason:",
		"/org/acme/activity?foo=1":                         "foo: unknown parameter",
		"/org/acme/activity?ip=%ZZ":                        "invalid query string",
		"/org/acme/activity?from=-400d":                    "from:",
		"/org/acme/activity/summary":                       "by: required",
		"/org/acme/activity/summary?by=x":                  "by:",
		"/org/acme/activity/summary?by=domain&top=0":       "top:",
		"/org/acme/activity/summary?by=domain&interval=1s": "interval:",
		"/org/..%2F/activity":                              "organisation id",
	} {
		status, body := get(t, base+path)
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if status != http.StatusBadRequest || !strings.Contains(e.Error, want) {
			t.Errorf("%s: %d %s, want 400 with %q", path, status, body, want)
		}
	}
	if len(rd.events)+len(rd.sums) != 0 {
		t.Fatalf("the store was asked: %+v %+v", rd.events, rd.sums)
	}
}

func TestNoStore(t *testing.T) {
	base, _ := serve(t, nil)
	for _, path := range []string{"/org/acme/activity", "/org/acme/activity/summary?by=reason"} {
		status, body := get(t, base+path)
		if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "activity.store.url") {
			t.Errorf("%s: %d %s", path, status, body)
		}
	}
}

// TestStoreError: a failing store is a 503 saying what to check, with the
// request id; the store's own error goes to the log only.
func TestStoreError(t *testing.T) {
	rd := &fakeReader{err: errors.New("dial tcp db.internal:5432: connection refused")}
	base, logs := serve(t, rd)
	for _, path := range []string{"/org/acme/activity", "/org/acme/activity/summary?by=reason"} {
		status, body := get(t, base+path)
		if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "check that the store") ||
			strings.Contains(string(body), "db.internal") || !strings.Contains(string(body), "request ") {
			t.Errorf("%s: %d %s", path, status, body)
		}
	}
	if !strings.Contains(logs.String(), "db.internal") {
		t.Fatalf("the log lacks the store's error: %s", logs.String())
	}
}

func TestBuckets(t *testing.T) {
	s := activity.Summary{From: now, To: now.Add(90 * time.Minute), Interval: time.Hour}
	b := reports.Buckets(s)
	if len(b) != 2 || !b[1].Equal(now.Add(time.Hour)) {
		t.Fatalf("%v", b)
	}
	// An interval longer than the range is one bucket (and no sum of the
	// two overflows, however long it is).
	if b := reports.Buckets(activity.Summary{From: now, To: now.Add(time.Hour), Interval: time.Duration(1<<63 - 1)}); len(b) != 1 || !b[0].Equal(now) {
		t.Fatalf("a long interval: %v", b)
	}
	if reports.Buckets(activity.Summary{From: now, To: now.Add(time.Hour)}) != nil {
		t.Fatal("buckets without an interval")
	}
	if got := reports.QTypeName(28); got != "AAAA" {
		t.Fatal(got)
	}
	if got := reports.QTypeName(65280); got != "TYPE65280" {
		t.Fatal(got)
	}
}
