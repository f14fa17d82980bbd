package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // schedules are judged in IANA zones, whatever the machine has

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// fakeCats is a feed: keys (name, no path) to categories; a name matches
// its own entry, else its nearest parent's, as feeds.Set does.
type fakeCats map[string][]feed.Category

func (f fakeCats) Lookup(name, path string, dst []feed.Category) []feed.Category {
	for {
		if cs, ok := f[name]; ok {
			return append(dst, cs...)
		}
		i := strings.IndexByte(name, '.')
		if i < 0 {
			return dst
		}
		name = name[i+1:]
	}
}

var testCats = fakeCats{
	"bad.example":   {{Code: 3, Title: "Malware", Feed: "threats", Name: "bad.example"}},
	"games.example": {{Code: 7, Title: "Games", Feed: "content", Name: "games.example"}},
	"both.example": {
		{Code: 9, Title: "News", Feed: "content", Name: "both.example"},
		{Code: 3, Title: "Malware", Feed: "threats", Name: "both.example"},
	},
	"www.google.com": {{Code: 3, Feed: "threats", Name: "www.google.com"}},
	"ads.example":    {{Code: 3, Feed: "threats", Name: "ads.example"}},
}

// compile parses docs (least specific first) as layers and compiles their
// merge.
func compile(t testing.TB, docs ...string) *Policy {
	t.Helper()
	var layers []settings.Layer
	for i, s := range docs {
		d, err := settings.Parse([]byte(s))
		if err != nil {
			t.Fatalf("Parse(%s): %v", s, err)
		}
		layers = append(layers, settings.Layer{Name: []string{"global", "org:acme", "profile:1", "location:hq", "username:u", "deviceid:d"}[i], Doc: d})
	}
	return CompileWith(settings.Merge(layers...), Options{})
}

// decide evaluates in against p into a new Decision, as the DNS path's
// DecideInto does into a reused one.
func decide(in Input, p *Policy, cats Categories) Decision {
	d := Decision{Trace: make([]TraceEntry, 0, TraceCap)}
	DecideInto(&d, &in, p, cats)
	return d
}

// evaluationOrder is the order of the steps docs/policy.md states: a
// decision no step ends traces each of them, in this order.
var evaluationOrder = []Reason{ReasonFilteringOff, ReasonAllowlist, ReasonRPZ, ReasonBlocklist, ReasonPaused,
	ReasonSafeSearch, ReasonCategory, ReasonNetwork, ReasonDefault}

// A Friday, 12:00 in Amsterdam (CET, UTC+1).
var noon = time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC)

type want struct {
	verdict Verdict
	action  Action
	reason  Reason
	rule    string
}

func check(t *testing.T, d Decision, w want) {
	t.Helper()
	if d.Verdict != w.verdict || d.Action != w.action || d.Reason != w.reason || d.Rule() != w.rule {
		t.Errorf("got %s %s %s %q, want %s %s %s %q (trace %v)", d.Verdict, d.Action, d.Reason, d.Rule(),
			w.verdict, w.action, w.reason, w.rule, d.Trace)
	}
	if len(d.Trace) == 0 || d.Trace[len(d.Trace)-1].Step != d.Reason {
		t.Errorf("trace %v does not end with the reason %s", d.Trace, d.Reason)
	}
}

