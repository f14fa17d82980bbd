package rpz

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// head is the start of a test zone: apex rpz.example, serial 42.
const head = `$TTL 300
$ORIGIN rpz.example.
@ IN SOA ns.rpz.example. hostmaster.rpz.example. 42 3600 600 86400 60
@ IN NS ns.rpz.example.
`

func mustParse(t testing.TB, name, body string) *Zone {
	t.Helper()
	z, err := Parse(strings.NewReader(body), ParseOptions{Name: name, File: name + ".rpz"})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return z
}

// newSnapshot is the zones as one policy.RPZ, checked in the order given,
// as a Set publishes the zones it loaded.
func newSnapshot(zones ...*Zone) *Snapshot {
	return &Snapshot{zones: zones}
}

// decide runs r's Check for one name as policy's step 3 would.
func decide(r policy.RPZ, name string) (policy.Decision, bool) {
	var d policy.Decision
	d.Reset()
	ok := r.Check(&policy.Input{Domain: name}, &d)
	return d, ok
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// TestActions: every action PowerDNS reads from a QNAME trigger, with the
// verdict, action, answer data and rule each gives.
func TestActions(t *testing.T) {
	z := mustParse(t, "op", head+`
nx.example        CNAME .
nodata.example    CNAME *.
drop.example      CNAME rpz-drop.
tcp.example       CNAME rpz-tcp-only.
pass.example      CNAME rpz-passthru.
self.example      CNAME self.example.
local.example     A     192.0.2.1
local.example     A     192.0.2.2
local.example     AAAA  2001:db8::1
local.example     TXT   "blocked by" " policy"
txt.example       TXT   "say \"hi\"" "\065"
six.example       AAAA  2001:db8::6
garden.example    CNAME Walled.Garden.NET.
rel.example       CNAME walled
*.wc.example      CNAME *.garden.net.
exact-wc.example  CNAME *.garden.net.
UPPER.Example     CNAME .
10.0.0.1          CNAME rpz-drop.
bücher.example    CNAME .
`)
	type want struct {
		verdict policy.Verdict
		action  policy.Action
		target  string
		a, aaaa []netip.Addr
		txt     []string
		rule    string
	}
	block := func(a policy.Action, trig string) want {
		return want{verdict: policy.VerdictBlock, action: a, rule: "rpz:op trigger=" + trig + " action=" + string(a)}
	}
	cname := func(target, trig string) want {
		return want{verdict: policy.VerdictRedirect, action: policy.ActionCNAME, target: target, rule: "rpz:op trigger=" + trig + " action=cname"}
	}
	passthru := func(trig string) want {
		return want{verdict: policy.VerdictAllow, action: policy.ActionAllow, rule: "rpz:op trigger=" + trig + " action=passthru"}
	}
	tests := []struct {
		name string
		want *want // nil: no match
	}{
		{"nx.example", &[]want{block(policy.ActionNXDomain, "nx.example")}[0]},
		{"nx.example.", &[]want{block(policy.ActionNXDomain, "nx.example")}[0]}, // trailing dot ignored
		{"nodata.example", &[]want{block(policy.ActionNoData, "nodata.example")}[0]},
		{"drop.example", &[]want{block(policy.ActionDrop, "drop.example")}[0]},
		{"tcp.example", &[]want{block(policy.ActionTruncate, "tcp.example")}[0]},
		{"pass.example", &[]want{passthru("pass.example")}[0]},
		{"self.example", &[]want{passthru("self.example")}[0]}, // the draft's older PASSTHRU
		{"local.example", &want{verdict: policy.VerdictRedirect, action: policy.ActionRedirect,
			a: addrs("192.0.2.1", "192.0.2.2"), aaaa: addrs("2001:db8::1"), txt: []string{"blocked by policy"},
			rule: "rpz:op trigger=local.example action=redirect"}},
		{"txt.example", &want{verdict: policy.VerdictRedirect, action: policy.ActionRedirect,
			txt: []string{`say "hi"A`}, rule: "rpz:op trigger=txt.example action=redirect"}},
		{"six.example", &want{verdict: policy.VerdictRedirect, action: policy.ActionRedirect,
			aaaa: addrs("2001:db8::6"), rule: "rpz:op trigger=six.example action=redirect"}},
		{"garden.example", &[]want{cname("walled.garden.net", "garden.example")}[0]},
		// A relative target is relative to the origin, as in any zone.
		{"rel.example", &[]want{cname("walled.rpz.example", "rel.example")}[0]},
		// "*.garden.net.": the query name replaces the "*".
		{"www.wc.example", &[]want{cname("www.wc.example.garden.net", "*.wc.example")}[0]},
		{"a.b.wc.example", &[]want{cname("a.b.wc.example.garden.net", "*.wc.example")}[0]},
		{"exact-wc.example", &[]want{cname("exact-wc.example.garden.net", "exact-wc.example")}[0]},
		{"upper.example", &[]want{block(policy.ActionNXDomain, "upper.example")}[0]},
		{"10.0.0.1", &[]want{block(policy.ActionDrop, "10.0.0.1")}[0]},
		{"xn--bcher-kva.example", &[]want{block(policy.ActionNXDomain, "xn--bcher-kva.example")}[0]},
		{"wc.example", nil}, // a wildcard does not cover its base
		{"example", nil},
		{"other.example", nil},
		{"", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := decide(z, tc.name)
			if tc.want == nil {
				if ok {
					t.Fatalf("matched: %+v rule %q", d, d.Rule())
				}
				return
			}
			if !ok {
				t.Fatal("no match")
			}
			w := tc.want
			got := want{d.Verdict, d.Action, d.Target, d.A, d.AAAA, d.TXT, d.Rule()}
			if !reflect.DeepEqual(got, *w) {
				t.Errorf("got  %+v\nwant %+v", got, *w)
			}
			if d.Reason != "" {
				t.Errorf("Check set Reason %q: that is policy's", d.Reason)
			}
		})
	}
	st := z.Stats()
	if st.Triggers != 16 || st.Wildcards != 1 || st.SkippedTotal() != 1 || st.Skipped[SkipZoneData] != 1 {
		t.Errorf("stats %+v", st)
	}
	if z.Apex() != "rpz.example" || z.Serial() != 42 || z.Name() != "op" {
		t.Errorf("apex %q serial %d name %q", z.Apex(), z.Serial(), z.Name())
	}
}

