package session

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// FuzzDecode feeds arbitrary bucket values to the decoder: it must
// never panic, and whatever it accepts must be a valid session for the key
// that survives a JSON round trip unchanged.
func FuzzDecode(f *testing.F) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	good := &Session{
		ID: "0123456789abcdef0123456789abcdef", Org: "org", Revision: 7,
		Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("2001:db8::/64")},
		Attributes:  identity.Attributes{Username: "alice", DeviceID: "dev", Location: "loc"}, TraceID: "t", OpaqueID: "o",
		UpdatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ExpiresAt: &exp,
	}
	raw, _ := json.Marshal(good)
	f.Add(good.ID, raw)
	f.Add(good.ID, []byte(`{"id":"0123456789abcdef0123456789abcdef","org":"o","allocations":["10.0.0.1/24"]}`))
	f.Add("k", []byte(`{"id":"k","org":"o","allocations":null,"updated_at":"2026-01-01T00:00:00Z"}`))
	f.Add("k", []byte(`{"id":"k","org":"o","allocations":["::ffff:1.2.3.4/128","fe80::1%eth0/64"]}`))
	f.Add("k", []byte(`{"id":"k","org":"o","revision":1e400}`))
	f.Add("k", []byte(`null`))
	f.Add("k", []byte(``))
	f.Add("a.b", []byte(`{"id":"a.b","org":"o"}`))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		s, err := Decode(key, value)
		if err != nil {
			if s != nil {
				t.Fatal("error with a session")
			}
			return
		}
		if s.ID != key {
			t.Fatalf("accepted id %q under key %q", s.ID, key)
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted an invalid session: %v", err)
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("accepted session does not encode: %v", err)
		}
		s2, err := Decode(key, again)
		if err != nil {
			t.Fatalf("round trip rejected: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normalize(s), normalize(s2)) {
			t.Fatalf("round trip changed the session:\n%+v\n%+v", s, s2)
		}
	})
}

// normalize drops what a JSON round trip legitimately changes: the time
// zone pointer (UTC vs a fixed zone at offset 0) and nil vs empty slices.
func normalize(s *Session) Session {
	c := *s
	c.UpdatedAt = c.UpdatedAt.UTC()
	if c.ExpiresAt != nil {
		e := c.ExpiresAt.UTC()
		c.ExpiresAt = &e
	}
	if len(c.Allocations) == 0 {
		c.Allocations = nil
	}
	return c
}