// stepCases is one worked example per step (docs/policy.md).
var stepCases = []struct {
	name   string
	doc    string
	in     Input
	want   want
	target string
}{
	{"1 filtering off", `{"filtering":false,"blocklist":["ads.example"]}`,
		Input{Domain: "ads.example"}, want{VerdictAllow, ActionAllow, ReasonFilteringOff, "filtering:false"}, ""},
	{"2 allowlist", `{"allowlist":["example.org"],"blocklist":["example.org"]}`,
		Input{Domain: "www.example.org"}, want{VerdictAllow, ActionAllow, ReasonAllowlist, "allowlist:example.org"}, ""},
	{"3 rpz not configured", `{}`,
		Input{Domain: "example.net"}, want{VerdictAllow, ActionAllow, ReasonDefault, ""}, ""},
	{"4 blocklist", `{"blocklist":["ads.example"]}`,
		Input{Domain: "x.ads.example"}, want{VerdictBlock, ActionNXDomain, ReasonBlocklist, "blocklist:ads.example"}, ""},
	{"5 paused", `{"paused":true}`,
		Input{Domain: "example.net"}, want{VerdictBlock, ActionNXDomain, ReasonPaused, "paused:settings"}, ""},
	{"6 safe search", `{"safe_search":true}`,
		Input{Domain: "www.google.de"}, want{VerdictRedirect, ActionCNAME, ReasonSafeSearch, "safe_search:google"}, GoogleSafe},
	{"7 category", `{"blocked_categories":[3]}`,
		Input{Domain: "www.bad.example"}, want{VerdictBlock, ActionNXDomain, ReasonCategory, "category:3 feed=threats key=bad.example"}, ""},
	{"8 network", `{"blocked_networks":["10.0.0.0/8"]}`,
		Input{Domain: "intranet.example", AnswerAddr: netip.MustParseAddr("10.1.2.3")}, want{VerdictBlock, ActionNXDomain, ReasonNetwork, "network:10.0.0.0/8"}, ""},
	{"9 default", `{"blocked_categories":[3],"blocklist":["ads.example"]}`,
		Input{Domain: "example.com"}, want{VerdictAllow, ActionAllow, ReasonDefault, ""}, ""},
}

func TestSteps(t *testing.T) {
	for _, c := range stepCases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Time = noon
			d := decide(c.in, compile(t, c.doc), testCats)
			check(t, d, c.want)
			if d.Target != c.target {
				t.Errorf("target %q, want %q", d.Target, c.target)
			}
		})
	}
}

func TestTrace(t *testing.T) {
	d := decide(Input{Domain: "example.com", Time: noon}, compile(t, `{}`), testCats)
	var steps []Reason
	for _, e := range d.Trace {
		steps = append(steps, e.Step)
	}
	if !slices.Equal(steps, evaluationOrder) {
		t.Fatalf("trace steps %v, want %v", steps, evaluationOrder)
	}
	if len(steps) != TraceCap {
		t.Errorf("%d steps, TraceCap %d", len(steps), TraceCap)
	}
	if d.Trace[2].Result != ResultNotConfigured {
		t.Errorf("rpz step %q, want %q", d.Trace[2].Result, ResultNotConfigured)
	}
	d = decide(Input{Domain: "x.ads.example"}, compile(t, `{"blocklist":["ads.example"]}`), nil)
	if len(d.Trace) != 4 || d.Trace[3] != (TraceEntry{ReasonBlocklist, ResultMatch}) {
		t.Errorf("trace %v", d.Trace)
	}
}

func TestOrder(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	cases := []struct {
		name string
		doc  string
		in   Input
		want Reason
	}{
		{"filtering off beats allowlist", `{"filtering":false,"allowlist":["ads.example"]}`, Input{Domain: "ads.example"}, ReasonFilteringOff},
		{"allowlist beats blocklist", `{"allowlist":["ads.example"],"blocklist":["ads.example"]}`, Input{Domain: "ads.example"}, ReasonAllowlist},
		{"allowlist beats paused", `{"allowlist":["ads.example"],"paused":true}`, Input{Domain: "ads.example"}, ReasonAllowlist},
		{"blocklist beats paused", `{"blocklist":["ads.example"],"paused":true}`, Input{Domain: "ads.example"}, ReasonBlocklist},
		{"paused beats safe search", `{"paused":true,"safe_search":true}`, Input{Domain: "www.google.com"}, ReasonPaused},
		{"safe search beats category", `{"safe_search":true,"blocked_categories":[3]}`, Input{Domain: "www.google.com"}, ReasonSafeSearch},
		{"category beats network", `{"blocked_categories":[3],"blocked_networks":["10.0.0.0/8"]}`, Input{Domain: "bad.example", AnswerAddr: a}, ReasonCategory},
		{"network beats default", `{"blocked_categories":[7],"blocked_networks":["10.0.0.0/8"]}`, Input{Domain: "bad.example", AnswerAddr: a}, ReasonNetwork},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Time = noon
			if d := decide(c.in, compile(t, c.doc), testCats); d.Reason != c.want {
				t.Errorf("reason %s, want %s (trace %v)", d.Reason, c.want, d.Trace)
			}
		})
	}
}