// TestPrecedence: exact beats wildcard, a longer wildcard beats a shorter
// one, a wildcard covers only names strictly below its base, and a bare
// "*" covers every name.
func TestPrecedence(t *testing.T) {
	z := mustParse(t, "p", head+`
exact.example           CNAME .
*.exact.example         CNAME rpz-drop.
*.example               CNAME *.
*.deep.sub.example      CNAME rpz-tcp-only.
`)
	root := mustParse(t, "root", head+`
*                       CNAME .
ok.test                 CNAME rpz-passthru.
`)
	tests := []struct {
		zone   *Zone
		name   string
		action policy.Action // "" no match
		rule   string
	}{
		{z, "exact.example", policy.ActionNXDomain, "rpz:p trigger=exact.example action=nxdomain"},
		{z, "www.exact.example", policy.ActionDrop, "rpz:p trigger=*.exact.example action=drop"},
		{z, "a.b.exact.example", policy.ActionDrop, "rpz:p trigger=*.exact.example action=drop"},
		{z, "other.example", policy.ActionNoData, "rpz:p trigger=*.example action=nodata"},
		{z, "deep.sub.example", policy.ActionNoData, "rpz:p trigger=*.example action=nodata"},
		{z, "x.deep.sub.example", policy.ActionTruncate, "rpz:p trigger=*.deep.sub.example action=truncate"},
		{z, "example", "", ""},
		{z, "example.org", "", ""},
		{z, "notexample", "", ""},
		{root, "anything.at.all", policy.ActionNXDomain, "rpz:root trigger=* action=nxdomain"},
		{root, "com", policy.ActionNXDomain, "rpz:root trigger=* action=nxdomain"},
		{root, "ok.test", policy.ActionAllow, "rpz:root trigger=ok.test action=passthru"},
		{root, "www.ok.test", policy.ActionNXDomain, "rpz:root trigger=* action=nxdomain"},
		{root, "", "", ""},
		{root, ".", "", ""},
	}
	for _, tc := range tests {
		d, ok := decide(tc.zone, tc.name)
		if ok != (tc.action != "") || d.Action != tc.action || d.Rule() != tc.rule {
			t.Errorf("%s %q: matched %v action %q rule %q; want action %q rule %q", tc.zone.Name(), tc.name, ok, d.Action, d.Rule(), tc.action, tc.rule)
		}
	}
}

