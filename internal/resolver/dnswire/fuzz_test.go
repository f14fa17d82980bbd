package dnswire_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

func seedQueries(f *testing.F) {
	f.Add(query(f, "www.Example.com.", dns.TypeA))
	f.Add(query(f, ".", dns.TypeNS, withEDNS(4096, true)))
	f.Add(query(f, "example.com.", dns.TypeAAAA,
		withOption(&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}),
		withOption(&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{192, 0, 2, 0}}),
		withOption(&dns.EDNS0_NSID{Code: dns.EDNS0NSID}),
		withOption(&dns.EDNS0_PADDING{Padding: make([]byte, 8)})))
	f.Add(query(f, "a.b.c.", dns.TypeTXT, withEDNS(1232, false), func(m *dns.Msg) {
		m.IsEdns0().SetVersion(1)
		m.CheckingDisabled = true
	}))
	f.Add(cat(header(1, 0x0100, 1, 0, 0, 2), wire("example", "com"), []byte{0, 1, 0, 1},
		[]byte{0xC0, 12, 0, 16, 0, 1, 0, 0, 0, 60, 0, 2, 1, 'x'},
		[]byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0}))
	f.Add(cat(header(1, 0, 1, 0, 0, 0), []byte{3, 'w', 'w', 'w', 0xC0, 12, 0, 1, 0, 1}))
	f.Add([]byte{})
}

// FuzzParseQuery checks that (*Query).Parse never panics, that what it accepts
// is self-consistent, that the replies built from it are valid DNS, and,
// whenever miekg/dns also accepts the packet, that both read the same header,
// question and EDNS fields.
func FuzzParseQuery(f *testing.F) {
	seedQueries(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := parseQuery(b)
		if err != nil {
			var pe dnswire.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T", err)
			}
			if !pe.Drop() {
				checkReply(t, &q, dnswire.AppendError(nil, &q, pe.Rcode(), 1232), pe.Rcode())
			}
			return
		}
		name, raw := q.Name(), q.RawName()
		if len(name) == 0 || len(name) > dnswire.MaxNameLen || !dnswire.IsLowerName(name) ||
			!dnswire.EqualFoldName(name, raw) || name[len(name)-1] != 0 {
			t.Fatalf("name %q raw %q", name, raw)
		}
		if q.Len() > len(b) || q.Len() < dnswire.HeaderLen+len(name)+4 {
			t.Fatalf("Len %d of %d", q.Len(), len(b))
		}
		checkReply(t, &q, dnswire.AppendError(nil, &q, dnswire.RcodeBadVers, 1232), dnswire.RcodeBadVers)

		var m dns.Msg
		if m.Unpack(b) != nil {
			return // miekg/dns also checks RDATA (an ECS address, say) that a recursor's fast path need not
		}
		if m.Id != q.ID || m.Response || m.Opcode != 0 ||
			m.Authoritative != q.Flags.Has(dnswire.FlagAA) || m.Truncated != q.Flags.Has(dnswire.FlagTC) ||
			m.RecursionDesired != q.Flags.Has(dnswire.FlagRD) || m.RecursionAvailable != q.Flags.Has(dnswire.FlagRA) ||
			m.Zero != q.Flags.Has(dnswire.FlagZ) || m.AuthenticatedData != q.Flags.Has(dnswire.FlagAD) ||
			m.CheckingDisabled != q.Flags.Has(dnswire.FlagCD) {
			t.Fatalf("header: miekg %+v, ours id %x flags %016b", m.MsgHdr, q.ID, q.Flags)
		}
		wantRcode := q.Flags.Rcode() | int(q.EDNS.ExtRcode)<<4
		if m.Rcode != wantRcode {
			t.Fatalf("rcode: miekg %d, ours %d", m.Rcode, wantRcode)
		}
		if len(m.Question) != 1 || len(m.Answer) != 0 || len(m.Ns) != 0 {
			t.Fatalf("sections: miekg %v", &m)
		}
		mq := m.Question[0]
		if text := string(dnswire.AppendNameText(nil, raw)); mq.Name != text || mq.Qtype != q.QType || mq.Qclass != q.QClass {
			t.Fatalf("question: miekg %v, ours %q %d %d", mq, text, q.QType, q.QClass)
		}
		opt := m.IsEdns0()
		if (opt != nil) != q.EDNS.Present {
			t.Fatalf("EDNS: miekg %v, ours %+v", opt, q.EDNS)
		}
		if opt == nil {
			return
		}
		if opt.UDPSize() != q.EDNS.UDPSize || opt.Do() != q.EDNS.DO || opt.Version() != q.EDNS.Version ||
			opt.Z() != q.EDNS.Z&0x3FFF || opt.Co() != (q.EDNS.Z&0x4000 != 0) {
			t.Fatalf("EDNS: miekg %v, ours %+v", opt, q.EDNS)
		}
		var seen dnswire.Options
		for _, o := range opt.Option {
			seen |= optionBit(o.Option())
		}
		if seen != q.EDNS.Options {
			t.Fatalf("options: miekg %b, ours %b", seen, q.EDNS.Options)
		}
	})
}