func TestListMatching(t *testing.T) {
	p := compile(t, `{"blocklist":["ads.example","b.c.example"]}`)
	for name, blocked := range map[string]bool{
		"ads.example":       true,
		"ads.example.":      true,
		"x.ads.example":     true,
		"a.b.x.ads.example": true,
		"badads.example":    false, // a label boundary, not a string suffix
		"example":           false,
		"c.example":         false,
		"b.c.example":       true,
		"x.b.c.example":     true,
		"ads.example.org":   false,
	} {
		if got := decide(Input{Domain: name}, p, nil).Reason == ReasonBlocklist; got != blocked {
			t.Errorf("%s: blocked %v, want %v", name, got, blocked)
		}
	}
	// The most specific listed name is the rule.
	p = compile(t, `{"allowlist":["example.org","www.example.org"]}`)
	if r := decide(Input{Domain: "a.www.example.org"}, p, nil).Rule(); r != "allowlist:www.example.org" {
		t.Errorf("rule %q", r)
	}
}

func TestSchedules(t *testing.T) {
	// Friday 22:00 to 06:00 (Saturday) in Amsterdam, paused; weekdays
	// 08:00–15:30 block games.
	p := compile(t, `{"schedules":[
		{"days":["fri"],"from":"22:00","to":"06:00","tz":"Europe/Amsterdam","paused":true},
		{"days":["mon","tue","wed","thu","fri"],"from":"08:00","to":"15:30","tz":"Europe/Amsterdam","blocked_categories":[7]}]}`)
	ams, err := time.LoadLocation("Europe/Amsterdam")
	if err != nil {
		t.Fatal(err) // time/tzdata is built into the test: this cannot fail quietly
	}
	at := func(day, h, m int) time.Time { return time.Date(2026, 11, day, h, m, 0, 0, ams) } // 27 is a Friday
	cases := []struct {
		t      time.Time
		domain string
		want   Reason
		rule   string
	}{
		{at(27, 23, 0), "example.com", ReasonPaused, "paused:schedules[0]"},
		{at(28, 5, 59), "example.com", ReasonPaused, "paused:schedules[0]"}, // Saturday morning, the window of Friday
		{at(28, 6, 0), "example.com", ReasonDefault, ""},
		{at(27, 21, 59), "example.com", ReasonDefault, ""},
		{at(26, 23, 0), "example.com", ReasonDefault, ""}, // Thursday
		{at(27, 5, 0), "example.com", ReasonDefault, ""},  // Friday morning: Thursday is not listed
		{at(27, 9, 0), "games.example", ReasonCategory, "category:7 feed=content key=games.example"},
		{at(27, 15, 30), "games.example", ReasonDefault, ""},
		{at(28, 9, 0), "games.example", ReasonDefault, ""}, // Saturday
		{time.Time{}, "games.example", ReasonDefault, ""},  // no clock: no window
	}
	for _, c := range cases {
		d := decide(Input{Domain: c.domain, Time: c.t}, p, testCats)
		if d.Reason != c.want || d.Rule() != c.rule {
			t.Errorf("%s %s: %s %q, want %s %q", c.t, c.domain, d.Reason, d.Rule(), c.want, c.rule)
		}
	}
}

