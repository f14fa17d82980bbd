package dnswire_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

func BenchmarkParseQuery(b *testing.B) {
	cases := []struct {
		name string
		pkt  []byte
	}{
		{"plain", query(b, "www.Example.com.", dns.TypeA)},
		{"edns-cookie", query(b, "www.Example.com.", dns.TypeA, withEDNS(1232, true),
			withOption(&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}))},
		{"long-name", query(b, "a-rather-long-label.with-several.sub-domains.cdn.example-provider.net.", dns.TypeAAAA, withEDNS(1232, false))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var q dnswire.Query
			b.ReportAllocs()
			defer cpuPerOp(b)()
			b.SetBytes(int64(len(c.pkt)))
			for b.Loop() {
				if err := q.Parse(c.pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// For comparison: what the usual Go server does per packet.
	b.Run("miekg-unpack", func(b *testing.B) {
		pkt := cases[1].pkt
		b.ReportAllocs()
		defer cpuPerOp(b)()
		for b.Loop() {
			var m dns.Msg
			if err := m.Unpack(pkt); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAppendError(b *testing.B) {
	q, err := parseQuery(query(b, "www.example.com.", dns.TypeA, withEDNS(1232, true)))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, dnswire.MaxReplyLen)
	b.ReportAllocs()
	defer cpuPerOp(b)()
	for b.Loop() {
		buf = dnswire.AppendError(buf[:0], &q, dnswire.RcodeRefused, 1232)
	}
}

func BenchmarkScanAnswer(b *testing.B) {
	msg := response(b, "www.example.com.", dns.TypeA, 0, []dns.RR{
		mustRR(b, "www.example.com. 3600 IN CNAME web.example.com."),
		mustRR(b, "web.example.com. 120 IN A 192.0.2.1"),
		mustRR(b, "web.example.com. 120 IN A 192.0.2.2"),
	}, nil, func(m *dns.Msg) { m.SetEdns0(1232, true) })
	offs := make([]uint16, 0, 16)
	b.ReportAllocs()
	defer cpuPerOp(b)()
	for b.Loop() {
		var err error
		if _, offs, err = dnswire.ScanAnswer(msg, offs[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
