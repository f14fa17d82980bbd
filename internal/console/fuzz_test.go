package console

import (
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgmanager"
)

// The form parsers never panic, and what they accept is what the
// operations accept.

func FuzzParseSignin(f *testing.F) {
	for _, s := range []string{"", "abc", " tok ", "a b", "\x00", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, msg := parseSignin(url.Values{"token": {s}})
		if (msg == "") == (in.token == "") {
			t.Fatalf("%q: token %q with message %q", s, in.token, msg)
		}
		if in.token != "" && strings.ContainsAny(in.token, " \t\r\n\x00") {
			t.Fatalf("%q: a token with spaces or controls passed: %q", s, in.token)
		}
	})
}

func FuzzParsePrefixForm(f *testing.F) {
	f.Add("10.0.0.0/8\n2001:db8::/32", "")
	f.Add("", "10.0.0.0/8")
	f.Add(" , ", "\r\n")
	f.Fuzz(func(t *testing.T, add, remove string) {
		a, r, errs := parsePrefixForm(url.Values{"add": {add}, "remove": {remove}})
		if errs == nil && len(a)+len(r) == 0 {
			t.Fatal("an empty patch was accepted")
		}
		for _, s := range append(a, r...) {
			if s == "" || strings.ContainsAny(s, " ,\n\r\t") {
				t.Fatalf("item %q", s)
			}
		}
	})
}

func FuzzParseOverrideForm(f *testing.F) {
	f.Add("10.0.0.0/24", "alice", "mac:0a1b", "hq", `{"k":1}`)
	f.Add("10.0.0.1/24", "", "", "", "")
	f.Add("", "x", "", "", "[]")
	f.Fuzz(func(t *testing.T, cidr, user, dev, loc, meta string) {
		in, errs := parseOverrideForm(url.Values{"cidr": {cidr}, "username": {user}, "deviceid": {dev}, "location": {loc}, "meta": {meta}})
		if errs != nil {
			if strings.TrimSpace(cidr) != "" {
				t.Fatalf("refused with a cidr: %v", errs)
			}
			return
		}
		// The operation's own check decides; it must not panic either,
		// and a refusal is a 400 naming a status the form can show.
		if _, err := orgmanager.BatchItem(0, in); err != nil && err.Error == "" {
			t.Fatal("a refusal without words")
		}
	})
}

func FuzzParseCSV(f *testing.F) {
	f.Add("cidr,username\n10.0.0.0/24,alice\n")
	f.Add("10.0.0.0/24,,,,,1\n2001:db8::/32,a,b,c,{}\n")
	f.Add("\"unterminated\n")
	f.Add("10.0.0.1/24\n,,,\n")
	f.Fuzz(func(t *testing.T, text string) {
		ops, errs, err := parseCSV(text)
		if err != nil {
			if ops != nil || errs != nil {
				t.Fatal("rows with an error")
			}
			return
		}
		if len(ops)+len(errs) == 0 {
			t.Fatal("nothing and no error")
		}
		if len(ops)+len(errs) > orgmanager.MaxBatchItems {
			t.Fatal("over the batch limit")
		}
		for _, e := range errs {
			if e.Msg == "" || e.Line < 1 {
				t.Fatalf("row error %+v", e)
			}
		}
	})
}

func FuzzParseSettingsForm(f *testing.F) {
	f.Add("username", "alice", `{"blocked_categories":[3]}`)
	f.Add("profile", "7", `{}`)
	f.Add("org", "", `{"filtering":false}`)
	f.Add("deviceid", "", "{")
	f.Add("nope", "x", "{}")
	f.Fuzz(func(t *testing.T, kind, value, doc string) {
		sc, d, errs := parseSettingsForm(url.Values{"scope": {kind}, "value": {value}, "document": {doc}})
		if errs != nil {
			return
		}
		if d == nil {
			t.Fatal("accepted without a document")
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("accepted scope %+v: %v", sc, err)
		}
		// A document accepted parses again from its canonical form.
		if _, err := orgmanager.ParseDocument([]byte(d.String())); err != nil {
			t.Fatalf("canonical form refused: %v", err)
		}
	})
}

func FuzzParseWhyForm(f *testing.F) {
	f.Add("www.example.com", "10.0.0.1", "", "", "")
	f.Add("x", "", "alice", "mac:0a1b", "3")
	f.Add("", "", "", "", "")
	f.Fuzz(func(t *testing.T, domain, ip, user, dev, profile string) {
		p, errs := parseWhyForm(url.Values{"domain": {domain}, "ip": {ip}, "username": {user}, "deviceid": {dev}, "profile": {profile}})
		if errs != nil {
			return
		}
		if p.Get("domain") == "" || p.Get("verbose") != "1" {
			t.Fatalf("params %v", p)
		}
		if d := p.Get("deviceid"); d != "" {
			b, err := hex.DecodeString(d)
			if err != nil || string(b) != dev {
				t.Fatalf("deviceid %q from %q", d, dev)
			}
		}
	})
}

func FuzzParseTokenForm(f *testing.F) {
	f.Add("admin", "", "ops", "")
	f.Add("org-viewer", "acme", "ci", "720h")
	f.Add("org-admin", "", "", "-1s")
	f.Fuzz(func(t *testing.T, role, org, name, expires string) {
		nt, errs := parseTokenForm(url.Values{"role": {role}, "org": {org}, "name": {name}, "expires": {expires}})
		if errs != nil {
			return
		}
		if nt.Role.Scoped() == (nt.Org == "") {
			t.Fatalf("role %s with org %q", nt.Role, nt.Org)
		}
		if nt.Expires < 0 {
			t.Fatal("negative expiry")
		}
	})
}

func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/ui/orgs", "https://x/ui/", "//evil/ui/", "/ui/\\evil", "/uix"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := safeNext(s)
		if n != "" && (!strings.HasPrefix(n, "/ui/") || strings.ContainsAny(n, "\\ \t\r\n") || n != s) {
			t.Fatalf("%q kept as %q", s, n)
		}
	})
}
