package cidr

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in     string
		want   string
		reason string // substring of the error reason; empty means valid
	}{
		{in: "10.0.0.0/8", want: "10.0.0.0/8"},
		{in: "0.0.0.0/0", want: "0.0.0.0/0"},
		{in: "192.168.1.1/32", want: "192.168.1.1/32"},
		{in: "2001:DB8::/32", want: "2001:db8::/32"},
		{in: "::/0", want: "::/0"},
		{in: "::1/128", want: "::1/128"},
		{in: "::/80", want: "::/80"}, // holds the mapped range; plain IPv6
		// step 1: syntax
		{in: "", reason: "address/length"},
		{in: "10.0.0.0", reason: "address/length"},
		{in: "10.0.0/8", reason: "IP address"},
		{in: "010.0.0.0/8", reason: "IP address"},
		{in: "10.0.0.0/", reason: "decimal"},
		{in: "10.0.0.0/08", reason: "decimal"},
		{in: "10.0.0.0/+8", reason: "decimal"},
		{in: "10.0.0.0/8 ", reason: "decimal"},
		{in: " 10.0.0.0/8", reason: "IP address"},
		{in: "10.0.0.0/1000", reason: "decimal"},
		{in: "fe80::%eth0/64", reason: "zones"},
		{in: "example.com/8", reason: "IP address"},
		// step 2: length
		{in: "10.0.0.0/33", reason: "out of range 0..32 for IPv4"},
		{in: "2001:db8::/129", reason: "out of range 0..128 for IPv6"},
		// step 3: canonical form
		{in: "10.0.0.1/8", reason: "host bits set; the network address form is 10.0.0.0/8"},
		{in: "::ffff:10.0.0.0/104", reason: "IPv4-mapped IPv6 network; the canonical form is 10.0.0.0/8"},
		{in: "::ffff:192.0.2.1/128", reason: "IPv4-mapped IPv6 network; the canonical form is 192.0.2.1/32"},
		{in: "::FFFF:0.0.0.0/96", reason: "IPv4-mapped IPv6 network; the canonical form is 0.0.0.0/0"},
		{in: "::ffff:10.0.0.1/104", reason: "host bits set"}, // step 3's first check comes first
		{in: "2001:db8::1/32", reason: "network address form is 2001:db8::/32"},
		// the order of the steps: a bad length is reported before host bits
		{in: "10.0.0.1/40", reason: "out of range"},
	}
	for _, tt := range tests {
		p, err := Parse(tt.in)
		if tt.reason == "" {
			if err != nil || p.String() != tt.want {
				t.Errorf("Parse(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
			}
			continue
		}
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tt.reason) {
			t.Errorf("Parse(%q) error = %v; want reason containing %q", tt.in, err, tt.reason)
		}
	}
}

func TestErrorTruncatesLongInput(t *testing.T) {
	_, err := Parse(strings.Repeat("1", 10000))
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("error for a long input is %d bytes: %v", len(err.Error()), err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "2001:db8::/32", "10.0.0.1/8", "1.2.3.4/33", "::ffff:1.2.3.4/128", "a/b", "/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			if p.IsValid() {
				t.Fatalf("error with a valid prefix: %q", s)
			}
			return
		}
		// Whatever is accepted is canonical and round-trips.
		if p != p.Masked() {
			t.Fatalf("%q accepted with host bits set", s)
		}
		q, err := Parse(p.String())
		if err != nil || q != p {
			t.Fatalf("%q → %s does not round-trip: %v", s, p, err)
		}
		if want, err := netip.ParsePrefix(s); err != nil || want != p {
			// Parse may be stricter than netip (leading zeros in the length),
			// never looser.
			t.Fatalf("%q accepted but netip.ParsePrefix says %v, %v", s, want, err)
		}
	})
}
