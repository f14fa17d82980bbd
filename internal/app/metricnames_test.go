package app

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.yaml.in/yaml/v3"
	"layeh.com/radius/rfc2866"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/radius"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

const (
	dashboardFile = "../../packaging/grafana/svc-pf.json"
	rulesFile     = "../../packaging/prometheus/svc-pf-rules.yaml"
)

// notExportedButReferenced are the names the dashboard and the alert rules
// may use although `svc-pf all` does not export them, each with why.
var notExportedButReferenced = map[string]string{
	// Prometheus records up for every scrape target itself.
	"up": "Prometheus' own",
}

// pendingNames are names referenced ahead of the code that exports them,
// landing on another branch. The test fails once one is exported, so that
// the entry is removed rather than left to hide a rename later.
var pendingNames = map[string]string{}

// exportedPrefixes are the only prefixes an exported metric may have:
// svcpf_ for what svc-pf names itself; PowerDNS Recursor's names for the
// node's PowerDNS-compatible statistics and the simulator's names as its
// specification gives them, kept so that tools written for them read them
// as they are; client_golang's Go and process collectors.
var exportedPrefixes = []string{"svcpf_", "pdns_recursor_", "svc_pf_simulator_", "svc_platform_", "go_", "process_"}

// TestDashboardAndRulesNameExportedMetrics starts `svc-pf all` on
// kernel-chosen ports with a feed, an RPZ zone, an organisation deployed
// and DNS queries answered (so that series created on first use exist),
// scrapes every listener's /metrics, and checks (1) that every metric
// the Grafana dashboard's queries and the Prometheus alert rules name is
// one of them, and (2) that every exported name has one of the allowed
// prefixes.
func TestDashboardAndRulesNameExportedMetrics(t *testing.T) {
	zone := filepath.Join(t.TempDir(), "operator.rpz")
	if err := os.WriteFile(zone, []byte("$TTL 60\n@ SOA ns.operator.rpz. h.operator.rpz. 1 3600 600 86400 60\nnx.rpz.test CNAME .\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: badwareFeed(t), PollInterval: 100 * time.Millisecond}}
	cfg.RPZ = []rpz.ZoneConfig{{Name: "operator", File: zone}}
	cfg.Resolver.Forwarders = []string{startUpstream(t)}
	// feed_sources: its svcpf_feed_source_* series exist from the start.
	list := filepath.Join(t.TempDir(), "list.txt")
	if err := os.WriteFile(list, []byte("a.threat.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.FeedSources = []feedbuild.FeedSourceConfig{{Name: "own", Dir: filepath.Join(t.TempDir(), "own"), Interval: time.Hour,
		Sources: []string{"domains:3:" + list}}}
	cfg.Radius = radius.Config{Listen: []string{"127.0.0.1:0"},
		Clients: []radius.ClientConfig{{Network: "127.0.0.1", Secret: e2eRadiusSecret, Org: "acme"}}}
	all := startAll(t, cfg)
	listeners := map[string]string{
		"orgmanager": "http://" + all.OrgManager.Addr().String(),
		"ipmapper":   "http://" + all.IPMapper.Addr().String(),
		"node":       "http://" + all.Node.Addr().String(),
		"simulator":  "http://" + all.Simulator.Addr().String(),
	}
	pkgWaitHealthy(t, listeners["node"]+"/health")

	// Traffic: a deploy (IP Mapper requests, deploy histograms), queries
	// answered by the forwarder, from the cache, and by the RPZ zone, and a
	// simulation (the Lua workers).
	org := listeners["orgmanager"]
	pkgRequest(t, "PUT", org+"/org/acme", "", 200)
	pkgRequest(t, "PATCH", org+"/org/acme/prefixes", `{"add":["127.0.0.0/8"]}`, 200)
	dnsAddr := all.Resolver.DNS.UDPAddrs()[0].String()
	for _, name := range []string{"example.com", "example.com", "nx.rpz.test"} {
		if r := dnsFrom(t, "127.0.0.2", dnsAddr, name, dns.TypeA, dns.ClassINET); r == nil {
			t.Fatalf("no answer to %s", name)
		}
	}
	pkgRequest(t, "GET", listeners["simulator"]+"/api/v1/simulate?domain=example.com&ip=127.0.0.2", "", 200)
	waitDeployed(t, all, "acme")
	// RADIUS: a Start stored and answered, and a datagram dropped.
	radiusExchange(t, all.Radius.Server.Addrs()[0], rfc2866.AcctStatusType_Value_Start, "m-1", "metrics", "127.0.0.3")
	if c, err := net.Dial("udp", all.Radius.Server.Addrs()[0].String()); err != nil {
		t.Fatal(err)
	} else {
		_, _ = c.Write([]byte("not radius"))
		c.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(pkgGet(t, listeners["node"]+"/metrics"), "svcpf_radius_dropped_total"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the dropped datagram was never counted")
		}
	}

	series := map[string]bool{}   // every series name, histograms' _bucket, _sum, _count included
	families := map[string]bool{} // every metric family (# TYPE)
	for name, base := range listeners {
		for _, line := range strings.Split(pkgGet(t, base+"/metrics"), "\n") {
			switch {
			case strings.HasPrefix(line, "# TYPE "):
				families[strings.Fields(line)[2]] = true
			case line == "" || line[0] == '#':
			default:
				series[line[:strings.IndexAny(line, "{ ")]] = true
			}
		}
		if len(series) == 0 {
			t.Fatalf("%s's /metrics exports nothing", name)
		}
	}

	refs := map[string][]string{} // metric → where it is used
	for where, expr := range dashboardExprs(t) {
		for _, m := range promqlMetrics(expr) {
			refs[m] = append(refs[m], where)
		}
	}
	for where, expr := range ruleExprs(t) {
		for _, m := range promqlMetrics(expr) {
			refs[m] = append(refs[m], where)
		}
	}
	if len(refs) < 20 {
		t.Fatalf("only %d metric names found in the dashboard and the rules: the parser misses them (%v)", len(refs), refs)
	}
	names := make([]string, 0, len(refs))
	for m := range refs {
		names = append(names, m)
	}
	slices.Sort(names)
	for _, m := range names {
		_, other := notExportedButReferenced[m]
		_, pending := pendingNames[m]
		switch {
		case series[m] && pending:
			t.Errorf("%s is exported now: remove it from pendingNames", m)
		case series[m], other, pending:
		default:
			slices.Sort(refs[m])
			t.Errorf("%s is not exported by svc-pf all, but %s use it", m, strings.Join(slices.Compact(refs[m]), ", "))
		}
	}

	for f := range families {
		if !slices.ContainsFunc(exportedPrefixes, func(p string) bool { return strings.HasPrefix(f, p) }) {
			t.Errorf("exported metric %s has none of the allowed prefixes %v: svc-pf's own metrics start with svcpf_", f, exportedPrefixes)
		}
	}
}

// dashboardExprs are the PromQL expressions of the dashboard: every
// target's expr, and the metric of each templating label_values(…) query,
// by where they are.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("dashboard panel %q target %d has no expr", p.Title, i)
			}
			out["dashboard panel "+pkgQuote(p.Title)+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	labelValues := regexp.MustCompile(`label_values\(\s*([^,]+),`)
	for _, v := range d.Templating.List {
		if m := labelValues.FindSubmatch(v.Query); m != nil {
			out["dashboard variable "+v.Name] = string(m[1])
		}
	}
	return out
}

// ruleExprs are the alert rules' expressions by alert name.
func ruleExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	return out
}

func pkgQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// promqlKeywords are the identifiers of PromQL that are not metric names
// where they stand: operators, modifiers, aggregations.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "atan2": true,
	// Aggregations, which may stand before their by (…) or without (…).
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true}

// promqlMetrics are the metric names a PromQL expression selects: the
// identifiers that are neither a function or aggregation (followed by
// "("), nor a keyword, nor inside a label matcher {…}, a range […], a
// string, a grouping list (by (…), on (…), …), nor a Grafana variable ($x).
// Duplicates are kept once.
func promqlMetrics(expr string) []string {
	var out []string
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, close byte) int { // the index after the matching close, strings honoured
		for i < len(expr) && expr[i] != close {
			if expr[i] == '"' || expr[i] == '\'' || expr[i] == '`' {
				q := expr[i]
				for i++; i < len(expr) && expr[i] != q; i++ {
					if expr[i] == '\\' {
						i++
					}
				}
			}
			i++
		}
		return i + 1
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '{':
			i = skipTo(i+1, '}')
		case c == '[':
			i = skipTo(i+1, ']')
		case c == '"' || c == '\'' || c == '`':
			i = skipTo(i+1, c)
		case c == '$':
			for i++; i < len(expr) && isIdent(expr[i]); i++ {
			}
		case c >= '0' && c <= '9' || c == '.':
			// A number (1e3, 0x1f, 5m in an offset): not a name.
			for i++; i < len(expr) && (isIdent(expr[i]) || expr[i] == '.'); i++ {
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			followedByParen := k < len(expr) && expr[k] == '('
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" ||
				word == "group_left" || word == "group_right":
				if followedByParen {
					j = skipTo(k+1, ')') // a list of labels
				}
			case followedByParen, promqlKeywords[strings.ToLower(word)]:
			default:
				if !slices.Contains(out, word) {
					out = append(out, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return out
}

// TestPromQLMetrics checks the name extraction the test above relies on.
func TestPromQLMetrics(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`up{job=~"svc-pf.*"} == 0`, []string{"up"}},
		{`sum by (job, instance) (increase(a_total{route="/health", code="503"}[5m])) > 0 unless sum by (job) (b_total) > 0`, []string{"a_total", "b_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[$__rate_interval])))`, []string{"x_seconds_bucket"}},
		{`time() - feed_ts{instance=~"$instance"} > 900 and feed_ts > 0`, []string{"feed_ts"}},
		{`(rate(a[5m]) + rate(b [5m])) / on (instance) group_left (feed) rate(c[5m]) > 0.9`, []string{"a", "b", "c"}},
		{`sum without (instance) (m) offset 5m`, []string{"m"}},
		{`count(x{l="by (y)"}) by (z)`, []string{"x"}},
		{`1e3 * y`, []string{"y"}},
	} {
		if got := promqlMetrics(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("promqlMetrics(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

// FuzzPromQLMetrics: the extraction never panics or hangs on any input,
// and what it returns are identifiers found in the input.
func FuzzPromQLMetrics(f *testing.F) {
	for _, s := range []string{`up == 0`, `sum by (a) (rate(x{y="}"}[5m]))`, `{`, `"`, `by (`, `$x`, `a[`, "x\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		for _, m := range promqlMetrics(expr) {
			if m == "" || !strings.Contains(expr, m) {
				t.Fatalf("promqlMetrics(%q) returned %q", expr, m)
			}
		}
	})
}

// pkgWaitHealthy polls url until it answers 200 (at most 30 s).
func pkgWaitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %s after 30 s", url, resp.StatusCode, body)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: %v after 30 s", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pkgRequest sends a request with the test's admin token and checks its
// status.
func pkgRequest(t *testing.T, method, url, body string, want int) string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	return string(b)
}

func pkgGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		sb.WriteString(sc.Text())
		sb.WriteByte('\n')
	}
	if resp.StatusCode != 200 || sc.Err() != nil {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, sc.Err())
	}
	return sb.String()
}
