package dnssec_test

import (
	"encoding/base64"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
)

// TestKeyTag: dnssec.KeyTag agrees with miekg/dns's KeyTag for keys of
// every algorithm the validator checks (generated), RSA/MD5, a key too
// large for its buffer and keys that are not base64.
func TestKeyTag(t *testing.T) {
	var keys []*dns.DNSKEY
	for _, alg := range []struct {
		a    uint8
		bits int
	}{{dns.RSASHA256, 1024}, {dns.RSASHA256, 2048}, {dns.RSASHA512, 4096}, {dns.ECDSAP256SHA256, 256},
		{dns.ECDSAP384SHA384, 384}, {dns.ED25519, 256}} {
		for _, flags := range []uint16{256, 257} {
			k := &dns.DNSKEY{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeDNSKEY, Class: dns.ClassINET},
				Flags: flags, Protocol: 3, Algorithm: alg.a}
			if _, err := k.Generate(alg.bits); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
	}
	big := make([]byte, 1000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, pk := range []string{base64.StdEncoding.EncodeToString(big), "not base64!", "", "AwEAAQ==", "AwEAAQ"} {
		for _, alg := range []uint8{dns.RSAMD5, dns.RSASHA256} {
			keys = append(keys, &dns.DNSKEY{Flags: 257, Protocol: 3, Algorithm: alg, PublicKey: pk})
		}
	}
	for _, k := range keys {
		if got, want := dnssec.KeyTag(k), k.KeyTag(); got != want {
			t.Errorf("KeyTag(alg %d flags %d key %.20q…) = %d, miekg/dns says %d", k.Algorithm, k.Flags, k.PublicKey, got, want)
		}
	}
}

// FuzzKeyTag: for any flags, protocol, algorithm and key text,
// dnssec.KeyTag is miekg/dns's KeyTag.
func FuzzKeyTag(f *testing.F) {
	f.Add(uint16(257), uint8(3), uint8(13), "mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==")
	f.Add(uint16(256), uint8(3), uint8(1), "AwEAAQ==")
	f.Add(uint16(0), uint8(0), uint8(8), "!!")
	f.Fuzz(func(t *testing.T, flags uint16, proto, alg uint8, pk string) {
		k := &dns.DNSKEY{Flags: flags, Protocol: proto, Algorithm: alg, PublicKey: pk}
		if got, want := dnssec.KeyTag(k), k.KeyTag(); got != want {
			t.Fatalf("KeyTag(%d %d %d %q) = %d, miekg/dns says %d", flags, proto, alg, pk, got, want)
		}
	})
}
