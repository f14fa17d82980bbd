package console_test

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/console"
)

// fakeActivity stands in for the activity store (another part's work,
// at the activity.Reader boundary): a fixed list of acme's events, paged
// newest first by the cursor, and summaries whose series fill the range
// asked for. It records every question.
type fakeActivity struct {
	mu     sync.Mutex
	all    []activity.StoredEvent
	events []activity.EventQuery
	sums   []activity.SummaryQuery
	err    error
}

func newFakeActivity(now time.Time) *fakeActivity {
	f := &fakeActivity{}
	ev := func(id int64, ago time.Duration, user, client, qname, verdict, action, reason, rule string) activity.StoredEvent {
		return activity.StoredEvent{ID: id, Event: activity.Event{Time: now.Add(-ago), Node: "dns1", Org: "acme", SessionID: "s-" + user,
			Username: user, Client: client, QName: qname, QType: 1, Transport: "udp", Verdict: verdict, Action: action,
			Reason: reason, Rule: rule, Categories: []uint16{3}}}
	}
	f.all = []activity.StoredEvent{
		ev(5, 10*time.Minute, "alice", "10.0.0.7", "ads.example.com.", "block", "nxdomain", "category", "category 3 <blocked>"),
		ev(4, 20*time.Minute, "bob", "10.0.0.0/24", "tracker.example.net.", "block", "nxdomain", "blocklist", "tracker.example.net"),
		ev(3, 30*time.Minute, "", "h:0123456789abcdef", "casino.example.org.", "block", "nxdomain", "category", "category 7"),
	}
	return f
}

func (f *fakeActivity) Events(_ context.Context, q activity.EventQuery) (activity.EventPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, q)
	if f.err != nil {
		return activity.EventPage{}, f.err
	}
	var page activity.EventPage
	for _, e := range f.all {
		if q.After != nil && e.ID >= q.After.ID {
			continue
		}
		if len(page.Events) == q.Limit {
			last := page.Events[len(page.Events)-1]
			page.Next = &activity.Cursor{Time: last.Time, ID: last.ID}
			break
		}
		page.Events = append(page.Events, e)
	}
	return page, nil
}

func (f *fakeActivity) Summary(_ context.Context, q activity.SummaryQuery) (activity.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sums = append(f.sums, q)
	if f.err != nil {
		return activity.Summary{}, f.err
	}
	n := int((q.To.Sub(q.From) + q.Interval - 1) / q.Interval)
	series := func(k int64) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = k * int64(i%4+1)
		}
		return s
	}
	rows := []activity.SummaryRow{{Key: "3", Count: 40, Blocked: 40, Series: series(2)}, {Key: "0", Count: 20, Series: series(1)}}
	switch q.By {
	case activity.BySubscriber:
		rows = []activity.SummaryRow{{Key: "s-alice", Username: "alice", Count: 40, Series: series(2)}, {Key: "", Count: 20, Series: series(1)}}
	case activity.ByReason:
		rows = []activity.SummaryRow{{Key: "category", Count: 40, Series: series(2)}, {Key: "default", Count: 20, Series: series(1)}}
	}
	return activity.Summary{Total: 60, Blocked: 40, Other: 3, Rows: rows}, nil
}

