package recursor

import (
	"testing"

	"github.com/miekg/dns"
)

// referencePack is the query as ask built it before packQuery: a dns.Msg
// packed by miekg/dns.
func referencePack(id uint16, rd bool, want dns.Question, edns bool, udpSize uint16, do bool) ([]byte, error) {
	m := new(dns.Msg)
	m.Id = id
	m.RecursionDesired = rd
	m.Question = []dns.Question{want}
	if edns {
		m.SetEdns0(udpSize, do)
	}
	return m.Pack()
}

// TestPackQuery: packQuery writes what miekg/dns packs for the same
// query, with and without EDNS, DO and RD, for names in random case,
// escaped and the root.
func TestPackQuery(t *testing.T) {
	for _, name := range []string{"www.example.com.", "WwW.ExAmPlE.cOm.", `a\.b\032c.\\x.`, ".", "f1-2.nsec3.test."} {
		for bits := range 8 {
			rd, edns, do := bits&1 != 0, bits&2 != 0, bits&4 != 0
			q := dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}
			got, err := packQuery(0xbeef, rd, q, edns, 1232, do)
			want, werr := referencePack(0xbeef, rd, q, edns, 1232, do)
			if err != nil || werr != nil || string(got) != string(want) {
				t.Errorf("%s rd %v edns %v do %v: err %v/%v\n got %x\nwant %x", name, rd, edns, do, err, werr, got, want)
			}
		}
	}
}

// FuzzPackQuery: for any name, type, id, size and flags, packQuery writes
// what miekg/dns packs, or fails where it fails.
func FuzzPackQuery(f *testing.F) {
	f.Add("www.example.com.", uint16(dns.TypeA), uint16(1), uint16(1232), uint8(7))
	f.Add(`a\.b\032c.\\x.`, uint16(dns.TypeTXT), uint16(65535), uint16(512), uint8(2))
	f.Add(".", uint16(dns.TypeNS), uint16(0), uint16(4096), uint8(0))
	f.Add("no-dot", uint16(dns.TypeA), uint16(7), uint16(1232), uint8(3))
	f.Add("a..b.", uint16(dns.TypeA), uint16(7), uint16(1232), uint8(3))
	f.Fuzz(func(t *testing.T, name string, qtype, id, udpSize uint16, bits uint8) {
		rd, edns, do := bits&1 != 0, bits&2 != 0, bits&4 != 0
		q := dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}
		got, err := packQuery(id, rd, q, edns, udpSize, do)
		want, werr := referencePack(id, rd, q, edns, udpSize, do)
		if (err != nil) != (werr != nil) {
			t.Fatalf("name %q: packQuery err %v, miekg/dns err %v", name, err, werr)
		}
		if err == nil && string(got) != string(want) {
			t.Fatalf("name %q:\n got %x\nwant %x", name, got, want)
		}
	})
}
