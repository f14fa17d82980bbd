package session

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNewID(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/24")
	base := NewID("acme", p, "alice", "mac:1", "hq")
	if base != NewID("acme", p, "alice", "mac:1", "hq") {
		t.Fatal("not deterministic")
	}
	if !ValidID(base) || len(base) != 32 {
		t.Fatalf("id %q is not a 32-hex-digit key", base)
	}
	for name, other := range map[string]string{
		"org":      NewID("beta", p, "alice", "mac:1", "hq"),
		"cidr":     NewID("acme", netip.MustParsePrefix("10.0.1.0/24"), "alice", "mac:1", "hq"),
		"username": NewID("acme", p, "bob", "mac:1", "hq"),
		"deviceid": NewID("acme", p, "alice", "mac:2", "hq"),
		"location": NewID("acme", p, "alice", "mac:1", "lab"),
		// Length prefixes keep shifted boundaries apart.
		"boundary": NewID("acme", p, "alicemac:1", "", "hq"),
	} {
		if other == base {
			t.Errorf("changing %s kept the id", name)
		}
	}
	// Host bits do not make another session.
	if NewID("acme", netip.MustParsePrefix("10.0.0.7/24"), "alice", "mac:1", "hq") != base {
		t.Error("an unmasked prefix changed the id")
	}
}

func TestValidate(t *testing.T) {
	good := Session{ID: "abc-1", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Session{
		"empty id":   {Org: "acme"},
		"dot in id":  {ID: "a.b", Org: "acme"},
		"no org":     {ID: "a"},
		"host bits":  {ID: "a", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}},
		"zero value": {ID: "a", Org: "acme", Allocations: []netip.Prefix{{}}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	// IPv4-mapped IPv6 allocations are refused whatever their length, with
	// a pointer to the IPv4 form; IPv6 prefixes that merely contain the
	// mapped range are ordinary IPv6.
	for _, p := range []string{"::ffff:10.0.0.0/104", "::ffff:10.0.0.1/128", "::ffff:0.0.0.0/96"} {
		s := Session{ID: "a", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix(p)}}
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), "IPv4-mapped IPv6 allocation; use the IPv4 form") {
			t.Errorf("%s: got %v, want the IPv4-mapped refusal", p, err)
		}
	}
	for _, p := range []string{"::/80", "::/0", "2001:db8::/32", "10.0.0.0/8"} {
		s := Session{ID: "a", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix(p)}}
		if err := s.Validate(); err != nil {
			t.Errorf("%s refused: %v", p, err)
		}
	}
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	if ValidID(string(long)) || !ValidID(string(long[:128])) {
		t.Error("id length limit is not 128")
	}
}
