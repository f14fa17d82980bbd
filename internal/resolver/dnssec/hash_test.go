package dnssec

import (
	"net"
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
// (appendRdata) are equal pack to the same wire data: a fingerprint match
// is never two different data. Each type's two records are made from the
// fuzzer's fields (a name or salt or hash text, numbers, bytes for an
// address or a type bitmap), not from zone-file text, so that every field
// miekg/dns packs can differ, in case too.
func FuzzFingerprintData(f *testing.F) {
	f.Add("ns.example.", "NS.example.", uint32(1), uint32(1), []byte{192, 0, 2, 1}, []byte{192, 0, 2, 1})
	f.Add("AB", "ab", uint32(1), uint32(1), []byte{0, 1, 0, 46}, []byte{0, 1, 0, 46})
	f.Add("2VPTU5TIMAMQTTGL4LUU9KG21E0AOR3S", "2vptu5timamqttgl4luu9kg21e0aor3s", uint32(0x01000a), uint32(0x01000a), []byte{0, 1}, []byte{0, 1, 0, 1})
	f.Add("a.example.", `a\.example.`, uint32(7), uint32(7), make([]byte, 16), make([]byte, 4))
	f.Fuzz(func(t *testing.T, s1, s2 string, n1, n2 uint32, b1, b2 []byte) {
		types := func(b []byte) []uint16 {
			var out []uint16
			for i := 0; i+1 < len(b); i += 2 {
				out = append(out, uint16(b[i])<<8|uint16(b[i+1]))
			}
			return out
		}
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: "x.example.", Rrtype: t, Class: dns.ClassINET, Ttl: 300}
		}
		build := func(s string, n uint32, b []byte) []dns.RR {
			return []dns.RR{
				&dns.A{Hdr: hdr(dns.TypeA), A: net.IP(b)},
				&dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.IP(b)},
				&dns.NS{Hdr: hdr(dns.TypeNS), Ns: s},
				&dns.CNAME{Hdr: hdr(dns.TypeCNAME), Target: s},
				&dns.SOA{Hdr: hdr(dns.TypeSOA), Ns: s, Mbox: s, Serial: n, Refresh: n >> 1, Retry: n >> 2, Expire: n >> 3, Minttl: n >> 4},
				&dns.NSEC{Hdr: hdr(dns.TypeNSEC), NextDomain: s, TypeBitMap: types(b)},
				&dns.NSEC3{Hdr: hdr(dns.TypeNSEC3), Hash: uint8(n), Flags: uint8(n >> 8), Iterations: uint16(n >> 16),
					SaltLength: uint8(len(s) / 2), Salt: s, HashLength: uint8(n >> 24), NextDomain: s, TypeBitMap: types(b)},
			}
		}
		as, bs := build(s1, n1, b1), build(s2, n2, b2)
		for i := range as {
			ea, okA := appendRdata(nil, as[i])
			eb, okB := appendRdata(nil, bs[i])
			if !okA || !okB || string(ea) != string(eb) {
				continue
			}
			wa, errA := packRdata(as[i])
			wb, errB := packRdata(bs[i])
			if errA != nil || errB != nil {
				// A record miekg/dns cannot pack fails to verify: no
				// fingerprint of it is ever stored.
				continue
			}
			if string(wa) != string(wb) {
				t.Fatalf("%s: equal encodings, different data: %q %q", dns.TypeToString[as[i].Header().Rrtype], as[i], bs[i])
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
