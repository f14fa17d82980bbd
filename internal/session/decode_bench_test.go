package session

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// BenchmarkDecode: one RADIUS-shaped value as the IP Mapper stores it,
// through Decode (the fast path) and through encoding/json (what Decode
// did before, and still does for any other form).
func BenchmarkDecode(b *testing.B) {
	s := Session{ID: "0123456789abcdef0123456789abcdef", Org: "mobile-01", Allocations: []netip.Prefix{netip.MustParsePrefix("100.64.0.1/32")},
		Attributes: identity.Attributes{Username: "447900000001", DeviceID: "msisdn:447900000001"}, Producer: ProducerRADIUS,
		UpdatedAt: time.Date(2026, 11, 29, 4, 0, 0, 123456789, time.UTC)}
	raw, _ := json.Marshal(&s)
	b.Run("canonical", func(b *testing.B) {
		for b.Loop() {
			if _, err := Decode(s.ID, raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var d Session
			if err := json.Unmarshal(raw, &d); err != nil {
				b.Fatal(err)
			}
			if err := d.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
