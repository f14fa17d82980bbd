package access_test

import (
	"errors"
	"testing"

	"github.com/svc-pf/svc-pf/internal/access"
)

func TestReach(t *testing.T) {
	admin := access.Principal{Role: access.RoleAdmin}
	oa := access.Principal{Role: access.RoleOrgAdmin, Org: "a"}
	ov := access.Principal{Role: access.RoleOrgViewer, Org: "a"}
	for _, c := range []struct {
		name        string
		p           access.Principal
		org         string
		read, write bool
		platform    bool
	}{
		{"admin any org", admin, "b", true, true, true},
		{"org-admin own", oa, "a", true, true, false},
		{"org-admin other", oa, "b", false, false, false},
		{"org-viewer own", ov, "a", true, false, false},
		{"org-viewer other", ov, "b", false, false, false},
		{"no role", access.Principal{Org: "a"}, "a", false, false, false},
	} {
		if got := c.p.CanRead(c.org); got != c.read {
			t.Errorf("%s: CanRead = %v, want %v", c.name, got, c.read)
		}
		if got := c.p.CanWrite(c.org); got != c.write {
			t.Errorf("%s: CanWrite = %v, want %v", c.name, got, c.write)
		}
		if got := c.p.Platform() == nil; got != c.platform {
			t.Errorf("%s: Platform allowed = %v, want %v", c.name, got, c.platform)
		}
		if err := c.p.Write(c.org); (err == nil) != c.write || (err != nil && !errors.Is(err, access.ErrForbidden)) {
			t.Errorf("%s: Write = %v", c.name, err)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"Bearer  abc", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"Bearer a b", "", false},
		{"Bearer a\x00b", "", false},
		{"", "", false},
	} {
		got, err := access.BearerToken(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("BearerToken(%q) = %q, %v", c.in, got, err)
		}
		if err != nil && !errors.Is(err, access.ErrUnauthorized) {
			t.Errorf("BearerToken(%q): error %v is not ErrUnauthorized", c.in, err)
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, s := range []string{"admin", "org-admin", "org-viewer"} {
		if r, err := access.ParseRole(s); err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "Admin", "root", "org_admin"} {
		if _, err := access.ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q) accepted", s)
		}
	}
}
