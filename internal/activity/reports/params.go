package reports

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/policy"
)

// DefaultRange is the span asked for when from is left out: the day
// before to.
const DefaultRange = 24 * time.Hour

// maxParamLen bounds any one parameter's text before it is parsed; the
// longest legitimate value (a username or device id) is
// identity.MaxAttributeLen bytes.
const maxParamLen = identity.MaxAttributeLen

// ParamError is a parameter the parser refused: Param names it, Msg says
// what is wrong and what is wanted. The REST API answers it 400, the
// console shows Msg beside the field.
type ParamError struct {
	Param string
	Msg   string
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Msg }

func bad(param, format string, a ...any) *ParamError {
	return &ParamError{Param: param, Msg: fmt.Sprintf(format, a...)}
}

// EventParams and SummaryParams are the parameters each endpoint takes,
// in the order the docs list them; any other is refused.
var (
	EventParams   = []string{"from", "to", "username", "deviceid", "ip", "verdict", "reason", "qname", "limit", "cursor"}
	SummaryParams = []string{"from", "to", "by", "top", "interval"}
)

// Verdicts and Reasons are the values the verdict and reason filters
// take: the policy's (docs/policy.md).
var (
	Verdicts = []string{string(policy.VerdictAllow), string(policy.VerdictBlock), string(policy.VerdictRedirect)}
	Reasons  = []string{string(policy.ReasonFilteringOff), string(policy.ReasonAllowlist), string(policy.ReasonRPZ),
		string(policy.ReasonBlocklist), string(policy.ReasonPaused), string(policy.ReasonSafeSearch),
		string(policy.ReasonCategory), string(policy.ReasonNetwork), string(policy.ReasonDefault),
		// An allow made before the node's policy data had loaded
		// (resolver.ReasonUnready, resolver.unready: open).
		"unready"}
	Dimensions = []string{string(activity.ByCategory), string(activity.ByDomain), string(activity.BySubscriber), string(activity.ByReason)}
)

