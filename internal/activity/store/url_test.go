package store

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		raw, def, kind, dir string
		bad                 bool
	}{
		{"", "/data/activity", KindDir, "/data/activity", false},
		{"", "", "", "", true},
		{"dir:/var/lib/a/", "", KindDir, "/var/lib/a", false},
		{"dir:", "", "", "", true},
		{"dir:/a\x00b", "", "", "", true},
		{"postgres://u:secret@h:5432/db", "", KindPostgres, "", false},
		{"postgresql://h/db", "", KindPostgres, "", false},
		{"postgres://u:secret@h:notaport/db", "", "", "", true},
		{"sqlite:/x.db", "", "", "", true},
		{"/just/a/path", "", "", "", true},
	} {
		tg, err := ParseURL(c.raw, c.def)
		if (err != nil) != c.bad || tg.kind != c.kind || tg.dir != c.dir {
			t.Errorf("ParseURL(%q, %q) = %+v, %v", c.raw, c.def, tg, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error echoes the password: %v", err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"", "dir:/a", "postgres://u:secret@h/db", "postgres://%zz", "dir:\x00", "postgres://%secret", "postgres://u:%secret@h/db"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tg, err := ParseURL(raw, "/d")
		if err != nil {
			if strings.Contains(raw, "secret") && strings.Contains(err.Error(), "secret") {
				t.Fatalf("error echoes the URL's password: %v", err)
			}
			return
		}
		if tg.kind != KindDir && tg.kind != KindPostgres {
			t.Fatalf("kind %q", tg.kind)
		}
		if tg.kind == KindDir && tg.dir == "" {
			t.Fatal("empty dir")
		}
	})
}

func TestMatchIPAndQName(t *testing.T) {
	for _, c := range []struct {
		q, client string
		want      bool
	}{
		{"192.0.2.7", "192.0.2.7", true},
		{"192.0.2.7", "192.0.2.0/24", true},
		{"192.0.2.7", "192.0.3.0/24", false},
		{"192.0.2.0/24", "192.0.2.9", true},
		{"192.0.0.0/16", "192.0.2.0/24", true},
		{"192.0.2.0/25", "192.0.2.0/24", false},
		{"h:00112233", "h:00112233", true},
		{"h:00112233", "192.0.2.7", false},
		{"2001:db8::1", "2001:db8::/48", true},
		{"junk", "192.0.2.7", false},
	} {
		if got := matchIP(c.q, c.client); got != c.want {
			t.Errorf("matchIP(%q, %q) = %v", c.q, c.client, got)
		}
	}
	for _, c := range []struct {
		q, name string
		want    bool
	}{
		{"example.com.", "example.com.", true},
		{"example.com.", "a.example.com.", true},
		{"example.com.", "badexample.com.", false},
		{".", "x.", true},
	} {
		if got := matchQName(c.q, c.name); got != c.want {
			t.Errorf("matchQName(%q, %q) = %v", c.q, c.name, got)
		}
	}
}
