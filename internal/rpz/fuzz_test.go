package rpz

import (
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// FuzzParse: arbitrary zone text never panics or hangs, and a zone that
// loads answers for each of its triggers.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		head,
		head + "bad.example CNAME .\n*.bad.example CNAME rpz-drop.\n",
		head + "a.example A 192.0.2.1\na.example AAAA ::1\na.example TXT \"x\" \"y\"\n",
		head + "* CNAME *.\nw.example CNAME *.garden.example.\n",
		head + "32.1.0.0.10.rpz-ip CNAME .\nx.rpz-nsdname CNAME .\n",
		head + "$GENERATE 1-20 h$ CNAME .\n",
		head + "x CNAME .\nx CNAME rpz-passthru.\n",
		head + "$INCLUDE other\n",
		head + "t TXT ( \"a\"\n \"b\" )\n",
		"$ORIGIN .\n@ SOA ns. h. 1 1 1 1 1\ncom. CNAME .\n",
		"rpz. SOA a. b. 1 1 1 1 1\n\\000.rpz. CNAME .\nb\u00fccher.rpz. CNAME .\n",
		// feed build's rpz source reads zones with this parser too
		// (feedbuild's FuzzRPZ checks what it imports from them).
		"$ORIGIN rpz.example.\n@ SOA ns. h. ( 1 2 3 4 5 )\nbad.com CNAME .\n*.bad.com CNAME .\n",
		"x.rpz-ip CNAME .\nok CNAME rpz-passthru.\n  A 1.2.3.4\n",
		"$ORIGIN a.\n$ORIGIN b\nc TXT \"x ; y\"\n",
		"rpz. SOA a. b. 1 2 3 4 5\nabs.rpz. CNAME .\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		// MaxRecords keeps a run of $GENERATE lines to a bounded amount
		// of work per input.
		z, err := Parse(strings.NewReader(text), ParseOptions{Name: "fuzz", Origin: "rpz.example.", MaxRecords: 20_000})
		if err != nil {
			return
		}
		st := z.Stats()
		if st.Triggers != len(z.rules) || len(z.exact)+len(z.wild) != st.Triggers || st.Records < 1+st.SkippedTotal() {
			t.Fatalf("stats %+v, %d rules, %d exact, %d wild", st, len(z.rules), len(z.exact), len(z.wild))
		}
		var d policy.Decision
		for name, i := range z.exact {
			d.Reset()
			if !z.Check(&policy.Input{Domain: name}, &d) || d.Rule() != z.rules[i].text {
				t.Fatalf("trigger %q: rule %q, want %q", name, d.Rule(), z.rules[i].text)
			}
		}
		for base, i := range z.wild {
			name := "fuzz"
			if base != "" {
				name += "." + base
			}
			d.Reset()
			if _, exact := z.exact[name]; !exact && (!z.Check(&policy.Input{Domain: name}, &d) || d.Rule() != z.rules[i].text) {
				t.Fatalf("wildcard %q: %q: rule %q, want %q", base, name, d.Rule(), z.rules[i].text)
			}
		}
		for i := range z.rules {
			r := &z.rules[i]
			if !strings.HasPrefix(r.text, "rpz:fuzz trigger=") || r.verdict == "" || r.action == "" {
				t.Fatalf("rule %+v", r)
			}
		}
	})
}
