package session

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
)

func TestNewID(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/24")
	base := NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:1", Location: "hq"}}, p)
	if base != NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:1", Location: "hq"}}, p) {
		t.Fatal("not deterministic")
	}
	if !ValidID(base) || len(base) != 32 {
		t.Fatalf("id %q is not a 32-hex-digit key", base)
	}
	for name, other := range map[string]string{
		"org":      NewID(identity.Identity{Org: "beta", Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:1", Location: "hq"}}, p),
		"cidr":     NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:1", Location: "hq"}}, netip.MustParsePrefix("10.0.1.0/24")),
		"username": NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "bob", DeviceID: "mac:1", Location: "hq"}}, p),
		"deviceid": NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:2", Location: "hq"}}, p),
		"location": NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:1", Location: "lab"}}, p),
		// Length prefixes keep shifted boundaries apart.
		"boundary": NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "alicemac:1", Location: "hq"}}, p),
	} {
		if other == base {
			t.Errorf("changing %s kept the id", name)
		}
	}
	// Host bits do not make another session.
	if NewID(identity.Identity{Org: "acme", Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:1", Location: "hq"}}, netip.MustParsePrefix("10.0.0.7/24")) != base {
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

func TestDecode(t *testing.T) {
	good := &Session{Org: "org", Revision: 1, Attributes: identity.Attributes{Username: "u"}, UpdatedAt: time.Unix(1_700_000_000, 0).UTC(),
		Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("2001:db8::/64")}}
	good.ID = NewID(good.Identity(), good.Allocations[0])
	good.Location = "school-1"
	raw, _ := json.Marshal(good)
	cases := []struct {
		name  string
		key   string
		value string
		ok    bool
	}{
		{"valid", good.ID, string(raw), true},
		{"unknown fields are ignored", good.ID, strings.Replace(string(raw), "{", `{"future":1,`, 1), true},
		{"id mismatch", "other", string(raw), false},
		{"missing org", good.ID, strings.Replace(string(raw), `"org":"org"`, `"org":""`, 1), false},
		{"bad prefix", good.ID, strings.Replace(string(raw), "10.0.0.0/24", "10.0.0.0/33", 1), false},
		{"truncated", good.ID, string(raw[:len(raw)/2]), false},
		{"null", good.ID, "null", false},
		{"empty", good.ID, "", false},
	}
	for _, c := range cases {
		s, err := Decode(c.key, []byte(c.value))
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
			continue
		}
		if c.ok && (s.ID != good.ID || len(s.Allocations) != 2 || s.Location != "school-1") {
			t.Errorf("%s: decoded %+v", c.name, s)
		}
	}
	a, _ := Decode(good.ID, raw)
	b, _ := Decode(good.ID, raw)
	if a == b || !slices.Equal(a.Allocations, b.Allocations) {
		t.Error("decoding twice must give two equal sessions")
	}
}