// TestZoneOrder: the first zone with a matching trigger decides, even when
// a later zone has a more specific one, and PASSTHRU stops the search.
func TestZoneOrder(t *testing.T) {
	first := mustParse(t, "first", head+`
a.example     CNAME rpz-passthru.
*.b.example   A     192.0.2.1
`)
	second := mustParse(t, "second", head+`
a.example     CNAME .
x.b.example   CNAME .
c.example     CNAME rpz-drop.
`)
	s := newSnapshot(first, second)
	tests := []struct {
		name, rule string
		verdict    policy.Verdict
	}{
		{"a.example", "rpz:first trigger=a.example action=passthru", policy.VerdictAllow},
		{"x.b.example", "rpz:first trigger=*.b.example action=redirect", policy.VerdictRedirect},
		{"c.example", "rpz:second trigger=c.example action=drop", policy.VerdictBlock},
		{"d.example", "", ""},
	}
	for _, tc := range tests {
		d, ok := decide(s, tc.name)
		if ok != (tc.rule != "") || d.Rule() != tc.rule || d.Verdict != tc.verdict {
			t.Errorf("%s: matched %v verdict %q rule %q; want %q %q", tc.name, ok, d.Verdict, d.Rule(), tc.verdict, tc.rule)
		}
	}
	if got := s.Zones(); len(got) != 2 || got[0] != first {
		t.Errorf("Zones() = %v", got)
	}
	var nilSnap *Snapshot
	if _, ok := decide(nilSnap, "a.example"); ok {
		t.Error("a nil snapshot matched")
	}
}

// TestApexRelative: triggers are owner names relative to the SOA's owner,
// however the file spells them.
func TestApexRelative(t *testing.T) {
	tests := []struct {
		name   string
		origin string
		body   string
		hits   []string // names that match
		misses []string
		skip   map[SkipReason]int
	}{
		{
			name:   "origin from config",
			origin: "policy.example.",
			body: `@ SOA ns hostmaster 1 1 1 1 1
bad CNAME .
*.worse CNAME .
`,
			hits:   []string{"bad", "x.worse"},
			misses: []string{"bad.policy.example", "worse"},
			skip:   map[SkipReason]int{},
		},
		{
			name: "absolute owners",
			body: `rpz.example. 60 IN SOA ns.rpz.example. h.rpz.example. 1 1 1 1 1
bad.com.rpz.example. 60 IN CNAME .
bad.org. 60 IN CNAME .
rpz.example. 60 IN A 192.0.2.1
`,
			hits:   []string{"bad.com"},
			misses: []string{"bad.org", "bad.com.rpz.example"},
			skip:   map[SkipReason]int{SkipOutOfZone: 1, SkipApex: 1},
		},
		{
			name: "$ORIGIN below the apex",
			body: `$ORIGIN rpz.example.
@ 60 SOA ns h 1 1 1 1 1
$ORIGIN com.rpz.example.
bad CNAME .
$ORIGIN org.rpz.example.
*.bad CNAME rpz-drop.
@ CNAME rpz-drop.
`,
			hits:   []string{"bad.com", "www.bad.org", "org"},
			misses: []string{"bad", "bad.org"},
			skip:   map[SkipReason]int{},
		},
		{
			name: "the SOA sets the apex, not the $ORIGIN",
			body: `$ORIGIN example.
rpz 60 SOA ns h 1 1 1 1 1
bad.rpz CNAME .
other CNAME .
`,
			hits:   []string{"bad"},
			misses: []string{"bad.rpz", "other"},
			skip:   map[SkipReason]int{SkipOutOfZone: 1},
		},
		{
			name: "no origin anywhere: the root, as PowerDNS reads it",
			body: `$TTL 300
@ SOA localhost. root.localhost. 1 1 1 1 1
@ NS localhost.
bad.example CNAME .
*.bad.example CNAME .
`,
			hits:   []string{"bad.example", "www.bad.example"},
			misses: []string{"example"},
			skip:   map[SkipReason]int{SkipZoneData: 1},
		},
		{
			name: "root apex",
			body: `. 60 SOA ns. h. 1 1 1 1 1
bad.example. CNAME .
`,
			hits: []string{"bad.example"},
			skip: map[SkipReason]int{},
		},
		{
			name: "repeated SOA of an AXFR dump",
			body: `rpz.example. 60 SOA ns.rpz.example. h.rpz.example. 7 1 1 1 1
bad.rpz.example. 60 CNAME .
rpz.example. 60 SOA ns.rpz.example. h.rpz.example. 7 1 1 1 1
`,
			hits: []string{"bad"},
			skip: map[SkipReason]int{SkipZoneData: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			z, err := Parse(strings.NewReader(tc.body), ParseOptions{Name: "z", Origin: tc.origin})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.hits {
				if _, ok := decide(z, n); !ok {
					t.Errorf("%q does not match", n)
				}
			}
			for _, n := range tc.misses {
				if d, ok := decide(z, n); ok {
					t.Errorf("%q matches: %s", n, d.Rule())
				}
			}
			if st := z.Stats(); !reflect.DeepEqual(st.Skipped, tc.skip) {
				t.Errorf("skipped %v, want %v", st.Skipped, tc.skip)
			}
		})
	}
}

