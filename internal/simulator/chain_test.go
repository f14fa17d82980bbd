package simulator

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/policy"
)

func TestParseChain(t *testing.T) {
	q, _ := url.ParseQuery("domain=x.example&cname=Download.BAD.example.,b%C3%BCcher.example")
	r, err := ParseSimulate(q)
	if err != nil || !slices.Equal(r.Chain, []string{"download.bad.example", "xn--bcher-kva.example"}) {
		t.Fatalf("%v, %v", r, err)
	}
	back, err := FromTable(r.Table())
	if err != nil || !slices.Equal(back.Chain, r.Chain) {
		t.Fatalf("table round trip: %v, %v", back, err)
	}
	for _, tc := range []struct{ query, want string }{
		{"domain=x.example&cname=a..b", "cname name 1"},
		{"domain=x.example&cname=a.example,,b.example", "cname name 2"},
		{"domain=x.example&cname=a.example,10.0.0.1", "cname name 2"},
		{"domain=x.example&cname=a.example&cname=b.example", "once"},
		{"domain=x.example&cname=" + strings.Repeat("a.example,", policy.MaxChain) + "a.example", "at most"},
	} {
		q, _ := url.ParseQuery(tc.query)
		_, err := ParseSimulate(q)
		var br *BadRequest
		if !errors.As(err, &br) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.80s: error %v, want a BadRequest naming %q", tc.query, err, tc.want)
		}
	}
}

// FuzzParseChain: any cname value gives a chain or a BadRequest, never a
// panic; an accepted chain holds at most policy.MaxChain names, each in its
// normal form, and reads back from the script's table unchanged.
func FuzzParseChain(f *testing.F) {
	for _, s := range []string{"a.example", "A.example.,b.example", "", ",", "b%C3%BCcher.example", "10.0.0.1",
		strings.Repeat("a,", policy.MaxChain+1), "a..b,c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r, err := ParseSimulate(url.Values{"domain": {"x.example"}, "cname": {v}})
		if err != nil {
			var br *BadRequest
			if !errors.As(err, &br) {
				t.Fatalf("%q: %v is not a BadRequest", v, err)
			}
			return
		}
		if len(r.Chain) > policy.MaxChain {
			t.Fatalf("%q: %d names", v, len(r.Chain))
		}
		for _, n := range r.Chain {
			if norm, err := feed.NormalizeName(n); err != nil || norm != n {
				t.Fatalf("%q: name %q is not in normal form (%q, %v)", v, n, norm, err)
			}
		}
		back, err := FromTable(r.Table())
		if err != nil || !slices.Equal(back.Chain, r.Chain) {
			t.Fatalf("%q: table gives %v, %v; want %v", v, back, err, r.Chain)
		}
	})
}

// TestSimulateChain: with the answer's CNAME chain given (cname), the
// simulator decides each of its names as the resolver does
// (policy.Input.Chain): a blocked name behind an allowed one blocks the
// query, the rule and the EDE text name it, and the trace shows where each
// chain name's steps start.
func TestSimulateChain(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	code, m := f.get("/api/v1/simulate?domain=x.example&ip=10.0.0.2&cname=cdn.example,download.bad.example")
	const rule = "category:3 feed=test key=bad.example via CNAME download.bad.example"
	if code != 200 || m["verdict"] != "block" || m["action"] != "nxdomain" || m["reason"] != "category" || m["rule"] != rule {
		t.Fatalf("%d %v", code, m)
	}
	ans := m["answer"].(map[string]any)
	if ede := ans["ede"].(map[string]any); ans["rcode"] != "NXDOMAIN" || ede["code"] != 17.0 || ede["text"] != "category: "+rule {
		t.Fatalf("answer %v", ans)
	}
	var steps []string
	for _, e := range m["trace"].([]any) {
		e := e.(map[string]any)
		steps = append(steps, e["step"].(string)+": "+e["result"].(string))
	}
	want := []string{"cname: cdn.example", "filtering_off: filtering on", "allowlist: no match", "rpz: not configured",
		"blocklist: no match", "paused: not paused", "safe_search: safe search off", "category: no category",
		"cname: download.bad.example", "filtering_off: filtering on", "allowlist: no match", "rpz: not configured",
		"blocklist: no match", "paused: not paused", "safe_search: safe search off", "category: category blocked"}
	if i := slices.Index(steps, "cname: cdn.example"); i < 0 || !slices.Equal(steps[i:], want) {
		t.Fatalf("trace %q", steps)
	}
	if steps[len(steps)-len(want)-1] != "category: no category" {
		t.Fatalf("the query name's own steps do not come first: %q", steps)
	}

	// The same chain for a subscriber who does not block the category: the
	// forwarder's answer, after every name's steps and step 8.
	code, m = f.get("/api/v1/simulate?domain=x.example&ip=10.9.9.9&cname=download.bad.example")
	if code != 200 || m["verdict"] != "allow" || m["reason"] != "default" || m["answer"].(map[string]any)["forwarded"] != true {
		t.Fatalf("%d %v", code, m)
	}
	// An allowlisted query name lets its chain through.
	code, m = f.get("/api/v1/simulate?domain=x.example&ip=10.0.0.2&cname=download.bad.example&settings=" +
		url.QueryEscape(`{"allowlist":["x.example"]}`))
	if code != 200 || m["verdict"] != "allow" || m["reason"] != "allowlist" {
		t.Fatalf("%d %v", code, m)
	}
	if code, m := f.get("/api/v1/simulate?domain=x.example&cname=a..b"); code != 400 || m["error"] == nil {
		t.Fatalf("bad cname: %d %v", code, m)
	}
}
