package reports

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
)

var now = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// TestParseEvents: every parameter, its default, its forms and its
// refusals, each naming the parameter.
func TestParseEvents(t *testing.T) {
	cur := activity.Cursor{Time: now.Add(-time.Hour), ID: 42}
	type check func(t *testing.T, q activity.EventQuery)
	for _, tc := range []struct {
		query   string
		param   string // the refused parameter; "" when accepted
		inError string
		check   check
	}{
		{query: "", check: func(t *testing.T, q activity.EventQuery) {
			if !q.To.Equal(now) || !q.From.Equal(now.Add(-24*time.Hour)) || q.Limit != activity.DefaultLimit || q.After != nil || q.Org != "acme" {
				t.Errorf("defaults: %+v", q)
			}
		}},
		{query: "from=2026-11-27T00:00:00Z&to=2026-11-27T06:00:00%2B01:00", check: func(t *testing.T, q activity.EventQuery) {
			if !q.From.Equal(time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)) || !q.To.Equal(time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)) || q.To.Location() != time.UTC {
				t.Errorf("RFC 3339: %v %v", q.From, q.To)
			}
		}},
		{query: "from=-90m&to=now", check: func(t *testing.T, q activity.EventQuery) {
			if !q.From.Equal(now.Add(-90*time.Minute)) || !q.To.Equal(now) {
				t.Errorf("relative: %v %v", q.From, q.To)
			}
		}},
		{query: "from=-7d", check: func(t *testing.T, q activity.EventQuery) {
			if !q.From.Equal(now.Add(-7 * 24 * time.Hour)) {
				t.Errorf("days: %v", q.From)
			}
		}},
		{query: "to=2026-11-20", check: func(t *testing.T, q activity.EventQuery) {
			if !q.To.Equal(time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)) || !q.From.Equal(q.To.Add(-24*time.Hour)) {
				t.Errorf("date and from's default: %v %v", q.From, q.To)
			}
		}},
		{query: "from=&to=&username=&limit=", check: func(t *testing.T, q activity.EventQuery) {
			if !q.To.Equal(now) || q.Limit != activity.DefaultLimit || q.Username != "" {
				t.Errorf("empty is absent: %+v", q)
			}
		}},
		{query: "username=alice&deviceid=mac:00:11&verdict=block&reason=category", check: func(t *testing.T, q activity.EventQuery) {
			if q.Username != "alice" || q.DeviceID != "mac:00:11" || q.Verdict != "block" || q.Reason != "category" {
				t.Errorf("filters: %+v", q)
			}
		}},
		{query: "qname=WWW.Example.COM.", check: func(t *testing.T, q activity.EventQuery) {
			if q.QName != "www.example.com." {
				t.Errorf("qname: %q", q.QName)
			}
		}},
		{query: "qname=b%C3%BCcher.example", check: func(t *testing.T, q activity.EventQuery) {
			if q.QName != "xn--bcher-kva.example." {
				t.Errorf("international qname: %q", q.QName)
			}
		}},
		{query: "ip=192.0.2.7", check: func(t *testing.T, q activity.EventQuery) {
			if q.IP != "192.0.2.7" {
				t.Errorf("ip: %q", q.IP)
			}
		}},
		{query: "ip=2001:DB8::1", check: func(t *testing.T, q activity.EventQuery) {
			if q.IP != "2001:db8::1" {
				t.Errorf("ip6: %q", q.IP)
			}
		}},
		{query: "ip=192.0.2.9/24", check: func(t *testing.T, q activity.EventQuery) {
			if q.IP != "192.0.2.0/24" {
				t.Errorf("prefix: %q", q.IP)
			}
		}},
		{query: "ip=h:0123456789ABCDEF", check: func(t *testing.T, q activity.EventQuery) {
			if q.IP != "h:0123456789abcdef" {
				t.Errorf("hash: %q", q.IP)
			}
		}},
		{query: "limit=1000&cursor=" + cur.String(), check: func(t *testing.T, q activity.EventQuery) {
			if q.Limit != 1000 || q.After == nil || *q.After != cur {
				t.Errorf("limit and cursor: %d %+v", q.Limit, q.After)
			}
		}},

		{query: "from=yesterday", param: "from", inError: "RFC 3339"},
		{query: "to=2026-13-01T00:00:00Z", param: "to"},
		{query: "from=-24x", param: "from"},
		{query: "from=--1h", param: "from"},
		{query: "from=-99999999d", param: "from"},
		{query: "from=1969-12-31T00:00:00Z&to=1970-01-01T01:00:00Z", param: "from", inError: "1970"},
		{query: "from=now&to=-1h", param: "from", inError: "not before"},
		{query: "from=now&to=now", param: "from", inError: "not before"},
		{query: "from=-367d", param: "from", inError: "more than"},
		{query: "limit=0", param: "limit", inError: "1 to 1000"},
		{query: "limit=1001", param: "limit"},
		{query: "limit=ten", param: "limit"},
		{query: "limit=-1", param: "limit"},
		{query: "cursor=abc", param: "cursor"},
		{query: "cursor=" + strings.Repeat("A", 22), param: "", check: func(t *testing.T, q activity.EventQuery) {
			if q.After == nil || q.After.ID != 0 {
				t.Errorf("zero cursor: %+v", q.After)
			}
		}},
		{query: "verdict=blocked", param: "verdict", inError: "allow, block, redirect"},
		{query: "reason=because", param: "reason", inError: "safe_search"},
		{query: "ip=192.0.2.300", param: "ip"},
		{query: "ip=fe80::1%25eth0", param: "ip"},
		{query: "ip=192.0.2.0/33", param: "ip"},
		{query: "ip=h:0123", param: "ip", inError: "16 hex"},
		{query: "ip=h:0123456789abcdeg", param: "ip"},
		{query: "qname=a..b", param: "qname", inError: "not a domain name"},
		{query: "qname=192.0.2.1", param: "qname"},
		{query: "qname=" + strings.Repeat("a", 64) + ".com", param: "qname"},
		{query: "username=a%00b", param: "username"},
		{query: "deviceid=%FF", param: "deviceid"},
		{query: "username=" + strings.Repeat("u", 1025), param: "username", inError: "longer"},
		{query: "by=category", param: "by", inError: "unknown parameter"},
		{query: "colour=red", param: "colour", inError: "unknown parameter"},
		{query: "limit=5&limit=6", param: "limit", inError: "2 times"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			v, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			q, err := ParseEvents("acme", v, now)
			if tc.param == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				tc.check(t, q)
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("accepted (%+v) or not a ParamError: %v", q, err)
			}
			if pe.Param != tc.param || !strings.Contains(err.Error(), tc.inError) {
				t.Fatalf("error %q (param %q): want param %q and %q", err, pe.Param, tc.param, tc.inError)
			}
		})
	}
}