func TestSafeSearch(t *testing.T) {
	p := compile(t, `{"safe_search":true}`)
	cases := map[string]string{
		"www.google.com":           GoogleSafe,
		"www.google.co.uk":         GoogleSafe,
		"www.google.com.br":        GoogleSafe,
		"www.google.cat":           GoogleSafe,
		"www.bing.com":             BingSafe,
		"duckduckgo.com":           DuckDuckGoSafe,
		"www.duckduckgo.com":       DuckDuckGoSafe,
		"start.duckduckgo.com":     DuckDuckGoSafe,
		"www.youtube.com":          YouTubeStrict,
		"m.youtube.com":            YouTubeStrict,
		"youtubei.googleapis.com":  YouTubeStrict,
		"youtube.googleapis.com":   YouTubeStrict,
		"www.youtube-nocookie.com": YouTubeStrict,
		"mail.google.com":          "",
		"google.com":               "",
		"bing.com":                 "",
		"x.www.google.com":         "",
	}
	for name, target := range cases {
		d := decide(Input{Domain: name}, p, nil)
		if target == "" {
			if d.Reason != ReasonDefault {
				t.Errorf("%s: %s, want default", name, d.Reason)
			}
			continue
		}
		if d.Verdict != VerdictRedirect || d.Action != ActionCNAME || d.Reason != ReasonSafeSearch || d.Target != target {
			t.Errorf("%s: %s %s %s %s, want redirect cname safe_search %s", name, d.Verdict, d.Action, d.Reason, d.Target, target)
		}
	}
	if len(GoogleDomains) < 180 || !slices.Contains(GoogleDomains, "google.com") {
		t.Errorf("GoogleDomains has %d domains", len(GoogleDomains))
	}
	// Moderate YouTube.
	e := settings.Merge(settings.Layer{Name: "global", Doc: &settings.Document{SafeSearch: new(true)}})
	d := decide(Input{Domain: "www.youtube.com"}, CompileWith(e, Options{YouTube: YouTubeModerate}), nil)
	if d.Target != YouTubeModerate {
		t.Errorf("moderate: %s", d.Target)
	}
	// Off: no rewrite.
	if d := decide(Input{Domain: "www.google.com"}, compile(t, `{}`), nil); d.Reason != ReasonDefault {
		t.Errorf("safe search off: %s", d.Reason)
	}
}

func TestActions(t *testing.T) {
	cases := []struct {
		action string
		want   Action
		target string
		a      int
		aaaa   int
	}{
		{`{"type":"nxdomain"}`, ActionNXDomain, "", 0, 0},
		{`{"type":"nodata"}`, ActionNoData, "", 0, 0},
		{`{"type":"refused"}`, ActionRefused, "", 0, 0},
		{`{"type":"drop"}`, ActionDrop, "", 0, 0},
		{`{"type":"redirect","a":["192.0.2.1"],"aaaa":["2001:db8::1"]}`, ActionRedirect, "", 1, 1},
		{`{"type":"cname","target":"blocked.example.net"}`, ActionCNAME, "blocked.example.net", 0, 0},
	}
	for _, c := range cases {
		p := compile(t, `{"blocklist":["ads.example"],"action":`+c.action+`}`)
		d := decide(Input{Domain: "ads.example"}, p, nil)
		if d.Verdict != VerdictBlock || d.Action != c.want || d.Target != c.target || len(d.A) != c.a || len(d.AAAA) != c.aaaa {
			t.Errorf("%s: %s %s %q %v %v", c.action, d.Verdict, d.Action, d.Target, d.A, d.AAAA)
		}
		// An allow is not answered with the action.
		if d := decide(Input{Domain: "example.com"}, p, nil); d.Action != ActionAllow || d.Target != "" || d.A != nil {
			t.Errorf("%s: allow answered %s %q %v", c.action, d.Action, d.Target, d.A)
		}
	}
	// The default action.
	if d := decide(Input{Domain: "ads.example"}, compile(t, `{"blocklist":["ads.example"]}`), nil); d.Action != ActionNXDomain {
		t.Errorf("default action %s", d.Action)
	}
}

func TestLayers(t *testing.T) {
	// The org blocks, the device's layer allows it again: most specific wins.
	p := compile(t, `{}`, `{"blocklist":["ads.example"]}`, `{}`, `{}`, `{}`, `{"filtering":false}`)
	if d := decide(Input{Domain: "ads.example"}, p, nil); d.Reason != ReasonFilteringOff {
		t.Errorf("reason %s", d.Reason)
	}
	if p.Effective().Origin["filtering"] != "deviceid:d" || p.Fingerprint() == "" {
		t.Errorf("origin %v fingerprint %q", p.Effective().Origin, p.Fingerprint())
	}
	// nil compiles the defaults.
	if d := decide(Input{Domain: "example.com"}, CompileWith(nil, Options{}), nil); d.Reason != ReasonDefault {
		t.Errorf("defaults: %s", d.Reason)
	}
}

