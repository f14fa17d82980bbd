package main

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSessionsURL: whatever --url and selector value an operator types,
// the request URL is built without a panic, goes to /sessions on the host
// given, and carries the value unchanged; a table cell never holds a
// character that is not printable.
func FuzzSessionsURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:8083", "127.0.0.1:8083", "https://h/base/", "ftp://x", "http://", "::1", "http://[::1]:8083/x?y=1#z"} {
		f.Add(s, "acme")
	}
	f.Add("http://h", "a&org=b\t\x1b[31m")
	f.Fuzz(func(t *testing.T, base, value string) {
		if c := cell(value); !utf8.ValidString(c) || strings.IndexFunc(c, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
			t.Fatalf("cell(%q) = %q holds a character that is not printable", value, c)
		}
		_ = errorText([]byte(value))
		u, err := sessionsURL(base, url.Values{"org": {value}})
		if err != nil {
			return
		}
		p, err := url.Parse(u)
		if err != nil {
			t.Fatalf("sessionsURL(%q) = %q, which does not parse: %v", base, u, err)
		}
		if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || !strings.HasSuffix(p.Path, "/sessions") {
			t.Fatalf("sessionsURL(%q) = %q: not an http(s) URL of /sessions", base, u)
		}
		q, err := url.ParseQuery(p.RawQuery)
		if err != nil || len(q) != 1 || len(q["org"]) != 1 || q["org"][0] != value {
			t.Fatalf("sessionsURL(%q) = %q: query %v (%v), want org=%q only", base, u, q, err, value)
		}
	})
}
