package dnswire_test

import (
	"bytes"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

func TestAppendError(t *testing.T) {
	tests := []struct {
		name    string
		pkt     []byte
		rcode   int
		wantOPT bool
		wantQ   bool
	}{
		{"SERVFAIL without EDNS", query(t, "Example.com.", dns.TypeA), dns.RcodeServerFailure, false, true},
		{"REFUSED with EDNS and DO", query(t, "Example.com.", dns.TypeA, withEDNS(4096, true)), dns.RcodeRefused, true, true},
		{"FORMERR", query(t, "example.com.", dns.TypeA, withEDNS(1232, false)), dns.RcodeFormatError, true, true},
		{"NOTIMP", query(t, "example.com.", dns.TypeA), dns.RcodeNotImplemented, false, true},
		{"BADVERS", query(t, "example.com.", dns.TypeA, withEDNS(1232, false), func(m *dns.Msg) {
			m.IsEdns0().SetVersion(2)
		}), dns.RcodeBadVers, true, true},
		{"FORMERR for a header-only parse", cat(header(7, 0x0110, 0, 0, 0, 0)), dns.RcodeFormatError, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := parseQuery(tt.pkt)
			buf := make([]byte, 0, dnswire.MaxReplyLen)
			out := dnswire.AppendError(buf, &q, tt.rcode, 1232)
			if &out[0] != &buf[:1][0] {
				t.Error("AppendError grew a buffer of MaxReplyLen")
			}
			var m dns.Msg
			if err := m.Unpack(out); err != nil {
				t.Fatalf("miekg/dns cannot read the reply: %v", err)
			}
			if m.Id != q.ID || !m.Response || m.Rcode != tt.rcode || !m.RecursionAvailable {
				t.Errorf("header %+v", m.MsgHdr)
			}
			if m.RecursionDesired != q.Flags.Has(dnswire.FlagRD) || m.CheckingDisabled != q.Flags.Has(dnswire.FlagCD) {
				t.Errorf("RD/CD not echoed: %+v", m.MsgHdr)
			}
			if (len(m.Question) == 1) != tt.wantQ {
				t.Fatalf("question %v", m.Question)
			}
			if tt.wantQ && !bytes.Equal(out[12:12+len(q.RawName())], q.RawName()) {
				t.Errorf("question case not echoed: %q", out[12:])
			}
			opt := m.IsEdns0()
			if (opt != nil) != tt.wantOPT {
				t.Fatalf("OPT %v", opt)
			}
			if opt != nil && (opt.UDPSize() != 1232 || opt.Do() != q.EDNS.DO || opt.Version() != 0) {
				t.Errorf("OPT %v", opt)
			}
		})
	}
}

func TestPatchHeaderAndCase(t *testing.T) {
	cached := new(dns.Msg)
	cached.SetQuestion("example.com.", dns.TypeA)
	cached.Id = 1
	cached.Response, cached.RecursionDesired = true, true
	cached.Answer = []dns.RR{mustRR(t, "example.com. 60 IN A 192.0.2.1")}
	msg, err := cached.Pack()
	if err != nil {
		t.Fatal(err)
	}

	q, err := parseQuery(query(t, "eXaMpLe.CoM.", dns.TypeA, func(m *dns.Msg) {
		m.Id, m.RecursionDesired = 0x4242, false
	}))
	if err != nil {
		t.Fatal(err)
	}
	dnswire.PatchHeader(msg, &q)
	if !dnswire.CopyQuestionCase(msg, q.RawName()) {
		t.Fatal("CopyQuestionCase refused a matching name")
	}

	var m dns.Msg
	if err := m.Unpack(msg); err != nil {
		t.Fatal(err)
	}
	if m.Id != 0x4242 || m.RecursionDesired || m.Truncated || !m.Response {
		t.Errorf("header %+v", m.MsgHdr)
	}
	if m.Question[0].Name != "eXaMpLe.CoM." {
		t.Errorf("question %q", m.Question[0].Name)
	}

	if dnswire.CopyQuestionCase(msg, wire("example", "org")) {
		t.Error("CopyQuestionCase accepted another name")
	}
}