func TestParseSummary(t *testing.T) {
	for _, tc := range []struct {
		query   string
		param   string
		inError string
		check   func(t *testing.T, q activity.SummaryQuery)
	}{
		{query: "by=category", check: func(t *testing.T, q activity.SummaryQuery) {
			if q.By != activity.ByCategory || q.Top != activity.DefaultTop || q.Interval != 0 || !q.To.Equal(now) || !q.From.Equal(now.Add(-24*time.Hour)) {
				t.Errorf("defaults: %+v", q)
			}
		}},
		{query: "by=domain&top=100&interval=1h&from=-7d", check: func(t *testing.T, q activity.SummaryQuery) {
			if q.By != activity.ByDomain || q.Top != 100 || q.Interval != time.Hour || !q.From.Equal(now.Add(-7*24*time.Hour)) {
				t.Errorf("set: %+v", q)
			}
		}},
		{query: "by=subscriber&interval=1m&from=-1000m", check: func(t *testing.T, q activity.SummaryQuery) {
			if q.Interval != time.Minute {
				t.Errorf("1000 buckets: %+v", q)
			}
		}},
		{query: "by=reason", check: func(t *testing.T, q activity.SummaryQuery) {
			if q.By != activity.ByReason {
				t.Errorf("by reason: %+v", q)
			}
		}},
		{query: "", param: "by", inError: "required"},
		{query: "by=colour", param: "by", inError: "category, domain, subscriber, reason"},
		{query: "by=category&top=0", param: "top", inError: "1 to 100"},
		{query: "by=category&top=101", param: "top"},
		{query: "by=category&interval=30s", param: "interval", inError: "from 1m"},
		{query: "by=category&interval=-1h", param: "interval"},
		{query: "by=category&interval=soon", param: "interval"},
		{query: "by=category&interval=2562047h", param: "interval", inError: "8784h"},
		{query: "by=category&interval=8784h", check: func(t *testing.T, q activity.SummaryQuery) {
			if q.Interval != activity.MaxRange {
				t.Errorf("the longest interval: %v", q.Interval)
			}
		}},
		{query: "by=category&interval=1m&from=-1001m", param: "interval", inError: "1001 intervals"},
		{query: "by=category&from=now&to=-1h", param: "from"},
		{query: "by=category&limit=5", param: "limit", inError: "unknown parameter"},
		{query: "by=category&by=domain", param: "by", inError: "2 times"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			v, _ := url.ParseQuery(tc.query)
			q, err := ParseSummary("acme", v, now)
			if tc.param == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				tc.check(t, q)
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param != tc.param || !strings.Contains(err.Error(), tc.inError) {
				t.Fatalf("got %+v, %v: want a refusal of %q saying %q", q, err, tc.param, tc.inError)
			}
		})
	}
}

// FuzzParse: whatever the query, each parser answers a query its store
// may rely on (Validate holds) or a ParamError; never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "from=-24h&to=now", "ip=h:0123456789abcdef&qname=x.example", "by=domain&interval=1m&top=3",
		"limit=1&cursor=AAAAAAAAAAAAAAAAAAAAAA", "from=2026-01-01&to=2026-01-02", "ip=::ffff:1.2.3.4/120", "from=-9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		eq, err := ParseEvents("acme", v, now)
		var pe *ParamError
		if err != nil && !errors.As(err, &pe) {
			t.Fatalf("events: %v is not a ParamError", err)
		}
		if err == nil {
			if verr := eq.Validate(); verr != nil {
				t.Fatalf("events: accepted an invalid query: %v", verr)
			}
		}
		sq, err := ParseSummary("acme", v, now)
		if err != nil && !errors.As(err, &pe) {
			t.Fatalf("summary: %v is not a ParamError", err)
		}
		if err == nil {
			if verr := sq.Validate(); verr != nil {
				t.Fatalf("summary: accepted an invalid query: %v", verr)
			}
			// The answer's buckets, as the handler lays them out.
			b := Buckets(activity.Summary{From: sq.From, To: sq.To, Interval: sq.Interval})
			if sq.Interval > 0 && (len(b) < 1 || len(b) > activity.MaxBuckets || !b[0].Equal(sq.From) || !b[len(b)-1].Before(sq.To)) {
				t.Fatalf("buckets of %+v: %d", sq, len(b))
			}
		}
	})
}