func TestCategories(t *testing.T) {
	p := compile(t, `{"blocked_categories":[3]}`)
	// The blocked one of several categories is the rule; all are reported.
	d := decide(Input{Domain: "both.example"}, p, testCats)
	if d.Reason != ReasonCategory || d.Rule() != "category:3 feed=threats key=both.example" || len(d.Categories) != 2 {
		t.Errorf("%s %q %v", d.Reason, d.Rule(), d.Categories)
	}
	// Not blocked: reported, allowed.
	d = decide(Input{Domain: "games.example"}, p, testCats)
	if d.Reason != ReasonDefault || len(d.Categories) != 1 || d.Matched != -1 {
		t.Errorf("%s %v %d", d.Reason, d.Categories, d.Matched)
	}
	// LookupAlways reports categories when an earlier step decides.
	p = compile(t, `{"blocklist":["bad.example"]}`)
	if d := decide(Input{Domain: "bad.example"}, p, testCats); len(d.Categories) != 0 {
		t.Errorf("looked up without LookupAlways: %v", d.Categories)
	}
	if d := decide(Input{Domain: "bad.example", LookupAlways: true}, p, testCats); len(d.Categories) != 1 || d.Reason != ReasonBlocklist {
		t.Errorf("LookupAlways: %s %v", d.Reason, d.Categories)
	}
}

func TestNetworks(t *testing.T) {
	p := compile(t, `{"blocked_networks":["10.0.0.0/8","2001:db8::/32","192.0.2.7"]}`)
	for addr, rule := range map[string]string{
		"10.9.9.9":        "network:10.0.0.0/8",
		"::ffff:10.9.9.9": "network:10.0.0.0/8",
		"2001:db8::5":     "network:2001:db8::/32",
		"192.0.2.7":       "network:192.0.2.7/32",
		"192.0.2.8":       "",
		"11.0.0.1":        "",
		"2001:db9::1":     "",
	} {
		d := decide(Input{Domain: "example.com", AnswerAddr: netip.MustParseAddr(addr)}, p, nil)
		if d.Rule() != rule {
			t.Errorf("%s: rule %q, want %q", addr, d.Rule(), rule)
		}
	}
	if d := decide(Input{Domain: "example.com"}, p, nil); d.Trace[len(d.Trace)-2].Result != ResultNoAnswer {
		t.Errorf("no answer address: %v", d.Trace)
	}
}

type fakeRPZ struct{}

func (fakeRPZ) Check(in *Input, d *Decision) bool {
	if in.Domain != "rpz.example" {
		return false
	}
	d.Verdict, d.Action = VerdictBlock, ActionTruncate
	d.SetRule("rpz:zone=ops qname=rpz.example")
	return true
}

func TestRPZ(t *testing.T) {
	p := compile(t, `{"blocklist":["rpz.example"]}`)
	d := decide(Input{Domain: "rpz.example", RPZ: fakeRPZ{}}, p, nil)
	check(t, d, want{VerdictBlock, ActionTruncate, ReasonRPZ, "rpz:zone=ops qname=rpz.example"})
	d = decide(Input{Domain: "other.example", RPZ: fakeRPZ{}}, p, nil)
	if d.Trace[2] != (TraceEntry{ReasonRPZ, ResultNoMatch}) || d.Reason != ReasonDefault {
		t.Errorf("trace %v reason %v", d.Trace, d.Reason)
	}

	// Over TCP a tcp-only rule does not apply: the later steps decide (here
	// the blocklist), as PowerDNS resolves such a query normally.
	d = decide(Input{Domain: "rpz.example", RPZ: fakeRPZ{}, Transport: TransportTCP}, p, nil)
	check(t, d, want{VerdictBlock, ActionNXDomain, ReasonBlocklist, "blocklist:rpz.example"})
	if d.Trace[2] != (TraceEntry{ReasonRPZ, ResultTCPOnly}) {
		t.Errorf("trace %v", d.Trace)
	}
}

