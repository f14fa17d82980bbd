package settings

import (
	"regexp"
	"testing"
)

// kvKey is what JetStream accepts as a key.
var kvKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func TestKeys(t *testing.T) {
	for _, c := range []struct {
		org string
		sc  Scope
	}{
		{"acme", Scope{Kind: ScopeOrg}},
		{"a b/c.d>*", Scope{Kind: ScopeProfile, Profile: 7}},
		{"école", Scope{Kind: ScopeLocation, Value: "hq.floor 2"}},
		{"acme", Scope{Kind: ScopeUsername, Value: "alice@example.com"}},
		{"acme", Scope{Kind: ScopeDeviceID, Value: "mac:00:11:22:33:44:55"}},
	} {
		k := Key(c.org, c.sc)
		if !kvKey.MatchString(k) {
			t.Errorf("%q %+v: key %q is not a KV key", c.org, c.sc, k)
		}
		org, sc, global, err := ParseKey(k)
		if err != nil || global || org != c.org || sc != c.sc {
			t.Errorf("ParseKey(%q) = %q %+v %v %v", k, org, sc, global, err)
		}
		if f := OrgKeyFilter(c.org); f[:len(f)-1] != k[:len(f)-1] {
			t.Errorf("filter %q does not cover %q", f, k)
		}
	}
	if _, _, global, err := ParseKey(GlobalKey); !global || err != nil {
		t.Error("global key")
	}
	for _, bad := range []string{"", "org", "org.YQ", "org..org", "org.YQ.user.YQ", "org.YQ.profile.01", "org.YQ.profile.-1",
		"org.YQ.username", "org.YQ.username.", "org.YQ=.org", "x.YQ.org", "org.YQ.org.x"} {
		if _, _, _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add("org.YWNtZQ.username.YWxpY2U")
	f.Add(GlobalKey)
	f.Fuzz(func(t *testing.T, key string) {
		org, sc, global, err := ParseKey(key)
		if err != nil || global {
			return
		}
		if Key(org, sc) != key {
			t.Fatalf("%q → %q %+v → %q", key, org, sc, Key(org, sc))
		}
	})
}
