package session

import (
	"net/netip"
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
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	if ValidID(string(long)) || !ValidID(string(long[:128])) {
		t.Error("id length limit is not 128")
	}
}