func TestDecideIntoAllocs(t *testing.T) {
	p := compile(t, `{"blocked_categories":[3],"blocklist":["ads.example"],"allowlist":["good.example"],
		"blocked_networks":["10.0.0.0/8"],"safe_search":true,
		"schedules":[{"days":["fri"],"from":"22:00","to":"06:00","tz":"Europe/Amsterdam","paused":true}]}`)
	d := &Decision{Trace: make([]TraceEntry, 0, TraceCap), Categories: make([]feed.Category, 0, 8)}
	for _, in := range []Input{
		{Domain: "www.bad.example", Time: noon},
		{Domain: "x.ads.example", Time: noon},
		{Domain: "www.google.fr", Time: noon},
		{Domain: "example.com", Time: noon, AnswerAddr: netip.MustParseAddr("10.0.0.1")},
	} {
		if n := testing.AllocsPerRun(200, func() { DecideInto(d, &in, p, testCats) }); n != 0 {
			t.Errorf("%s: %v allocations per decision", in.Domain, n)
		}
	}
}

func TestCache(t *testing.T) {
	c := NewCache(128)
	d1, d2 := &settings.Document{}, &settings.Document{}
	p1, p2 := CompileWith(nil, Options{}), CompileWith(nil, Options{})
	k1 := Key{d1}
	c.Put(&k1, p1)
	if p, ok := c.Get(&k1); !ok || p != p1 {
		t.Fatal("miss")
	}
	k2 := Key{d1, d2}
	if _, ok := c.Get(&k2); ok {
		t.Fatal("hit with other documents")
	}
	c.Put(&k1, p2)
	if p, ok := c.Get(&k1); !ok || p != p2 || c.Len() != 1 {
		t.Fatal("replace")
	}
	for range 10_000 {
		k := Key{&settings.Document{}}
		c.Put(&k, p1)
	}
	if n := c.Len(); n > 128+cacheShards {
		t.Errorf("cache holds %d, bound 128", n)
	}
	if n := testing.AllocsPerRun(100, func() { c.Get(&k2) }); n != 0 {
		t.Errorf("Get allocates %v", n)
	}
}

// The node's feed Set is what the resolver and the simulator pass as
// Categories.
var _ Categories = (*feeds.Set)(nil)