// TestSkipped: records that make no trigger are counted by reason, and
// the rest of the zone loads.
func TestSkipped(t *testing.T) {
	z := mustParse(t, "s", head+`
sub                          NS    ns.elsewhere.
24.0.0.0.127.rpz-client-ip   CNAME rpz-drop.
32.2.0.0.10.rpz-ip           CNAME .
ns1.example.rpz-nsdname      CNAME .
*.example.rpz-nsdname        CNAME .
32.1.0.0.10.rpz-nsip         CNAME .
mx.example                   MX    10 mail.example.
srv.example                  SRV   0 0 443 x.example.
chaos.example             CH TXT   "x"
skip.example                 CNAME rpz-skipzone.
future.example               CNAME x.rpz-v2.
a\032b.example               CNAME .
x.*.example                  CNAME .
bad-target.example           CNAME a\.b.example.
dup.example                  CNAME .
dup.example                  CNAME .
dupa.example                 A     192.0.2.1
dupa.example                 A     192.0.2.1
elsewhere.org.               CNAME .
signed.example               RRSIG A 8 2 300 20300101000000 20200101000000 12345 rpz.example. AAAA
@                            TXT   "zone comment"
kept.example                 CNAME .
`)
	st := z.Stats()
	want := map[SkipReason]int{
		SkipZoneData: 3, SkipClientIP: 1, SkipIP: 1, SkipNSDName: 2, SkipNSIP: 1, SkipType: 2, SkipClass: 1,
		SkipAction: 2, SkipName: 2, SkipTarget: 1, SkipDuplicate: 2, SkipOutOfZone: 1, SkipApex: 1,
	}
	if !reflect.DeepEqual(st.Skipped, want) {
		t.Errorf("skipped %v\nwant    %v", st.Skipped, want)
	}
	// Every record is the SOA, a trigger's first record, or skipped (no
	// local data merges here).
	if st.Triggers != 3 || st.Records != 24 || st.Records != 1+st.Triggers+st.SkippedTotal() {
		t.Errorf("triggers %d records %d skipped %d", st.Triggers, st.Records, st.SkippedTotal())
	}
	for _, n := range []string{"kept.example", "dup.example", "dupa.example"} {
		if _, ok := decide(z, n); !ok {
			t.Errorf("%s does not match", n)
		}
	}
	if d, _ := decide(z, "dupa.example"); len(d.A) != 1 {
		t.Errorf("duplicate A kept: %v", d.A)
	}
}

