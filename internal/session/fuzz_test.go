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

// FuzzDecodeCanonical: wherever the fast path takes a value, encoding/json
// takes it too and gives the same session.
func FuzzDecodeCanonical(f *testing.F) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))
	for _, s := range []*Session{
		{ID: "0123456789abcdef0123456789abcdef", Org: "org", Revision: -7,
			Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("2001:db8::/64")},
			Attributes:  identity.Attributes{Username: "alice", DeviceID: "msisdn:447900000001", Location: "loc"}, TraceID: "t", OpaqueID: "o",
			Producer: ProducerRADIUS, UpdatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ExpiresAt: &exp},
		{ID: "k", Org: "o", Allocations: []netip.Prefix{}},
		{},
	} {
		raw, _ := json.Marshal(s)
		f.Add(raw)
	}
	f.Add([]byte(`{"id":"k","org":"o","allocations":null}`))
	f.Add([]byte(`{"ID":"k","id":"j"}`))
	f.Add([]byte(`{"revision":01}`))
	f.Add([]byte(`{"revision":1e3}`))
	f.Add([]byte(`{"allocations":["10.0.0.1/33"]}`))
	f.Add([]byte(`{"updated_at":"2026-13-01T00:00:00Z"}`))
	f.Add([]byte(`{"org":"o","id":"k"}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		var fast Session
		if !decodeCanonical(value, &fast) {
			return
		}
		var slow Session
		if err := json.Unmarshal(value, &slow); err != nil {
			t.Fatalf("fast path took %q, encoding/json refuses it: %v", value, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\nfast %#v\njson %#v", value, fast, slow)
		}
	})
}

// TestDecodeTakesTheFastPath: what the IP Mapper stores (json.Marshal of a
// session with plain values) is decoded without encoding/json, and the
// same as by it.
func TestDecodeTakesTheFastPath(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range []Session{
		{ID: "0123456789abcdef0123456789abcdef", Org: "mobile-01", Allocations: []netip.Prefix{netip.MustParsePrefix("100.64.0.1/32")},
			Attributes: identity.Attributes{Username: "447900000001", DeviceID: "msisdn:447900000001"}, Producer: ProducerRADIUS,
			UpdatedAt: time.Now().UTC().Round(0), ExpiresAt: &exp},
		{ID: "s1", Org: "acme", Revision: 12, Allocations: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/25"), netip.MustParsePrefix("2001:db8:1::/48")},
			Attributes: identity.Attributes{Username: "alice", DeviceID: "laptop-7", Location: "paris"}, TraceID: "req-81f2", OpaqueID: "radius-4411",
			UpdatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{ID: "s2", Org: "acme", Allocations: []netip.Prefix{}},
	} {
		raw, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		var fast Session
		if !decodeCanonical(raw, &fast) {
			t.Fatalf("%s: not decoded by the fast path", raw)
		}
		got, err := Decode(s.ID, raw)
		if err != nil || !reflect.DeepEqual(*got, s) || !reflect.DeepEqual(fast, s) {
			t.Fatalf("%s:\n got %#v (%v)\nwant %#v", raw, got, err, s)
		}
	}
}
