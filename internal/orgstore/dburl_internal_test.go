package orgstore

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		in, dialect, path string
	}{
		{"sqlite:data/orgmanager.db", DialectSQLite, "data/orgmanager.db"},
		{"sqlite:/var/lib/svc-pf/org.db", DialectSQLite, "/var/lib/svc-pf/org.db"},
		{"SQLite:x.db", DialectSQLite, "x.db"},
		{"sqlite:we#ird %20 name.db", DialectSQLite, "we#ird %20 name.db"},
		{"postgres://u:p@localhost:5432/db?sslmode=disable", DialectPostgres, ""},
		{"postgresql://localhost/db", DialectPostgres, ""},
	}
	for _, c := range good {
		tg, err := parseURL(c.in)
		if err != nil || tg.dialect != c.dialect || tg.path != c.path {
			t.Errorf("parseURL(%q) = %+v, %v", c.in, tg, err)
		}
		if c.dialect == DialectPostgres && tg.pg != c.in {
			t.Errorf("parseURL(%q).pg = %q", c.in, tg.pg)
		}
	}
	for _, in := range []string{"", "data.db", "mysql://x", "sqlite:", "sqlite::memory:", "sqlite:file:x.db",
		"sqlite:x.db?_pragma=foo", "sqlite:a\x00b", "sqlite:\xff", "postgres:db", "postgres://h:notaport/db"} {
		if tg, err := parseURL(in); err == nil {
			t.Errorf("parseURL(%q) = %+v, want an error", in, tg)
		}
	}
	_, err := parseURL("postgres://user:hunter2@h:notaport/db")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("parse error %v must not reveal the password", err)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"sqlite:data/orgmanager.db", "sqlite:", "postgres://u:p@h:5432/db?sslmode=disable",
		"postgresql://h/db", "mysql://x", "sqlite:a?b", "postgres://[::1]:5432/db", "postgres://u:pw@h:99999/db"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// A password in a postgres URL never shows up in an error.
		const secret = "S3cr3tPassw0rd"
		if !strings.Contains(raw, secret) {
			for _, scheme := range []string{"postgres://u:", "postgresql://u:"} {
				if _, err := parseURL(scheme + secret + "@" + raw); err != nil && strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q reveals the password", err)
				}
			}
		}
		tg, err := parseURL(raw)
		if err != nil {
			return
		}
		switch tg.dialect {
		case DialectSQLite:
			if tg.path == "" || strings.ContainsAny(tg.path, "?\x00") || "sqlite:"+tg.path != "sqlite:"+raw[len("sqlite:"):] {
				t.Fatalf("parseURL(%q) = %+v", raw, tg)
			}
			// The file: URI built from it keeps the path in one piece.
			uri := sqliteURIPath("/base/" + tg.path)
			if strings.ContainsAny(uri, "?#") {
				t.Fatalf("sqliteURIPath(%q) = %q leaves a URI delimiter", tg.path, uri)
			}
		case DialectPostgres:
			if tg.pg != raw {
				t.Fatalf("parseURL(%q).pg = %q", raw, tg.pg)
			}
		default:
			t.Fatalf("parseURL(%q) = %+v: no dialect", raw, tg)
		}
	})
}
