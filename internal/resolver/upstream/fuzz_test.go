package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fuzzSeeds are replies of every kind checkReply tells apart, for the
// question "www.example.com. IN A" with id 0x1234.
func fuzzSeeds(t testing.TB) [][]byte {
	q := new(dns.Msg)
	q.SetQuestion("www.example.com.", dns.TypeA)
	q.Id = 0x1234
	q.SetEdns0(1232, true)
	ok := reply(q, 3)
	tc := reply(q, 0)
	tc.Truncated = true
	other := reply(q, 1)
	other.Id++
	upper := reply(q, 1)
	upper.Question[0].Name = "WWW.EXAMPLE.COM."
	refused := new(dns.Msg)
	refused.SetRcode(q, dns.RcodeRefused)
	refused.Question = nil
	return [][]byte{
		pack(t, ok), pack(t, tc), pack(t, other), pack(t, upper), pack(t, refused), pack(t, q),
		pack(t, ok)[:20], {}, {0x12, 0x34}, []byte("not dns"),
	}
}

// FuzzCheckReply: whatever a forwarder sends, judging it never panics,
// and what it accepts is the answer to our question.
func FuzzCheckReply(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		want := &expected{id: 0x1234, name: "www.example.com.", qtype: dns.TypeA, qclass: dns.ClassINET}
		m, v, caseDiffers := checkReply(pkt, want)
		switch v {
		case replyAnswer:
			if m == nil {
				t.Fatal("answer verdict without a message")
			}
			if m.Id != want.id || !m.Response {
				t.Fatalf("accepted id %d response %v", m.Id, m.Response)
			}
			if len(m.Question) == 0 {
				if !isForwarderFailure(m.Rcode) {
					t.Fatalf("accepted rcode %d without a question", m.Rcode)
				}
				return
			}
			if len(m.Question) != 1 || !equalFoldASCII(m.Question[0].Name, want.name) ||
				m.Question[0].Qtype != want.qtype || m.Question[0].Qclass != want.qclass {
				t.Fatalf("accepted question %v", m.Question)
			}
			if caseDiffers != (m.Question[0].Name != want.name) {
				t.Fatalf("caseDiffers %v for %q", caseDiffers, m.Question[0].Name)
			}
		case replyTruncated, replyParseError, replyUnexpected, replyNearMiss:
			if m != nil {
				t.Fatalf("verdict %d with a message", v)
			}
		default:
			t.Fatalf("verdict %d", v)
		}
	})
}

// FuzzExchange sends the fuzzer's bytes from a real forwarder socket, as
// the first reply to each query (with the query's id written in, to reach
// past the id check), followed by the real answer, over UDP and TCP alike.
// Exchange must never panic, must return within its bound, and what it
// returns must answer the question asked.
func FuzzExchange(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	var mu sync.Mutex
	var payload []byte
	respond := func(q *dns.Msg, raw []byte) [][]byte {
		mu.Lock()
		p := append([]byte(nil), payload...)
		mu.Unlock()
		if len(p) >= 2 {
			copy(p, raw[:2])
		}
		return [][]byte{p, wire(reply(q, 1))}
	}
	fwd := startFake(f, "127.0.0.1", respond)
	fwd.serveTCP(respond, false)
	c, _ := newClient(f, Config{Timeout: 200 * time.Millisecond, MaxTime: 500 * time.Millisecond}, fwd.addr)

	f.Fuzz(func(t *testing.T, data []byte) {
		mu.Lock()
		payload = data
		mu.Unlock()
		q := question("www.Example.com.", dns.TypeA)
		start := time.Now()
		ans, err := c.Exchange(context.Background(), q)
		if elapsed := time.Since(start); elapsed > generous {
			t.Fatalf("Exchange took %v", elapsed)
		}
		if err != nil {
			// Only a failure rcode in the fuzzer's packet (taken as the
			// forwarder's word) or its dropping the real answer (as
			// spoofed, truncated over TCP) may fail the query.
			if !errors.Is(err, ErrAllFailed) {
				t.Fatalf("Exchange: %v", err)
			}
			return
		}
		if ans.Id != q.Id || len(ans.Question) != 1 || ans.Question[0] != q.Question[0] {
			t.Fatalf("answer %v to query %v", ans, q)
		}
		if binary.BigEndian.Uint16(pack(t, ans)) != q.Id {
			t.Fatal("packed answer id differs")
		}
	})
}

// referenceQuery is what appendQuery replaced: the message built as a
// dns.Msg and packed by miekg/dns. appendQuery must write the same bytes.
func referenceQuery(q *dns.Msg, udpSize uint16, rd bool) ([]byte, error) {
	out := &dns.Msg{
		MsgHdr: dns.MsgHdr{
			Opcode:            dns.OpcodeQuery,
			RecursionDesired:  rd,
			CheckingDisabled:  q.CheckingDisabled,
			AuthenticatedData: q.AuthenticatedData,
		},
		Question: []dns.Question{q.Question[0]},
	}
	do := false
	if opt := q.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	out.SetEdns0(udpSize, do)
	return out.Pack()
}

// FuzzAppendQuery: for any question name, type, class and flags,
// appendQuery writes what miekg/dns packs for the same message, or fails
// where it fails.
func FuzzAppendQuery(f *testing.F) {
	f.Add("www.example.com.", uint16(dns.TypeA), uint16(dns.ClassINET), uint16(1232), uint8(0))
	f.Add("WwW.ExAmPlE.cOm.", uint16(dns.TypeAAAA), uint16(dns.ClassINET), uint16(4096), uint8(7))
	f.Add(`a\.b\032c.\\x.`, uint16(dns.TypeTXT), uint16(dns.ClassCHAOS), uint16(512), uint8(2))
	f.Add(".", uint16(dns.TypeNS), uint16(dns.ClassINET), uint16(1232), uint8(1))
	f.Add("corp.example.", uint16(dns.TypeSOA), uint16(dns.ClassINET), uint16(1232), uint8(16))
	f.Add("no-dot", uint16(dns.TypeA), uint16(dns.ClassINET), uint16(1232), uint8(0))
	f.Add("a..b.", uint16(dns.TypeA), uint16(dns.ClassINET), uint16(1232), uint8(0))
	f.Fuzz(func(t *testing.T, name string, qtype, qclass, udpSize uint16, bits uint8) {
		q := new(dns.Msg)
		q.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: qclass}}
		q.AuthenticatedData, q.CheckingDisabled = bits&1 != 0, bits&2 != 0
		if bits&4 != 0 {
			q.SetEdns0(4096, bits&8 != 0)
		}
		rd := bits&16 == 0 // RD unless the client is an authoritative zone's
		want, wantErr := referenceQuery(q, udpSize, rd)
		got, err := appendQuery(make([]byte, queryArea-2), q, udpSize, rd)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("name %q: appendQuery err %v, miekg/dns err %v", name, err, wantErr)
		}
		if err == nil && string(got) != string(want) {
			t.Fatalf("name %q:\n got %x\nwant %x", name, got, want)
		}
	})
}