// params reads v against the parameters allowed: an unknown or repeated
// parameter, or one longer than maxParamLen, is refused; an empty one is
// the same as leaving it out (a GET form sends its empty fields).
func params(v url.Values, allowed []string) (map[string]string, error) {
	out := make(map[string]string, len(v))
	for k, vs := range v {
		if !contains(allowed, k) {
			return nil, bad(k, "unknown parameter; this endpoint takes %s", strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return nil, bad(k, "given %d times; give it once", len(vs))
		}
		s := strings.TrimSpace(vs[0])
		if len(s) > maxParamLen {
			return nil, bad(k, "longer than %d bytes", maxParamLen)
		}
		if s != "" {
			out[k] = s
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ParseEvents turns the query of GET /org/{org}/activity (or the
// console's filter form) into a validated EventQuery. now is the time
// "now" and relative times count from. Every refusal is a *ParamError.
func ParseEvents(org string, v url.Values, now time.Time) (activity.EventQuery, error) {
	q := activity.EventQuery{Org: org, Limit: activity.DefaultLimit}
	p, err := params(v, EventParams)
	if err != nil {
		return q, err
	}
	if q.From, q.To, err = parseRange(p, now); err != nil {
		return q, err
	}
	for _, f := range [...]struct {
		name string
		dst  *string
	}{{"username", &q.Username}, {"deviceid", &q.DeviceID}} {
		s := p[f.name]
		if err := identity.CheckText(f.name, s); err != nil {
			return q, bad(f.name, "must be UTF-8 text without NUL characters")
		}
		*f.dst = s
	}
	if s, ok := p["ip"]; ok {
		if q.IP, err = parseIP(s); err != nil {
			return q, err
		}
	}
	if s, ok := p["verdict"]; ok {
		if !contains(Verdicts, s) {
			return q, bad("verdict", "%q: want %s", s, strings.Join(Verdicts, ", "))
		}
		q.Verdict = s
	}
	if s, ok := p["reason"]; ok {
		if !contains(Reasons, s) {
			return q, bad("reason", "%q: want %s", s, strings.Join(Reasons, ", "))
		}
		q.Reason = s
	}
	if s, ok := p["qname"]; ok {
		n, err := feed.NormalizeName(s)
		if err != nil {
			return q, bad("qname", "not a domain name: %v", err)
		}
		q.QName = n + "."
	}
	if s, ok := p["limit"]; ok {
		if q.Limit, err = parseBounded("limit", s, activity.MaxLimit); err != nil {
			return q, err
		}
	}
	if s, ok := p["cursor"]; ok {
		c, err := activity.ParseCursor(s)
		if err != nil {
			return q, bad("cursor", "not a cursor this server handed out; start again without it")
		}
		q.After = &c
	}
	// The bounds were each checked above, naming the parameter; Validate
	// is the store's contract, checked once more so that the two can never
	// drift apart unnoticed.
	if err := q.Validate(); err != nil {
		return q, bad("query", "%v", err)
	}
	return q, nil
}

// ParseSummary turns the query of GET /org/{org}/activity/summary into a
// validated SummaryQuery. by is required; every refusal is a *ParamError.
func ParseSummary(org string, v url.Values, now time.Time) (activity.SummaryQuery, error) {
	q := activity.SummaryQuery{Org: org, Top: activity.DefaultTop}
	p, err := params(v, SummaryParams)
	if err != nil {
		return q, err
	}
	if q.From, q.To, err = parseRange(p, now); err != nil {
		return q, err
	}
	by, ok := p["by"]
	if !ok {
		return q, bad("by", "required: %s", strings.Join(Dimensions, ", "))
	}
	if !contains(Dimensions, by) {
		return q, bad("by", "%q: want %s", by, strings.Join(Dimensions, ", "))
	}
	q.By = activity.Dimension(by)
	if s, ok := p["top"]; ok {
		if q.Top, err = parseBounded("top", s, activity.MaxTop); err != nil {
			return q, err
		}
	}
	if s, ok := p["interval"]; ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Minute || d > activity.MaxRange {
			return q, bad("interval", "%q: want a duration from 1m to 8784h (366 days), such as 5m, 1h or 24h", s)
		}
		if n := intervals(q.To.Sub(q.From), d); n > activity.MaxBuckets {
			return q, bad("interval", "%v cuts the range into %d intervals, more than %d: choose a longer one", d, n, activity.MaxBuckets)
		}
		q.Interval = d
	}
	if err := q.Validate(); err != nil {
		return q, bad("query", "%v", err)
	}
	return q, nil
}

// parseRange reads from and to: to defaults to now, from to
// DefaultRange before to.
func parseRange(p map[string]string, now time.Time) (from, to time.Time, err error) {
	to = now
	if s, ok := p["to"]; ok {
		if to, err = ParseTime(s, now); err != nil {
			return from, to, bad("to", "%v", err)
		}
	}
	from = to.Add(-DefaultRange)
	if s, ok := p["from"]; ok {
		if from, err = ParseTime(s, now); err != nil {
			return from, to, bad("from", "%v", err)
		}
	}
	if !from.Before(to) {
		return from, to, bad("from", "%s is not before to (%s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if to.Sub(from) > activity.MaxRange {
		return from, to, bad("from", "from–to spans %v, more than the %v (366 days) a question may", to.Sub(from), activity.MaxRange)
	}
	return from.UTC(), to.UTC(), nil
}

// The span of times the reports take: nothing before the Unix epoch (a
// cursor cannot say it) and nothing past year 9999 (RFC 3339 cannot).
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// ParseTime reads a report's time: RFC 3339 ("2026-11-28T09:00:00Z",
// with any offset), a UTC date ("2026-11-28", its midnight), "now", or a
// time relative to now: "-" and a Go duration ("-24h", "-90m") or a number
// of days ("-7d").
func ParseTime(s string, now time.Time) (time.Time, error) {
	var t time.Time
	switch {
	case s == "now":
		t = now
	case strings.HasPrefix(s, "-"):
		d, err := parseAgo(s[1:])
		if err != nil {
			return t, err
		}
		t = now.Add(-d)
	default:
		var err error
		if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
			if t, err = time.Parse(time.DateOnly, s); err != nil {
				return t, fmt.Errorf("%q: want RFC 3339 (2026-11-28T09:00:00Z), a date (2026-11-28), now, or a time ago such as -24h or -7d", s)
			}
		}
	}
	if t.Before(minTime) || t.After(maxTime) {
		return t, fmt.Errorf("%q is outside 1970…9999", s)
	}
	return t.UTC(), nil
}

// maxAgo keeps a relative time's arithmetic far from overflow; anything
// older is beyond MaxRange from now anyway.
const maxAgo = 100 * 366 * 24 * time.Hour

func parseAgo(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > int(maxAgo/(24*time.Hour)) {
			return 0, fmt.Errorf("-%s: want a number of days such as -7d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return 0, fmt.Errorf("-%s: want a time ago such as -24h, -90m or -7d", s)
		}
	}
	if d > maxAgo {
		return 0, fmt.Errorf("-%s: too long ago", s)
	}
	return d, nil
}

// intervals is how many intervals of d (> 0) cover span (≥ 0), the last
// one perhaps cut short; written so that no sum can overflow.
func intervals(span, d time.Duration) int64 {
	n := int64(span / d)
	if span%d != 0 {
		n++
	}
	return n
}

func parseBounded(name, s string, max int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, bad(name, "%q: want a whole number from 1 to %d", s, max)
	}
	return n, nil
}

// parseIP reads the ip filter: an address, a prefix (its network: the
// addresses and truncated networks inside it) or a client's keyed hash,
// "h:" and 16 hex digits, as activity.client_ip hash keeps it.
func parseIP(s string) (string, error) {
	if h, ok := strings.CutPrefix(s, "h:"); ok {
		if len(h) != 16 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
			return "", bad("ip", "%q: a client hash is h: and 16 hex digits", s)
		}
		return "h:" + strings.ToLower(h), nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return "", bad("ip", "%q: want an address, a prefix such as 192.0.2.0/24, or h: and 16 hex digits", s)
		}
		return p.Masked().String(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return "", bad("ip", "%q: want an address, a prefix such as 192.0.2.0/24, or h: and 16 hex digits", s)
	}
	return a.Unmap().String(), nil
}
