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

func TestValidBucket(t *testing.T) {
	for _, name := range []string{"sessions", "sessions-eu_2", "A", strings.Repeat("b", 64)} {
		if err := ValidBucket(name); err != nil {
			t.Errorf("ValidBucket(%q) = %v, want nil", name, err)
		}
	}
	for name, want := range map[string]string{
		"":                      "empty",
		"a.b":                   `character '.'`,
		"a*":                    `character '*'`,
		">":                     `character '>'`,
		"a b":                   `character ' '`,
		"sessions\n":            `character '\n'`,
		"séssions":              "not allowed",
		strings.Repeat("b", 65): "longer than 64",
	} {
		err := ValidBucket(name)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidBucket(%q) = %v, want an error containing %q", name, err, want)
		}
	}
	if got := Subject("eu", CmdSetSession); got != "ipmapper.eu.set-session" {
		t.Errorf("Subject = %q", got)
	}
	if SubjectGetSessions != Subject("sessions", CmdGetSessions) {
		t.Errorf("SubjectGetSessions = %q, not the default bucket's subject", SubjectGetSessions)
	}
}

// FuzzValidBucket: a name ValidBucket accepts is one subject token (no
// '.', wildcard or space) and a valid UTF-8 string of at most 64 bytes; the
// error text of a refused one is valid UTF-8 too (it reaches logs and
// config errors).
func FuzzValidBucket(f *testing.F) {
	for _, s := range []string{"sessions", "a.b", "", ">", "s\xff", strings.Repeat("x", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidBucket(name)
		if err != nil {
			if !utf8.ValidString(err.Error()) && utf8.ValidString(name) {
				t.Fatalf("error text not UTF-8: %q", err)
			}
			return
		}
		if len(name) == 0 || len(name) > 64 || strings.ContainsAny(name, ".*> \t\r\n") || !utf8.ValidString(name) {
			t.Fatalf("ValidBucket accepted %q", name)
		}
		if subj := Subject(name, CmdSetSession); strings.Count(subj, ".") != 2 {
			t.Fatalf("subject %q has more than three tokens", subj)
		}
	})
}
