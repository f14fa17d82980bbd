package feedbuild

import (
	"net/url"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// checkEntry fails unless e is a key the feed can hold: a name feed.CheckName
// accepts, a path feed.ParseKey keeps as it is, and a line that reads back
// equal.
func checkEntry(t *testing.T, in string, e Entry) {
	t.Helper()
	if err := feed.CheckName(e.Name); err != nil {
		t.Fatalf("%q imported name %q: %v", in, e.Name, err)
	}
	name, path, err := feed.ParseKey(e.Key())
	if err != nil || name != e.Name || path != e.Path {
		t.Fatalf("%q imported key %q: ParseKey gives %q %q %v", in, e.Key(), name, path, err)
	}
	if e.Path != "" && (!strings.HasPrefix(e.Path, "/") || len(e.Path) > maxPath) {
		t.Fatalf("%q imported path %q", in, e.Path)
	}
	codes := e.Codes
	if codes == nil {
		codes = []uint16{1}
	}
	line := feed.AppendLine(nil, feed.Line{Name: e.Name, Path: e.Path, Codes: codes})
	if l, err := feed.ParseLine(line[:len(line)-1], false); err != nil || l.Key() != e.Key() {
		t.Fatalf("%q: the line %q does not read back: %v", in, line, err)
	}
}

// fuzzImport runs the whole importer over the input as a file, so that
// state across lines (RPZ origins and parentheses, adblock exceptions) is
// fuzzed too.
func fuzzImport(t *testing.T, format string, in string) {
	codes := []uint16{1}
	if format == FormatCSV {
		codes = nil
	}
	st, err := ImportReader(format, codes, strings.NewReader(in), func(e Entry) { checkEntry(t, in, e) })
	if err == nil && st.Imported < 0 {
		t.Fatal("negative count")
	}
}

func FuzzHostsLine(f *testing.F) {
	for _, s := range []string{"0.0.0.0 ads.example.com", "127.0.0.1 localhost", "::1 a.b c.d # x", "# c", "1.2.3.4 x.com", "0.0.0.0 bücher.de", "0.0.0.0 *.x.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		names, _ := parseHostsLine(in)
		for _, n := range names {
			checkEntry(t, in, Entry{Name: n})
		}
		fuzzImport(t, FormatHosts, in)
	})
}

func FuzzDomainsLine(f *testing.F) {
	for _, s := range []string{"ads.example.com", "# c", "1.2.3.4", "||x.com^", "Bücher.DE.", "*.x.com", "a b", "xn--bcher-kva.de"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if name, cause := parseDomainsLine(in); name != "" {
			checkEntry(t, in, Entry{Name: name})
		} else if cause == "" && strings.TrimSpace(in) != "" {
			t.Fatalf("%q: neither imported nor skipped", in)
		}
		fuzzImport(t, FormatDomains, in)
	})
}

func FuzzAdblockLine(f *testing.F) {
	for _, s := range []string{
		"||ads.example.com^", "||example.com/a/b.js^$all", "@@||x.com^", "example.com##.ad", "/ads/",
		`/a\d+/$script`, "||x.com^$third-party", "||x.com^$badfilter", "||1.2.3.4^", "||a.*/b", "[Adblock Plus 2.0]",
		"||x.com^\n@@||x.com^", "||a.b.com^\n@@||b.com^$doc\n||c.com^$important",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if r := parseAdblockLine(in); r.cause == "" && r.entry.Name != "" {
			checkEntry(t, in, r.entry)
		} else if r.cause == "" && strings.TrimSpace(in) != "" {
			t.Fatalf("%q: neither imported nor skipped", in)
		}
		fuzzImport(t, FormatAdblock, in)
	})
}

func FuzzRPZ(f *testing.F) {
	for _, s := range []string{
		"$ORIGIN rpz.example.\n@ SOA ns. h. ( 1 2 3 4 5 )\nbad.com CNAME .\n*.bad.com CNAME .\n",
		"x.rpz-ip CNAME .\nok CNAME rpz-passthru.\n  A 1.2.3.4\n",
		"$ORIGIN a.\n$ORIGIN b\nc TXT \"x ; y\"\n",
		"rpz. SOA a. b. 1 2 3 4 5\nabs.rpz. CNAME .\n",
		"$INCLUDE x\n",
		// Seeds of rpz's FuzzParse: the zone parser is the node's.
		"@ SOA ns. h. 1 1 1 1 1\na.example A 192.0.2.1\na.example AAAA ::1\na.example TXT \"x\" \"y\"\n",
		"@ SOA ns. h. 1 1 1 1 1\n* CNAME *.\nw.example CNAME *.garden.example.\n",
		"@ SOA ns. h. 1 1 1 1 1\n$GENERATE 1-20 h$.example CNAME .\n",
		"rpz. SOA a. b. 1 1 1 1 1\n\\000.rpz. CNAME .\nb\u00fccher.rpz. CNAME .\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		fuzzImport(t, FormatRPZ, in)
	})
}

func FuzzCSVLine(f *testing.F) {
	for _, s := range []string{"ads.example.com,1", "x.com/p?q=1,1;2", `"a.com","3"`, "# c", "a,b,c", "bücher.de/Ü,65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if e, cause := parseCSVLine(in); e.Name != "" {
			if len(e.Codes) == 0 {
				t.Fatalf("%q: imported without codes", in)
			}
			checkEntry(t, in, e)
		} else if cause == "" && strings.TrimSpace(in) != "" {
			t.Fatalf("%q: neither imported nor skipped", in)
		}
		fuzzImport(t, FormatCSV, in)
	})
}

// FuzzSource: ParseSource never panics; a source it accepts spells itself
// back (String) into the same source; a URL source has an http(s) scheme
// and a host, and its redacted form hides any password.
func FuzzSource(f *testing.F) {
	for _, s := range []string{
		"adblock:1:easylist.txt", "csv:-:own.csv", "hosts:1,4:/etc/hosts", "domains:7:c:\\lists\\x.txt",
		"adblock:3:https://lists.example/list.txt", "hosts:3:http://127.0.0.1:8080/hosts?x=1",
		"adblock:3:HTTPS://user:secret@lists.example/l", "adblock:3:https:///nohost", "adblock:3:ftp://x/l",
		"adblock:3:https://x/l#frag", "domains:1:./dir/http://x", "rpz:2:https://[::1]:8443/zone", "csv:1:https://x/a.csv",
		"json:1:x", "adblock::https://x/", "adblock:1:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		src, err := ParseSource(in)
		if err != nil {
			return
		}
		again, err := ParseSource(src.String())
		if err != nil || again.String() != src.String() || again.IsURL() != src.IsURL() {
			t.Fatalf("%q parses as %q, which reparses as %q (%v)", in, src.String(), again.String(), err)
		}
		if !src.IsURL() {
			return
		}
		u, err := url.Parse(src.Path)
		if err != nil || u.Hostname() == "" || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) {
			t.Fatalf("%q: accepted URL %q: %v", in, src.Path, err)
		}
		if p, ok := u.User.Password(); ok && p != "" && strings.Contains(src.Redacted(), ":"+p+"@") {
			t.Fatalf("%q: Redacted %q shows the password", in, src.Redacted())
		}
	})
}
