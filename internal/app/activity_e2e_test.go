package app

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestAllActivityEndToEnd: under `svc-pf all`, on its defaults, a query
// the policy blocks for a subscriber travels the whole activity path — the
// resolver's observer, the node's recorder and publisher, the ACTIVITY
// stream, the in-process collector, the day files under the data
// directory — and comes back out of the orgmanager's reports with the
// subscriber, the reason and the rule; the summary counts it; the node's
// decisions counter counted it and the plain allows,
// and the node listener shows the recorder's and the collector's metrics.
func TestAllActivityEndToEnd(t *testing.T) {
	cfg := testAllConfig(t)
	cfg.Resolver.Forwarders = []string{startUpstream(t)}
	all := startAll(t, cfg)
	p := &platform{t: t, base: "http://" + all.OrgManager.Addr().String()}
	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"127.0.5.0/24"}}, 200)
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "127.0.5.2/32", "username": "alice"}, 200)
	p.call("PUT", "/org/acme/settings", map[string]any{"blocklist": []string{"bad.example"}}, 200)
	p.waitSettled("acme")

	server := all.Resolver.DNS.UDPAddrs()[0].String()
	p.eventually("alice's blocklist applies on the node", func() bool {
		r := dnsFrom(t, "127.0.5.2", server, "bad.example", dns.TypeA, dns.ClassINET)
		return r != nil && r.Rcode == dns.RcodeNameError
	}, func() string { return "bad.example is not NXDOMAIN for 127.0.5.2" })
	for range 3 {
		if r := dnsFrom(t, "127.0.5.2", server, "www.ok.example", dns.TypeA, dns.ClassINET); r == nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("www.ok.example for alice: %v", r)
		}
	}

	admin := "Bearer " + testAdminToken
	report := func(path string) (int, string) { return get(t, p.base+path, admin) }
	type event struct {
		Username, QName, QType, Verdict, Action, Reason, Rule, Client, Transport, Policy string
	}
	var page struct{ Events []event }
	p.eventually("the block in the reports", func() bool {
		code, body := report("/org/acme/activity?verdict=block&username=alice")
		page.Events = nil
		return code == 200 && json.Unmarshal([]byte(body), &page) == nil && len(page.Events) > 0
	}, func() string { _, body := report("/org/acme/activity?verdict=block"); return body })
	e := page.Events[0]
	if e.QName != "bad.example." || e.QType != "A" || e.Verdict != "block" || e.Action != "nxdomain" || e.Reason != "blocklist" ||
		!strings.Contains(e.Rule, "bad.example") || e.Client != "127.0.5.2" || e.Transport != "udp" || len(e.Policy) != 16 {
		t.Fatalf("the reported block: %+v", e)
	}

	// The plain allows arrive as counts when their interval (1m by
	// default) ends, so the summary is checked for the block, which is
	// an event; the counts' path is the node's and the store's tests'.
	var sum struct {
		Total, Blocked int64
		Rows           []struct{ Key string }
	}
	p.eventually("the block in the summary", func() bool {
		code, body := report("/org/acme/activity/summary?by=reason")
		return code == 200 && json.Unmarshal([]byte(body), &sum) == nil && sum.Blocked >= 1 && len(sum.Rows) > 0 && sum.Rows[0].Key == "blocklist"
	}, func() string { _, body := report("/org/acme/activity/summary?by=reason"); return body })

	_, metrics := get(t, "http://"+all.Node.Addr().String()+"/metrics", "")
	for _, want := range []string{`svcpf_resolver_decisions_total{reason="blocklist",verdict="block"}`,
		`svcpf_resolver_decisions_total{reason="default",verdict="allow"}`, "svcpf_activity_events_published_total",
		"svcpf_activity_stored_events_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the node's /metrics has no %s", want)
		}
	}
}
