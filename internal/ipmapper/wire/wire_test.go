package wire

import (
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanMode(t *testing.T) {
	p := netip.MustParsePrefix
	for _, c := range []struct {
		name string
		req  CleanSessionsRequest
		mode CleanMode
		err  string
	}{
		{"all", CleanSessionsRequest{Org: "a", All: true}, CleanByOrg, ""},
		{"revision", CleanSessionsRequest{Org: "a", RevisionBelow: 3}, CleanByRevision, ""},
		{"subnets", CleanSessionsRequest{Org: "a", Subnets: []netip.Prefix{p("10.1.2.3/16")}}, CleanBySubnets, ""},
		{"ids without org", CleanSessionsRequest{IDs: []string{"k1", "k2"}}, CleanByIDs, ""},
		{"ids with org", CleanSessionsRequest{Org: "a", IDs: []string{"k1"}}, CleanByIDs, ""},
		{"nothing", CleanSessionsRequest{Org: "a"}, 0, "needs one of"},
		{"org alone never means all", CleanSessionsRequest{Org: "a", All: false}, 0, "needs one of"},
		{"two selectors", CleanSessionsRequest{Org: "a", All: true, RevisionBelow: 2}, 0, "only one of"},
		{"all without org", CleanSessionsRequest{All: true}, 0, "org is required"},
		{"negative revision", CleanSessionsRequest{Org: "a", RevisionBelow: -1}, 0, "positive"},
		{"empty ids", CleanSessionsRequest{IDs: []string{}}, 0, "ids is empty"},
		{"empty subnets", CleanSessionsRequest{Org: "a", Subnets: []netip.Prefix{}}, 0, "subnets is empty"},
		{"bad id", CleanSessionsRequest{IDs: []string{"a.b"}}, 0, "invalid session id"},
		{"mapped subnet", CleanSessionsRequest{Org: "a", Subnets: []netip.Prefix{p("::ffff:10.0.0.0/104")}}, 0, "IPv4-mapped"},
		{"invalid subnet", CleanSessionsRequest{Org: "a", Subnets: []netip.Prefix{{}}}, 0, "not a valid prefix"},
	} {
		mode, err := c.req.Mode()
		switch {
		case c.err == "" && (err != nil || mode != c.mode):
			t.Errorf("%s: %v, %v; want mode %v", c.name, mode, err, c.mode)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, %v; want an error with %q", c.name, mode, err, c.err)
		}
	}
	r := CleanSessionsRequest{Org: "a", Subnets: []netip.Prefix{p("10.1.2.3/16")}}
	if _, err := r.Mode(); err != nil || r.Subnets[0] != p("10.1.0.0/16") {
		t.Errorf("subnets are masked in place: %v, %v", r.Subnets, err)
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := Truncate(long, 51)
	if !utf8.ValidString(got) || len(got) > 51+len("…") {
		t.Errorf("Truncate = %q (%d bytes)", got, len(got))
	}
	if Truncate("short", 10) != "short" {
		t.Error("a short string changed")
	}
}
