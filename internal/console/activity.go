package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/reports"
	"github.com/svc-pf/svc-pf/internal/httpapi"
)

// The Activity page: an organisation's recent events, filtered by a GET
// form whose values go through the REST reports' parser
// (reports.ParseEvents, ParseSummary), and its counts over the range as
// server-rendered SVG charts.

// activityTopKeys is how many keys each chart stacks: more would not be
// told apart by colour.
const activityTopKeys = 5

// activityFormFields are the filter form's fields, which a refusal is
// shown beside; any other parameter's refusal (limit, cursor) is the
// page's.
var activityFormFields = []string{"from", "to", "username", "deviceid", "ip", "verdict", "reason", "qname"}

type activityData struct {
	Configured bool
	Asked      bool
	Verdicts   []string
	Reasons    []string
	From, To   string
	Rows       []activityRow
	Next       string
	Charts     []chart
}

type activityRow struct {
	Time, Subscriber, Client, QName, QType, Verdict, Action, Reason, Rule string
	// Why is the "why" page for this name and subscriber.
	Why string
}

func (c *Console) activityPage(q *req) {
	pg := q.page("Activity of "+q.org, "")
	pg.Tab = "activity"
	d := activityData{Configured: c.reports.Configured(), Verdicts: reports.Verdicts, Reasons: reports.Reasons}
	qs := q.r.URL.Query()
	// The filter's parameters only (the flash's "done" is the page's).
	v := url.Values{}
	for _, k := range reports.EventParams {
		if vs, ok := qs[k]; ok {
			v[k] = vs
		}
	}
	// A first visit shows the blocks; the form's "any" verdict shows all.
	if len(v) == 0 {
		v.Set("verdict", "block")
	}
	pg.Form = v
	pg.Data = &d
	now := c.cfg.Clock()
	eq, err := reports.ParseEvents(q.org, v, now)
	if err != nil {
		c.activityRefused(q, pg, err)
		return
	}
	d.From, d.To = eq.From.Format(time.RFC3339), eq.To.Format(time.RFC3339)
	if !d.Configured {
		pg.Error = reports.NotConfigured
		c.render(q.w, q.r, http.StatusOK, "activity", pg)
		return
	}
	page, err := c.reports.Events(q.ctx(), eq)
	if err != nil {
		c.activityUnavailable(q, pg, err)
		return
	}
	d.Asked = true
	for _, e := range page.Events {
		d.Rows = append(d.Rows, c.activityRow(q.org, e.Event))
	}
	if page.Next != nil {
		next := url.Values{}
		for k, vs := range v {
			if k != "cursor" && vs[0] != "" {
				next.Set(k, vs[0])
			}
		}
		next.Set("from", eq.From.Format(time.RFC3339Nano))
		next.Set("to", eq.To.Format(time.RFC3339Nano))
		next.Set("cursor", page.Next.String())
		d.Next = "/ui/orgs/" + url.PathEscape(q.org) + "/activity?" + next.Encode()
	}
	interval := chartInterval(eq.To.Sub(eq.From))
	for _, by := range []activity.Dimension{activity.ByCategory, activity.BySubscriber, activity.ByReason} {
		sv := url.Values{"from": {eq.From.Format(time.RFC3339Nano)}, "to": {eq.To.Format(time.RFC3339Nano)},
			"by": {string(by)}, "top": {strconv.Itoa(activityTopKeys)}, "interval": {interval.String()}}
		sq, err := reports.ParseSummary(q.org, sv, now)
		if err != nil {
			c.internal(q.w, q.r, fmt.Errorf("activity chart's own query refused: %w", err))
			return
		}
		s, err := c.reports.Summary(q.ctx(), sq)
		if err != nil {
			c.activityUnavailable(q, pg, err)
			return
		}
		d.Charts = append(d.Charts, buildChart(s))
	}
	c.render(q.w, q.r, http.StatusOK, "activity", pg)
}