// storedActivity writes the fake's events, and 37 plain allows of
// alice's, into a real store (day files under a test directory), as the
// collector would: what the browser test reads.
func storedActivity(t *testing.T, now time.Time) activity.Reader {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{URL: "dir:" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	b := activity.Batch{Node: "dns1", Boot: 1, Seq: 1, Counts: []activity.Count{{Start: now.Truncate(time.Minute), Seconds: 60,
		Org: "acme", SessionID: "s-alice", Username: "alice", Reason: "default", N: 37}}}
	for _, e := range newFakeActivity(now).all {
		b.Events = append(b.Events, e.Event)
	}
	if err := st.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	return st
}

var whyLink = regexp.MustCompile(`<a class="why" href="([^"]+)"`)

func TestActivityPage(t *testing.T) {
	now := time.Now().UTC()
	fa := newFakeActivity(now)
	e := newEnv(t, openSQLite(t), func(c *console.Config) { c.Activity = fa })
	b := e.browser()
	b.signIn(viewerSecret)

	// A first visit: the blocks of the last day.
	a := must(t, b.get("/ui/orgs/acme/activity"), http.StatusOK, `id="events"`, "ads.example.com.", "tracker.example.net.",
		`<option selected>block</option>`, `aria-current="page">Activity`)
	q := fa.events[0]
	if q.Org != "acme" || q.Verdict != "block" || q.Limit != activity.DefaultLimit || q.To.Sub(q.From) != 24*time.Hour {
		t.Fatalf("the page asked %+v", q)
	}
	// The rule is text, never markup.
	if !strings.Contains(a.body, "category 3 &lt;blocked&gt;") {
		t.Fatalf("rule not escaped:\n%s", a.body)
	}
	// Each row links to the why page for its name and subscriber; the
	// address only when it was kept in full; a row with neither a
	// username, a device id nor an address names no subscriber to ask
	// about, and has no link.
	links := whyLink.FindAllStringSubmatch(a.body, -1)
	if len(links) != 2 {
		t.Fatalf("why links: %v", links)
	}
	first, _ := url.Parse(html.UnescapeString(links[0][1]))
	if first.Path != "/ui/orgs/acme/why" || first.Query().Get("domain") != "ads.example.com" ||
		first.Query().Get("username") != "alice" || first.Query().Get("ip") != "10.0.0.7" {
		t.Fatalf("why link %s", first)
	}
	second, _ := url.Parse(html.UnescapeString(links[1][1]))
	if second.Query().Has("ip") || second.Query().Get("username") != "bob" {
		t.Fatalf("a truncated network is not an address to ask about: %s", second)
	}
	// The link opens the why page with its form filled in.
	must(t, b.get(first.String()), http.StatusOK, `value="ads.example.com"`, `value="alice"`, `value="10.0.0.7"`)

	// Three charts over the same range, by category, subscriber and
	// reason, hourly over a day: SVG with titles, axes and a legend.
	if len(fa.sums) != 3 {
		t.Fatalf("summaries asked: %+v", fa.sums)
	}
	for i, by := range []activity.Dimension{activity.ByCategory, activity.BySubscriber, activity.ByReason} {
		s := fa.sums[i]
		if s.By != by || s.Interval != time.Hour || s.Top != 5 || !s.From.Equal(q.From.Truncate(0)) || !s.To.Equal(q.To) {
			t.Fatalf("summary %d asked %+v (events %v–%v)", i, s, q.From, q.To)
		}
	}
	for _, want := range []string{`<svg viewBox="0 0 720 220" role="img"`, `<title id="chart-category-title">Queries by category per 1h</title>`,
		`<title id="chart-subscriber-title">`, `<title id="chart-reason-title">`, "category 3: 40", "no category: 20",
		"alice: 40", "global policy (no session): 20", "other keys: 3", `<rect x="`, `text-anchor="end"`} {
		if !strings.Contains(a.body, want) {
			t.Fatalf("charts lack %q:\n%s", want, a.body)
		}
	}
	// 24 bars per chart of two keys each.
	if n := strings.Count(a.body, "<rect x="); n != 3*2*24 {
		t.Fatalf("%d bars, want %d", n, 3*2*24)
	}
}

func TestActivityPaging(t *testing.T) {
	fa := newFakeActivity(time.Now().UTC())
	e := newEnv(t, openSQLite(t), func(c *console.Config) { c.Activity = fa })
	b := e.browser()
	b.signIn(acmeSecret)
	a := must(t, b.get("/ui/orgs/acme/activity?verdict=&limit=2&from=-2h"), http.StatusOK, "ads.example.com.", `id="next"`)
	if strings.Contains(a.body, "casino.example.org.") {
		t.Fatal("more than a page")
	}
	m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(a.body)
	next := html.UnescapeString(m[1])
	a = must(t, b.get(next), http.StatusOK, "casino.example.org.")
	if strings.Contains(a.body, `id="next"`) || strings.Contains(a.body, "ads.example.com.") {
		t.Fatalf("second page:\n%s", a.body)
	}
	q1, q2 := fa.events[0], fa.events[1]
	if q1.Verdict != "" || q2.After == nil || q2.After.ID != 4 || !q2.From.Equal(q1.From) || !q2.To.Equal(q1.To) || q2.Limit != 2 {
		t.Fatalf("pages asked %+v then %+v", q1, q2)
	}
}

// TestActivityRefusals: bad filter input shows the form again with the
// message beside the field (400), and the store is not asked.
func TestActivityRefusals(t *testing.T) {
	fa := newFakeActivity(time.Now().UTC())
	e := newEnv(t, openSQLite(t), func(c *console.Config) { c.Activity = fa })
	b := e.browser()
	b.signIn(viewerSecret)
	for path, want := range map[string]string{
		"/ui/orgs/acme/activity?ip=nope":             `id="ip-error">&#34;nope&#34;: want an address`,
		"/ui/orgs/acme/activity?from=yesterday":      `id="from-error">`,
		"/ui/orgs/acme/activity?from=now&to=-1h":     `id="from-error">`,
		"/ui/orgs/acme/activity?qname=a..b":          `id="qname-error">not a domain name`,
		"/ui/orgs/acme/activity?verdict=maybe":       `id="verdict-error">`,
		"/ui/orgs/acme/activity?limit=0":             `id="page-error">limit:`,
		"/ui/orgs/acme/activity?cursor=zz":           `id="page-error">cursor:`,
		"/ui/orgs/acme/activity?username=a%00b&to=x": `id="to-error">`,
	} {
		a := must(t, b.get(path), http.StatusBadRequest, want, `id="filters"`)
		if strings.Contains(a.body, `id="events"`) {
			t.Fatalf("%s: a table with a refused filter", path)
		}
	}
	if len(fa.events) != 0 {
		t.Fatalf("the store was asked: %+v", fa.events)
	}
	// Another organisation's activity is not this token's.
	must(t, b.get("/ui/orgs/beta/activity"), http.StatusForbidden)
}

func TestActivityWithoutStore(t *testing.T) {
	e := newEnv(t, openSQLite(t))
	b := e.browser()
	b.signIn(viewerSecret)
	must(t, b.get("/ui/orgs/acme/activity"), http.StatusOK, "activity store not configured: set activity.store.url", `id="filters"`)
}

func TestActivityStoreFails(t *testing.T) {
	fa := newFakeActivity(time.Now().UTC())
	fa.err = errors.New("database is locked at /var/lib/x")
	e := newEnv(t, openSQLite(t), func(c *console.Config) { c.Activity = fa })
	b := e.browser()
	b.signIn(viewerSecret)
	a := must(t, b.get("/ui/orgs/acme/activity"), http.StatusServiceUnavailable, "check that the store at activity.store.url is reachable")
	if strings.Contains(a.body, "/var/lib/x") || !strings.Contains(e.logs.String(), "/var/lib/x") {
		t.Fatalf("the store's error belongs in the log, not the page:\n%s", a.body)
	}
}