// TestChain: the answer's CNAME chain is decided name by name after the
// query name's steps 1–7 and before step 8; the first name that does not
// allow decides, its rule naming it, the trace marking where each name's
// steps start; an allowlisted (or unfiltered) query name lets the whole
// chain through; an allowlisted chain name covers itself only.
func TestChain(t *testing.T) {
	p := compile(t, `{"blocked_categories":[3],"blocklist":["tracker.example"],"allowlist":["trusted.example","cdn.example"],
		"blocked_networks":["10.0.0.0/8"]}`)
	addr := netip.MustParseAddr("10.1.2.3")
	cases := []struct {
		name  string
		in    Input
		want  want
		via   string
		cname int // StepCNAME entries in the trace
	}{
		{"a blocked category behind a CNAME", Input{Domain: "x.example", Chain: []string{"download.bad.example."}},
			want{VerdictBlock, ActionNXDomain, ReasonCategory, "category:3 feed=threats key=bad.example via CNAME download.bad.example"},
			"download.bad.example", 1},
		{"the second name of the chain", Input{Domain: "x.example", Chain: []string{"a.example", "y.tracker.example"}},
			want{VerdictBlock, ActionNXDomain, ReasonBlocklist, "blocklist:tracker.example via CNAME y.tracker.example"},
			"y.tracker.example", 2},
		{"the chain before the answer address", Input{Domain: "x.example", Chain: []string{"bad.example"}, AnswerAddr: addr},
			want{VerdictBlock, ActionNXDomain, ReasonCategory, "category:3 feed=threats key=bad.example via CNAME bad.example"},
			"bad.example", 1},
		{"an allowed chain, then the address", Input{Domain: "x.example", Chain: []string{"a.example", "b.example"}, AnswerAddr: addr},
			want{VerdictBlock, ActionNXDomain, ReasonNetwork, "network:10.0.0.0/8"}, "", 2},
		{"an allowed chain", Input{Domain: "x.example", Chain: []string{"a.example"}},
			want{VerdictAllow, ActionAllow, ReasonDefault, ""}, "", 1},
		{"an allowlisted query name wins", Input{Domain: "www.trusted.example", Chain: []string{"bad.example"}, AnswerAddr: addr},
			want{VerdictAllow, ActionAllow, ReasonAllowlist, "allowlist:trusted.example"}, "", 0},
		{"an allowlisted chain name covers itself only", Input{Domain: "x.example", Chain: []string{"cdn.example", "bad.example"}},
			want{VerdictBlock, ActionNXDomain, ReasonCategory, "category:3 feed=threats key=bad.example via CNAME bad.example"},
			"bad.example", 2},
		{"the query name decides first", Input{Domain: "tracker.example", Chain: []string{"bad.example"}},
			want{VerdictBlock, ActionNXDomain, ReasonBlocklist, "blocklist:tracker.example"}, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			d := decide(in, p, testCats)
			check(t, d, tc.want)
			if d.Via != tc.via {
				t.Errorf("Via %q, want %q", d.Via, tc.via)
			}
			n := 0
			for _, e := range d.Trace {
				if e.Step == StepCNAME {
					n++
				}
			}
			if n != tc.cname {
				t.Errorf("%d cname steps, want %d: %v", n, tc.cname, d.Trace)
			}
			if tc.via != "" {
				if i := slices.Index(d.Trace, TraceEntry{StepCNAME, tc.via}); i < 0 || d.Trace[i+1].Step != ReasonFilteringOff {
					t.Errorf("the steps of %s do not start after its cname entry: %v", tc.via, d.Trace)
				}
			}
			if code, ok := d.EDE(p); tc.want.verdict == VerdictBlock && (!ok || code != EDEBlocked) {
				t.Errorf("EDE %d %v, want %d", code, ok, EDEBlocked)
			}
		})
	}

	// Filtering off: nothing of the chain is looked at.
	off := compile(t, `{"filtering":false,"blocked_categories":[3]}`)
	check(t, decide(Input{Domain: "x.example", Chain: []string{"bad.example"}}, off, testCats),
		want{VerdictAllow, ActionAllow, ReasonFilteringOff, "filtering:false"})

	// The RPZ sees each chain name, and the caller's Input is left as given.
	in := Input{Domain: "x.example", Path: "/p", Chain: []string{"rpz.example"}, RPZ: fakeRPZ{}}
	d := decide(in, p, testCats)
	check(t, d, want{VerdictBlock, ActionTruncate, ReasonRPZ, "rpz:zone=ops qname=rpz.example via CNAME rpz.example"})
	var dd Decision
	DecideInto(&dd, &in, p, testCats)
	if in.Domain != "x.example" || in.Path != "/p" {
		t.Errorf("Input changed: %q %q", in.Domain, in.Path)
	}

	// The category of the chain name that decided follows the query
	// name's; an allowed chain name's are dropped.
	d = decide(Input{Domain: "games.example", Chain: []string{"cdn.example", "download.bad.example"}, LookupAlways: true}, p, testCats)
	if len(d.Categories) != 2 || d.Categories[0].Code != 7 || d.Matched != 1 || d.Categories[1].Code != 3 {
		t.Errorf("categories %v, matched %d", d.Categories, d.Matched)
	}
}

// TestChainAllocs: deciding a chain in a reused Decision with room for
// its trace allocates nothing either.
func TestChainAllocs(t *testing.T) {
	p := compile(t, `{"blocked_categories":[3],"blocklist":["ads.example"]}`)
	d := &Decision{Trace: make([]TraceEntry, 0, 4*TraceCap), Categories: make([]feed.Category, 0, 8)}
	in := Input{Domain: "x.example", Chain: []string{"a.example", "b.example", "download.bad.example"}, RPZ: fakeRPZ{}}
	if n := testing.AllocsPerRun(200, func() { DecideInto(d, &in, p, testCats) }); n != 0 {
		t.Errorf("%v allocations per decision", n)
	}
}