// activityRefused shows the form again with the parser's message beside
// its field.
func (c *Console) activityRefused(q *req, pg *page, err error) {
	var pe *reports.ParamError
	if errors.As(err, &pe) {
		for _, f := range activityFormFields {
			if f == pe.Param {
				pg.Fields[f] = pe.Msg
				c.render(q.w, q.r, http.StatusBadRequest, "activity", pg)
				return
			}
		}
	}
	pg.Error = err.Error()
	c.render(q.w, q.r, http.StatusBadRequest, "activity", pg)
}

// activityUnavailable: the store did not answer; the page says what to
// check, the log has the store's error.
func (c *Console) activityUnavailable(q *req, pg *page, err error) {
	id := httpapi.RequestID(q.ctx())
	c.log.Error("console activity page: the store failed", "request_id", id, "err", err)
	pg.Error = reports.UnavailableMessage(id)
	pg.Data.(*activityData).Asked = false
	pg.Data.(*activityData).Charts = nil
	c.render(q.w, q.r, http.StatusServiceUnavailable, "activity", pg)
}

func (c *Console) activityRow(org string, e activity.Event) activityRow {
	var sub []string
	for _, s := range []string{e.Username, e.DeviceID, e.Location} {
		if s != "" {
			sub = append(sub, s)
		}
	}
	row := activityRow{Time: e.Time.UTC().Format(time.DateTime), Subscriber: strings.Join(sub, " · "), Client: e.Client,
		QName: e.QName, QType: reports.QTypeName(e.QType), Verdict: e.Verdict, Action: e.Action, Reason: e.Reason, Rule: e.Rule}
	// The why page asks the simulator about this name for this
	// subscriber: by username or device id when the event has one, and
	// by the client's address when it was kept in full (a network or a
	// hash names no one client).
	why := url.Values{"domain": {strings.TrimSuffix(e.QName, ".")}}
	if e.Username != "" {
		why.Set("username", e.Username)
	}
	if e.DeviceID != "" {
		why.Set("deviceid", e.DeviceID)
	}
	if a, err := netip.ParseAddr(e.Client); err == nil {
		why.Set("ip", a.String())
	}
	if len(why) > 1 {
		row.Why = "/ui/orgs/" + url.PathEscape(org) + "/why?" + why.Encode()
	}
	return row
}

// chartIntervals are the intervals a chart may use; chartInterval picks
// the shortest that cuts the range into at most maxBars.
var chartIntervals = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
	3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour}

const maxBars = 30

func chartInterval(span time.Duration) time.Duration {
	for _, d := range chartIntervals {
		if (span+d-1)/d <= maxBars {
			return d
		}
	}
	return chartIntervals[len(chartIntervals)-1]
}

// chart is one stacked bar chart, laid out in Go and drawn by the
// template as inline SVG: one bar per interval, one segment per key.
type chart struct {
	ID, Title, Desc string
	Width, Height   int
	Bars            []chartRect
	YTicks          []chartTick
	XTicks          []chartTick
	Legend          []chartKey
	PlotLeft        int
	PlotBottom      int
	PlotRight       int
	Empty           bool
	Other           int64
}

type chartRect struct {
	X, Y, W, H int
	Fill       string
	Title      string
}

type chartTick struct {
	X, Y  int
	Label string
	// Anchor is the label's text-anchor: the first and last x labels
	// align to their bar's edge so that neither runs off the chart.
	Anchor string
}

type chartKey struct {
	Label string
	Fill  string
	Count int64
}

// chartColours tell activityTopKeys keys apart, also for the common
// forms of colour blindness (Okabe–Ito).
var chartColours = []string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9"}

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW, chartH            = 720, 220
	plotLeft, plotRight       = 56, 710
	plotTop, plotBottom       = 12, 190
	chartBarGap         int64 = 1
)

