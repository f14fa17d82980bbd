package dnssec

import (
	"slices"
	"testing"

	"github.com/miekg/dns"
)

// TestNSEC3Hash: nsec3Hash gives dns.HashName's hash for names in any
// case, salts of any length (none included), iterations 0 to 150, and ""
// where HashName fails (a salt that is not hex, an algorithm other than
// SHA-1).
func TestNSEC3Hash(t *testing.T) {
	names := []string{".", "example.", "Example.", "a.b.example.", "*.nsec3.test.", `a\.b.example.`, "xn--bcher-kva.example.",
		"f1-2.nsec3.test.", "0123456789012345678901234567890123456789012345678901234567890ab.example."}
	salts := []string{"", "AB", "ab", "aabbccdd", "0123456789ABCDEF0123456789abcdef"}
	for _, n := range names {
		for _, s := range salts {
			for _, it := range []uint16{0, 1, 10, 150} {
				if got, want := nsec3Hash(n, dns.SHA1, it, s), dns.HashName(n, dns.SHA1, it, s); got != want || got == "" {
					t.Errorf("%s salt %q iterations %d: %q, HashName %q", n, s, it, got, want)
				}
			}
		}
	}
	for _, bad := range []struct {
		alg  uint8
		salt string
	}{{dns.SHA1, "ABC"}, {dns.SHA1, "zz"}, {2, "AB"}} {
		if got := nsec3Hash("example.", bad.alg, 1, bad.salt); got != "" {
			t.Errorf("algorithm %d salt %q: %q, want none", bad.alg, bad.salt, got)
		}
	}
}

// TestLabelOffsets: labelOffsets agrees with dns.Split, escaped dots
// included.
func TestLabelOffsets(t *testing.T) {
	for _, n := range []string{".", "a.", "a.b.", "www.example.com.", `a\.b.c.`, `a\\.b.`, "*.x.y."} {
		if got, want := labelOffsets(nil, n), dns.Split(n); !slices.Equal(got, want) {
			t.Errorf("%s: %v, dns.Split %v", n, got, want)
		}
	}
}

// FuzzFingerprintData: two records whose encodings for the fingerprint
// (appendRdata, or the packed data of other types) are equal pack to the
// same wire data: a fingerprint match is never two different data.
// Records are made from the fuzzer's text of an SOA, NSEC, NSEC3, A, NS or
// CNAME record each.
func FuzzFingerprintData(f *testing.F) {
	f.Add("ns.example. h.example. 1 2 3 4 5", "ns.example. h.example. 1 2 3 4 5")
	f.Add("1 0 1 AB 2VPTU5TIMAMQTTGL4LUU9KG21E0AOR3S A RRSIG", "1 0 1 ab 2vptu5timamqttgl4luu9kg21e0aor3s A RRSIG")
	f.Add("a.example. A NSEC RRSIG", "A.example. A NSEC RRSIG")
	f.Add("192.0.2.1", "192.0.2.01")
	f.Add("www.example.", "WWW.example.")
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, typ := range []string{"SOA", "NSEC3", "NSEC", "A", "NS", "CNAME"} {
			ra, errA := dns.NewRR("x.example. 300 IN " + typ + " " + a)
			rb, errB := dns.NewRR("x.example. 300 IN " + typ + " " + b)
			if errA != nil || errB != nil || ra == nil || rb == nil {
				continue
			}
			ea, okA := appendRdata(nil, ra)
			eb, okB := appendRdata(nil, rb)
			if !okA || !okB || string(ea) != string(eb) {
				continue
			}
			wa, errA := packRdata(ra)
			wb, errB := packRdata(rb)
			if errA != nil || errB != nil {
				// A record miekg/dns cannot pack fails to verify: no
				// fingerprint of it is ever stored.
				continue
			}
			if string(wa) != string(wb) {
				t.Fatalf("%s: equal encodings, different data: %q %q", typ, ra, rb)
			}
		}
	})
}

func packRdata(rr dns.RR) ([]byte, error) {
	buf := make([]byte, dns.Len(rr)+1)
	end, err := dns.PackRR(rr, buf, 0, nil, false)
	if err != nil {
		return nil, err
	}
	return buf[wireNameLen(rr.Header().Name)+10 : end], nil
}