// TestParseErrors: files that are refused whole, each error saying where.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		origin string
		body   string
		want   []string // substrings of the error
	}{
		{"empty", "", "", []string{"no SOA record"}},
		{"comments only", "", "; nothing\n\n; here\n", []string{"no SOA record"}},
		{"record before the SOA", "", "$ORIGIN rpz.example.\nbad CNAME .\n@ SOA ns h 1 1 1 1 1\n", []string{"t.rpz line 2:", "not the zone's SOA", "bad.rpz.example"}},
		{"syntax error with its line", "", head + "ok.example CNAME .\nbad.example A 999.1.1.1\n", []string{"t.rpz", "line: 6"}},
		{"unknown type", "", head + "x.example FOO bar\n", []string{"line: 5"}},
		{"unbalanced parenthesis", "", head + "x.example TXT ( \"a\"\n", []string{"t.rpz"}},
		{"$INCLUDE refused", "", head + "$INCLUDE /etc/passwd\n", []string{"$INCLUDE directive not allowed", "line: 5"}},
		{"two actions for one trigger", "", head + "c.example CNAME .\nc.example CNAME rpz-drop.\n", []string{"t.rpz line 6:", "trigger c.example", "conflicts", "(line 5)"}},
		{"CNAME beside local data", "", head + "c.example A 192.0.2.1\nc.example CNAME garden.example.\n", []string{"conflicts"}},
		{"two CNAMEs", "", head + "*.c.example CNAME a.example.\n\n; why\n*.c.example CNAME b.example.", []string{"line 8:", "trigger *.c.example", "conflicts", "(line 5)"}},
		{"action beside local data", "", head + "c.example CNAME .\nc.example TXT \"why\"\n", []string{"conflicts"}},
		{"SOA below the apex", "", head + "sub SOA ns h 1 1 1 1 1\n", []string{"second SOA"}},
		{"bad initial origin", "bad..origin", "@ SOA ns h 1 1 1 1 1\n", []string{"bad initial origin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			z, err := Parse(strings.NewReader(tc.body), ParseOptions{Name: "t", File: "t.rpz", Origin: tc.origin})
			if err == nil {
				t.Fatalf("no error; %d triggers", len(z.rules))
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// Syntax errors keep miekg/dns's type, for callers that want the line.
	_, err := Parse(strings.NewReader(head+"bad.example A 999.1.1.1\n"), ParseOptions{Name: "t"})
	var pe *dns.ParseError
	if !errors.As(err, &pe) {
		t.Errorf("%v is not a *dns.ParseError", err)
	}
}

func TestMaxRecords(t *testing.T) {
	body := head + "a.example CNAME .\nb.example CNAME .\n"
	if _, err := Parse(strings.NewReader(body), ParseOptions{Name: "m", MaxRecords: 4}); err != nil {
		t.Fatalf("4 records: %v", err)
	}
	_, err := Parse(strings.NewReader(body), ParseOptions{Name: "m", MaxRecords: 3})
	if err == nil || !strings.Contains(err.Error(), "more than 3 records") {
		t.Fatalf("err %v", err)
	}
	// $GENERATE is expanded, and counts.
	gen := head + "$GENERATE 1-100 host$.example CNAME .\n"
	z, err := Parse(strings.NewReader(gen), ParseOptions{Name: "g"})
	if err != nil || z.Stats().Triggers != 100 {
		t.Fatalf("generate: %v", err)
	}
	if _, ok := decide(z, "host57.example"); !ok {
		t.Error("host57.example from $GENERATE does not match")
	}
	if _, err := Parse(strings.NewReader(gen), ParseOptions{Name: "g", MaxRecords: 50}); err == nil {
		t.Error("a $GENERATE past MaxRecords loaded")
	}
}

// TestRulesInFileOrder: rules are built in the order triggers first
// appear, so that a zone's rules are reproducible.
func TestRulesInFileOrder(t *testing.T) {
	z := mustParse(t, "o", head+"c.example CNAME .\na.example CNAME .\n*.b.example CNAME .\n")
	var got []string
	for _, r := range z.rules {
		got = append(got, r.text)
	}
	want := []string{"rpz:o trigger=c.example action=nxdomain", "rpz:o trigger=a.example action=nxdomain", "rpz:o trigger=*.b.example action=nxdomain"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q", got)
	}
}

// TestEditorArtifacts: a byte order mark and CRLF line ends, as editors
// on some systems write them, do not change the zone.
func TestEditorArtifacts(t *testing.T) {
	body := "\ufeff" + strings.ReplaceAll(head+"bad.example CNAME .\n*.w.example CNAME rpz-drop.\n", "\n", "\r\n")
	z := mustParse(t, "e", body)
	for name, want := range map[string]string{
		"bad.example": "rpz:e trigger=bad.example action=nxdomain",
		"x.w.example": "rpz:e trigger=*.w.example action=drop",
	} {
		if d, ok := decide(z, name); !ok || d.Rule() != want {
			t.Errorf("%s: %v %q", name, ok, d.Rule())
		}
	}
}

// TestTriggers: a zone's triggers in file order, as feed build's rpz source
// imports them, each with the verdict a match gives.
func TestTriggers(t *testing.T) {
	z := mustParse(t, "t", head+"b.example CNAME .\n*.w.example CNAME rpz-drop.\nok.example CNAME rpz-passthru.\nb.example CNAME .\n* CNAME *.\nl.example A 192.0.2.1\n")
	var got []Trigger
	for tr := range z.Triggers() {
		got = append(got, tr)
	}
	want := []Trigger{
		{Name: "b.example", Verdict: policy.VerdictBlock},
		{Name: "w.example", Wildcard: true, Verdict: policy.VerdictBlock},
		{Name: "ok.example", Verdict: policy.VerdictAllow},
		{Name: "", Wildcard: true, Verdict: policy.VerdictBlock},
		{Name: "l.example", Verdict: policy.VerdictRedirect},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("triggers %+v\nwant     %+v", got, want)
	}
}