func buildChart(s activity.Summary) chart {
	names := map[activity.Dimension]string{activity.ByCategory: "category", activity.BySubscriber: "subscriber", activity.ByReason: "reason"}
	ch := chart{ID: "chart-" + string(s.By), Title: "Queries by " + names[s.By] + " per " + shortDuration(s.Interval),
		Width: chartW, Height: chartH, PlotLeft: plotLeft, PlotBottom: plotBottom, PlotRight: plotRight, Other: s.Other}
	buckets := reports.Buckets(s)
	n := len(buckets)
	totals := make([]int64, n)
	var peak int64
	for _, r := range s.Rows {
		for i := 0; i < n && i < len(r.Series); i++ {
			totals[i] += r.Series[i]
			peak = max(peak, totals[i])
		}
	}
	ch.Desc = fmt.Sprintf("Stacked bars, one per %s from %s to %s UTC; %d queries in all, %d blocked.",
		shortDuration(s.Interval), s.From.Format(time.DateTime), s.To.Format(time.DateTime), s.Total, s.Blocked)
	if n == 0 || peak == 0 {
		ch.Empty = true
		return ch
	}
	// A round top for the y axis, so that its labels read easily.
	top := niceCeil(peak)
	plotW, plotH := plotRight-plotLeft, plotBottom-plotTop
	barW := plotW / n
	for k, r := range s.Rows {
		fill := chartColours[k%len(chartColours)]
		label := summaryKeyLabel(s.By, r)
		ch.Legend = append(ch.Legend, chartKey{Label: label, Fill: fill, Count: r.Count})
	}
	base := make([]int64, n)
	for k, r := range s.Rows {
		fill := chartColours[k%len(chartColours)]
		for i := 0; i < n && i < len(r.Series); i++ {
			v := r.Series[i]
			if v <= 0 {
				continue
			}
			y0 := plotBottom - int(base[i]*int64(plotH)/top)
			base[i] += v
			y1 := plotBottom - int(base[i]*int64(plotH)/top)
			h := max(y0-y1, 1)
			ch.Bars = append(ch.Bars, chartRect{X: plotLeft + i*barW + int(chartBarGap), Y: y0 - h, W: max(barW-2*int(chartBarGap), 1), H: h,
				Fill: fill, Title: fmt.Sprintf("%s, %s UTC: %d", ch.Legend[k].Label, buckets[i].Format("Jan 2 15:04"), v)})
		}
	}
	for _, f := range []int64{0, 2, 4} {
		val := top * f / 4
		ch.YTicks = append(ch.YTicks, chartTick{X: plotLeft - 6, Y: plotBottom - int(val*int64(plotH)/top), Label: strconv.FormatInt(val, 10), Anchor: "end"})
	}
	layout := "Jan 2 15:04"
	if s.Interval >= 24*time.Hour {
		layout = "Jan 2"
	}
	ch.XTicks = append(ch.XTicks, chartTick{X: plotLeft, Y: plotBottom + 18, Label: buckets[0].Format(layout), Anchor: "start"})
	if n > 2 {
		ch.XTicks = append(ch.XTicks, chartTick{X: plotLeft + (n/2)*barW + barW/2, Y: plotBottom + 18, Label: buckets[n/2].Format(layout), Anchor: "middle"})
	}
	if n > 1 {
		ch.XTicks = append(ch.XTicks, chartTick{X: plotLeft + n*barW, Y: plotBottom + 18, Label: buckets[n-1].Format(layout), Anchor: "end"})
	}
	return ch
}

// niceCeil is the smallest of 1, 2, 5 × 10ⁿ at or above v (v > 0), so
// that the y axis ends on a round number.
func niceCeil(v int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
		if p > 1<<58 {
			return v
		}
	}
}

// summaryKeyLabel names a summary row for a person.
func summaryKeyLabel(by activity.Dimension, r activity.SummaryRow) string {
	switch by {
	case activity.ByCategory:
		if r.Key == "0" {
			return "no category"
		}
		return "category " + r.Key
	case activity.BySubscriber:
		var parts []string
		for _, s := range []string{r.Username, r.DeviceID, r.Location} {
			if s != "" {
				parts = append(parts, s)
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, " · ")
		}
		if r.Key == "" {
			return "global policy (no session)"
		}
		return "session " + r.Key
	}
	return r.Key
}

// shortDuration writes 1h rather than 1h0m0s.
func shortDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return d.String()
}
