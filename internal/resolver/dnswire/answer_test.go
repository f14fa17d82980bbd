package dnswire_test

import (
	"encoding/binary"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// response packs an answer to qname/qtype with the given records, compressed
// as a real server would send it.
func response(t testing.TB, qname string, qtype uint16, rcode int, answer, ns []dns.RR, opts ...func(*dns.Msg)) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.Response, m.RecursionAvailable = true, true
	m.Rcode = rcode
	m.Answer, m.Ns = answer, ns
	for _, o := range opts {
		o(m)
	}
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestScanAnswer(t *testing.T) {
	soa := "example.com. 900 IN SOA ns1.example.com. hostmaster.example.com. 1 7200 900 1209600 300"
	tests := []struct {
		name        string
		msg         []byte
		rcode       int
		records     int
		minTTL      uint32
		hasSOA      bool
		negativeTTL uint32
		hasOPT      bool
	}{
		{
			name: "CNAME chain, minimum over records",
			msg: response(t, "www.example.com.", dns.TypeA, dns.RcodeSuccess, []dns.RR{
				mustRR(t, "www.example.com. 3600 IN CNAME web.example.com."),
				mustRR(t, "web.example.com. 120 IN A 192.0.2.1"),
				mustRR(t, "web.example.com. 240 IN A 192.0.2.2"),
			}, nil),
			rcode: 0, records: 3, minTTL: 120,
		},
		{
			name:  "NXDOMAIN with SOA",
			msg:   response(t, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{mustRR(t, soa)}),
			rcode: 3, records: 1, minTTL: 900, hasSOA: true, negativeTTL: 300,
		},
		{
			name:  "NODATA, SOA TTL below MINIMUM",
			msg:   response(t, "example.com.", dns.TypeAAAA, dns.RcodeSuccess, nil, []dns.RR{mustRR(t, "example.com. 60 IN SOA a. b. 1 2 3 4 300")}),
			rcode: 0, records: 1, minTTL: 60, hasSOA: true, negativeTTL: 60,
		},
		{
			name: "OPT is not a record with a TTL, and carries the extended rcode",
			msg: response(t, "example.com.", dns.TypeA, dns.RcodeBadVers, nil, nil, func(m *dns.Msg) {
				m.SetEdns0(1232, true)
			}),
			rcode: dns.RcodeBadVers, records: 0, minTTL: 0, hasOPT: true,
		},
		{
			name: "TTL with the top bit set counts as 0",
			msg: response(t, "example.com.", dns.TypeA, dns.RcodeSuccess, []dns.RR{
				mustRR(t, "example.com. 2147483648 IN A 192.0.2.1"),
			}, nil),
			rcode: 0, records: 1, minTTL: 0,
		},
		{
			name:  "empty SERVFAIL",
			msg:   response(t, "example.com.", dns.TypeA, dns.RcodeServerFailure, nil, nil),
			rcode: dns.RcodeServerFailure,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, offs, err := dnswire.ScanAnswer(tt.msg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if info.Rcode != tt.rcode || info.Records != tt.records || info.MinTTL != tt.minTTL ||
				info.HasSOA != tt.hasSOA || info.NegativeTTL() != tt.negativeTTL || info.HasOPT != tt.hasOPT {
				t.Errorf("info %+v", info)
			}
			if len(offs) != tt.records {
				t.Errorf("%d offsets for %d records", len(offs), tt.records)
			}
			// Each offset is where miekg/dns read that record's TTL from.
			var m dns.Msg
			if err := m.Unpack(tt.msg); err != nil {
				t.Fatal(err)
			}
			var ttls []uint32
			for _, rr := range append(append(m.Answer, m.Ns...), m.Extra...) {
				if rr.Header().Rrtype != dns.TypeOPT {
					ttls = append(ttls, rr.Header().Ttl)
				}
			}
			for i, o := range offs {
				if got := binary.BigEndian.Uint32(tt.msg[o:]); got != ttls[i] {
					t.Errorf("offset %d reads %d, miekg %d", o, got, ttls[i])
				}
			}
		})
	}
}

func TestScanAnswerRejects(t *testing.T) {
	good := response(t, "example.com.", dns.TypeA, 0, []dns.RR{mustRR(t, "example.com. 60 IN A 192.0.2.1")}, nil)
	tests := map[string][]byte{
		"short":           good[:5],
		"cut in a record": good[:len(good)-2],
		"trailing bytes":  append(append([]byte{}, good...), 0),
		"OPT in the answer section": response(t, "example.com.", dns.TypeA, 0, []dns.RR{
			&dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 512}},
		}, nil),
		"SOA with short RDATA": func() []byte {
			b := response(t, "example.com.", dns.TypeA, 3, nil, []dns.RR{mustRR(t, "example.com. 60 IN SOA a. b. 1 2 3 4 5")})
			// Shorten the RDLENGTH by 4 and drop the last 4 bytes: MINIMUM missing.
			rdlen := binary.BigEndian.Uint16(b[len(b)-22-2:])
			binary.BigEndian.PutUint16(b[len(b)-22-2:], rdlen-4)
			return b[:len(b)-4]
		}(),
	}
	for name, msg := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, err := dnswire.ScanAnswer(msg, nil); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestClampTTLs(t *testing.T) {
	msg := response(t, "example.com.", dns.TypeA, 0, []dns.RR{
		mustRR(t, "example.com. 100 IN A 192.0.2.1"),
		mustRR(t, "example.com. 5 IN A 192.0.2.2"),
		mustRR(t, "example.com. 90000 IN A 192.0.2.3"),
	}, nil, func(m *dns.Msg) { m.SetEdns0(1232, true) })
	_, offs, err := dnswire.ScanAnswer(msg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dnswire.ClampTTLs(msg, offs, 86400)
	var m dns.Msg
	if err := m.Unpack(msg); err != nil {
		t.Fatal(err)
	}
	want := []uint32{100, 5, 86400}
	for i, rr := range m.Answer {
		if rr.Header().Ttl != want[i] {
			t.Errorf("record %d TTL %d, want %d", i, rr.Header().Ttl, want[i])
		}
	}
	if opt := m.IsEdns0(); opt == nil || !opt.Do() || opt.UDPSize() != 1232 {
		t.Errorf("OPT was touched: %v", opt)
	}
}