func optionBit(code uint16) dnswire.Options {
	switch code {
	case dnswire.OptionNSID:
		return dnswire.OptNSID
	case dnswire.OptionECS:
		return dnswire.OptECS
	case dnswire.OptionExpire:
		return dnswire.OptExpire
	case dnswire.OptionCookie:
		return dnswire.OptCookie
	case dnswire.OptionKeepalive:
		return dnswire.OptKeepalive
	case dnswire.OptionPadding:
		return dnswire.OptPadding
	case dnswire.OptionEDE:
		return dnswire.OptEDE
	}
	return dnswire.OptUnknown
}

// checkReply unpacks a reply built from q with miekg/dns and checks the
// fields every reply must get right.
func checkReply(t *testing.T, q *dnswire.Query, reply []byte, rcode int) {
	t.Helper()
	if len(reply) > dnswire.MaxReplyLen {
		t.Fatalf("reply of %d bytes", len(reply))
	}
	var m dns.Msg
	if err := m.Unpack(reply); err != nil {
		t.Fatalf("reply does not unpack: %v (%x)", err, reply)
	}
	if !q.EDNS.Present {
		rcode &= 0xF
	}
	if m.Id != q.ID || !m.Response || m.Rcode != rcode || (len(m.Question) == 1) != q.HasQuestion() ||
		(m.IsEdns0() != nil) != q.EDNS.Present {
		t.Fatalf("reply %v for query %+v", &m, q)
	}
}

func seedAnswers(f *testing.F) {
	soa := mustRR(f, "example.com. 900 IN SOA ns1.example.com. hostmaster.example.com. 1 7200 900 1209600 300")
	f.Add(response(f, "www.example.com.", dns.TypeA, 0, []dns.RR{
		mustRR(f, "www.example.com. 3600 IN CNAME web.example.com."),
		mustRR(f, "web.example.com. 120 IN A 192.0.2.1"),
	}, []dns.RR{mustRR(f, "example.com. 60 IN NS ns1.example.com.")}, func(m *dns.Msg) { m.SetEdns0(1232, true) }))
	f.Add(response(f, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa}))
	f.Add(response(f, "example.com.", dns.TypeMX, 0, []dns.RR{mustRR(f, "example.com. 60 IN MX 10 mail.example.com.")}, nil))
}

// FuzzScanAnswer checks that ScanAnswer and ClampTTLs never panic
// or write outside the message, and that the TTL offsets point where
// miekg/dns reads each record's TTL.
func FuzzScanAnswer(f *testing.F) {
	seedAnswers(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		info, offs, err := dnswire.ScanAnswer(b, nil)
		if err != nil {
			return
		}
		if len(offs) != info.Records {
			t.Fatalf("%d offsets, %d records", len(offs), info.Records)
		}
		n := len(b)
		dnswire.ClampTTLs(b, offs, 3600)
		if len(b) != n {
			t.Fatal("length changed")
		}
		var m dns.Msg
		if m.Unpack(b) != nil {
			return
		}
		i := 0
		for _, rr := range append(append(m.Answer, m.Ns...), m.Extra...) {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			if i >= len(offs) {
				t.Fatalf("miekg/dns read more records than ScanAnswer")
			}
			if got := binary.BigEndian.Uint32(b[offs[i]:]); got != rr.Header().Ttl || got > 3600 {
				t.Fatalf("record %d: TTL at offset %d is %d, miekg %d", i, offs[i], got, rr.Header().Ttl)
			}
			i++
		}
		if i != len(offs) {
			t.Fatalf("miekg/dns read %d records, ScanAnswer %d", i, len(offs))
		}
	})
}
