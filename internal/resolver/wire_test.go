package resolver_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

const (
	badID  = 0xbad1
	goodID = 0x600d
)

// badQuery is a malformed or unanswerable packet and what it must get.
type badQuery struct {
	name  string
	pkt   []byte
	rcode int               // the reply's rcode; -1: no reply (UDP dropped, TCP closed)
	moved map[string]uint64 // statistics and how much the packet moves them
}

// badStats are the statistics a bad query may move.
var badStats = []string{"client-parse-errors", "ignored-packets", "questions"}

var parseError = map[string]uint64{"client-parse-errors": 1, "ignored-packets": 0, "questions": 0}

var ignored = map[string]uint64{"client-parse-errors": 0, "ignored-packets": 1, "questions": 0}

// unpackError is what a query moves that dnswire accepts (a question) and
// miekg/dns cannot unpack (a parse error).
var unpackError = map[string]uint64{"client-parse-errors": 1, "ignored-packets": 0, "questions": 1}

func badQueries(t testing.TB) []badQuery {
	base := func(edns bool) *dns.Msg {
		var m *dns.Msg
		if edns {
			m = query("www.example.test", dns.TypeA, 1232, false)
		} else {
			m = query("www.example.test", dns.TypeA, 0, false)
		}
		m.Id = badID
		return m
	}
	with := func(edns bool, f func(m *dns.Msg)) []byte {
		m := base(edns)
		f(m)
		return mustPack(t, m)
	}
	header := func(qd, ar uint16) []byte {
		h := []byte{badID >> 8, badID & 0xff, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(h[4:], qd)
		binary.BigEndian.PutUint16(h[10:], ar)
		return h
	}
	qr := mustPack(t, base(true))
	qr[2] |= 0x80
	cut := mustPack(t, base(false))
	cut = cut[:len(cut)-2]
	compressed := append(header(1, 0), 1, 'a', 0xc0, 12, 0, 1, 0, 1)
	// A question, then an OPT whose one option claims 100 bytes of data
	// that RDLENGTH does not hold.
	overrun := append(header(1, 1), 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
		0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 4, 0, 10, 0, 100)
	// Queries dnswire accepts (it skips records and options it does not
	// read) and miekg/dns cannot unpack: an ECS option of family 3, one
	// with a source prefix of 200 bits, an empty one, a TSIG record cut
	// after its algorithm name.
	ecs := func(data ...byte) []byte {
		return with(true, func(m *dns.Msg) {
			m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: dns.EDNS0SUBNET, Data: data}}
		})
	}
	tsig := with(true, func(m *dns.Msg) {
		m.Extra = append(m.Extra, &dns.RFC3597{Hdr: dns.RR_Header{Name: "key.", Rrtype: dns.TypeTSIG, Class: dns.ClassANY},
			Rdata: hex.EncodeToString(append([]byte("\x0bhmac-sha256\x00"), 0, 0))})
	})
	secondOPT := func(m *dns.Msg) {
		o := new(dns.OPT)
		o.Hdr = dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}
		o.SetUDPSize(1232)
		m.Extra = append(m.Extra, o)
	}
	return []badQuery{
		{"short header", []byte{badID >> 8, badID & 0xff, 1, 0, 0}, -1, parseError},
		{"QR set", qr, -1, ignored},
		{"opcode NOTIFY", with(true, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), dns.RcodeNotImplemented, ignored},
		{"opcode UPDATE", with(false, func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate }), dns.RcodeNotImplemented, ignored},
		{"opcode IQUERY", with(false, func(m *dns.Msg) { m.Opcode = dns.OpcodeIQuery }), dns.RcodeNotImplemented, ignored},
		{"QDCOUNT 2", with(true, func(m *dns.Msg) {
			m.Question = append(m.Question, dns.Question{Name: "two.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
		}), dns.RcodeFormatError, parseError},
		{"QDCOUNT 0", with(true, func(m *dns.Msg) { m.Question = nil }), dns.RcodeFormatError, parseError},
		{"answer section in a query", with(false, func(m *dns.Msg) {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "x.test.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: upstreamA}}
		}), dns.RcodeFormatError, parseError},
		{"compression pointer in the question", compressed, dns.RcodeFormatError, parseError},
		{"question cut short", cut, dns.RcodeFormatError, parseError},
		{"two OPT records", with(true, secondOPT), dns.RcodeFormatError, parseError},
		{"OPT owner not the root", with(true, func(m *dns.Msg) { m.IsEdns0().Hdr.Name = "test." }), dns.RcodeFormatError, parseError},
		{"OPT option overruns its record", overrun, dns.RcodeFormatError, parseError},
		{"EDNS version 1", with(true, func(m *dns.Msg) { m.IsEdns0().SetVersion(1) }), dns.RcodeBadVers,
			map[string]uint64{"client-parse-errors": 0, "ignored-packets": 0, "questions": 1}},
		{"ECS family 3", ecs(0, 3, 24, 0, 192, 0, 2), dns.RcodeFormatError, unpackError},
		{"ECS source prefix 200", ecs(0, 1, 200, 0, 192, 0, 2, 1), dns.RcodeFormatError, unpackError},
		{"ECS option empty", ecs(), dns.RcodeFormatError, unpackError},
		{"TSIG record cut short", tsig, dns.RcodeFormatError, unpackError},
	}
}

func goodQuery(t testing.TB) []byte {
	m := query("good.test", dns.TypeA, 1232, false)
	m.Id = goodID
	return mustPack(t, m)
}

// checkBadReply checks the reply to a bad query: its id, rcode (with the
// extended bits of an OPT) and that it is a response.
func checkBadReply(t *testing.T, b []byte, want int) {
	t.Helper()
	m := mustUnpack(t, b)
	if m.Id != badID || !m.Response || m.Rcode != want {
		t.Fatalf("reply id %#x response %v rcode %s, want id %#x rcode %s", m.Id, m.Response,
			dns.RcodeToString[m.Rcode], badID, dns.RcodeToString[want])
	}
	if len(m.Answer) != 0 {
		t.Errorf("an error reply with answers: %v", m)
	}
}

// TestMalformedQueriesUDP: each malformed packet gets its bounded outcome
// over UDP — no reply (a packet without a header, a response), FORMERR,
// NOTIMP or BADVERS — counted in client-parse-errors or ignored-packets,
// and the socket goes on answering. A good query follows each: a packet
// that gets a reply gets it before or after the good one's (what only
// miekg/dns refuses is answered on the slow path, the good query may be a
// packet-cache hit), one that gets none leaves the good answer the only
// reply, and nothing else comes.
func TestMalformedQueriesUDP(t *testing.T) {
	e := newEnv(t, nil)
	for _, bq := range badQueries(t) {
		t.Run(bq.name, func(t *testing.T) {
			e := e.with(t)
			c := e.udpClient("")
			before := e.stats(badStats...)
			if _, err := c.Write(bq.pkt); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(goodQuery(t)); err != nil {
				t.Fatal(err)
			}
			var bad, good []byte
			for range 2 {
				r := readUDP(t, c, bound)
				if r == nil {
					break
				}
				if mustUnpack(t, r).Id == goodID {
					good = r
				} else {
					bad = r
				}
				if good != nil && bq.rcode < 0 {
					break // nothing else is due
				}
			}
			if good == nil {
				t.Fatalf("the good query after it: no reply within %v", bound)
			}
			switch {
			case bq.rcode >= 0 && bad == nil:
				t.Fatalf("no reply within %v, want %s", bound, dns.RcodeToString[bq.rcode])
			case bq.rcode >= 0:
				checkBadReply(t, bad, bq.rcode)
			case bad != nil:
				t.Fatalf("want no reply, got %v", mustUnpack(t, bad))
			}
			if m := mustUnpack(t, good); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
				t.Fatalf("want the good query's answer, got %v", m)
			}
			want := map[string]uint64{}
			for k, v := range bq.moved {
				want[k] = v
			}
			want["questions"]++ // the good query
			e.wantMoved(bq.name, before, want)
		})
	}
}

// TestMalformedQueriesTCP: the same packets over TCP. A packet that gets
// no reply closes the connection (as PowerDNS does); the others are
// answered and the connection serves the next query.
func TestMalformedQueriesTCP(t *testing.T) {
	e := newEnv(t, nil)
	for _, bq := range badQueries(t) {
		t.Run(bq.name, func(t *testing.T) {
			e := e.with(t)
			c := e.tcpClient("")
			before := e.stats(badStats...)
			writeTCP(t, c, bq.pkt)
			reply, closed := readTCP(t, c)
			want := map[string]uint64{}
			for k, v := range bq.moved {
				want[k] = v
			}
			if bq.rcode < 0 {
				if !closed {
					t.Fatalf("want the connection closed, got a reply %v", mustUnpack(t, reply))
				}
				e.wantMoved(bq.name, before, want)
				return
			}
			if closed {
				t.Fatal("connection closed, want a reply")
			}
			checkBadReply(t, reply, bq.rcode)
			writeTCP(t, c, goodQuery(t))
			reply, closed = readTCP(t, c)
			if closed {
				t.Fatal("connection closed after the error reply")
			}
			if m := mustUnpack(t, reply); m.Id != goodID || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
				t.Fatalf("want the good query's answer, got %v", m)
			}
			want["questions"]++
			e.wantMoved(bq.name, before, want)
		})
	}
}

// TestOddFlags: queries with unusual but legal flags, EDNS fields, types
// and classes each get a bounded answer, over UDP and TCP, with the id,
// RD, CD and the question echoed.
func TestOddFlags(t *testing.T) {
	e := newEnv(t, nil)
	type oddCase struct {
		name     string
		edit     func(m *dns.Msg)
		rcode    int
		answers  int
		upstream bool // the forwarder is asked
	}
	cases := []oddCase{
		{"RD clear", func(m *dns.Msg) { m.RecursionDesired = false }, dns.RcodeSuccess, 1, true},
		{"CD set", func(m *dns.Msg) { m.CheckingDisabled = true }, dns.RcodeSuccess, 1, true},
		{"AD set", func(m *dns.Msg) { m.AuthenticatedData = true }, dns.RcodeSuccess, 1, true},
		{"AA set", func(m *dns.Msg) { m.Authoritative = true }, dns.RcodeSuccess, 1, true},
		{"TC set", func(m *dns.Msg) { m.Truncated = true }, dns.RcodeSuccess, 1, true},
		{"Z set", func(m *dns.Msg) { m.Zero = true }, dns.RcodeSuccess, 1, true},
		{"RA set", func(m *dns.Msg) { m.RecursionAvailable = true }, dns.RcodeSuccess, 1, true},
		{"EDNS unknown flags", func(m *dns.Msg) { m.IsEdns0().Hdr.Ttl |= 0x7fff }, dns.RcodeSuccess, 1, true},
		{"EDNS unknown option", func(m *dns.Msg) {
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1, 2, 3}})
		}, dns.RcodeSuccess, 1, true},
		{"EDNS cookie", func(m *dns.Msg) {
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
		}, dns.RcodeSuccess, 1, true},
		{"EDNS size 100 (read as 512)", func(m *dns.Msg) { m.IsEdns0().SetUDPSize(100) }, dns.RcodeSuccess, 1, true},
		{"EDNS size 65535", func(m *dns.Msg) { m.IsEdns0().SetUDPSize(65535) }, dns.RcodeSuccess, 1, true},
		{"no EDNS", func(m *dns.Msg) { m.Extra = nil }, dns.RcodeSuccess, 1, true},
		{"qtype ANY", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeANY }, dns.RcodeSuccess, 0, true},
		{"unknown qtype 65280", func(m *dns.Msg) { m.Question[0].Qtype = 65280 }, dns.RcodeSuccess, 0, true},
		{"qtype AXFR", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAXFR }, dns.RcodeServerFailure, 0, false},
		{"qtype IXFR", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeIXFR }, dns.RcodeServerFailure, 0, false},
		{"qtype OPT", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeOPT }, dns.RcodeServerFailure, 0, false},
		{"qtype TSIG", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeTSIG }, dns.RcodeServerFailure, 0, false},
		{"qtype RRSIG", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeRRSIG }, dns.RcodeServerFailure, 0, false},
		{"qtype 0", func(m *dns.Msg) { m.Question[0].Qtype = 0 }, dns.RcodeServerFailure, 0, false},
		{"qclass ANY", func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassANY }, dns.RcodeNotImplemented, 0, false},
		{"qclass HESIOD", func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassHESIOD }, dns.RcodeNotImplemented, 0, false},
		{"qclass CHAOS, debug off", func(m *dns.Msg) {
			m.Question[0].Qclass, m.Question[0].Qtype = dns.ClassCHAOS, dns.TypeTXT
		}, dns.RcodeRefused, 0, false},
		{"root name", func(m *dns.Msg) { m.Question[0].Name = "." }, dns.RcodeSuccess, 1, true},
		{"escaped bytes in a label", func(m *dns.Msg) { m.Question[0].Name = `a\000b\.c.odd.test.` }, dns.RcodeSuccess, 1, true},
		{"name of 253 characters", func(m *dns.Msg) {
			m.Question[0].Name = strings.Repeat(strings.Repeat("x", 62)+".", 4)[:250] + ".t."
		}, dns.RcodeSuccess, 1, true},
	}
	for i, tc := range cases {
		for _, netw := range []string{"udp", "tcp"} {
			t.Run(tc.name+"/"+netw, func(t *testing.T) {
				e := e.with(t)
				m := query(fmt.Sprintf("odd-%d-%s.test", i, netw), dns.TypeA, 1232, false)
				m.Id = 0x0dd0
				tc.edit(m)
				qname := m.Question[0].Name
				asked := len(e.up.asked(qname))
				before := e.stat("questions")
				r := e.mustAsk(netw, "", m)
				if r.Id != m.Id || !r.Response || r.Rcode != tc.rcode || len(r.Answer) != tc.answers {
					t.Fatalf("got id %#x rcode %s %d answers, want rcode %s %d answers: %v", r.Id,
						dns.RcodeToString[r.Rcode], len(r.Answer), dns.RcodeToString[tc.rcode], tc.answers, r)
				}
				if r.RecursionDesired != m.RecursionDesired || r.CheckingDisabled != m.CheckingDisabled || !r.RecursionAvailable {
					t.Errorf("flags RD %v CD %v RA %v, want RD %v CD %v RA", r.RecursionDesired, r.CheckingDisabled,
						r.RecursionAvailable, m.RecursionDesired, m.CheckingDisabled)
				}
				if len(r.Question) != 1 || r.Question[0] != m.Question[0] {
					t.Errorf("question %v, want %v", r.Question, m.Question)
				}
				if (r.IsEdns0() != nil) != (m.IsEdns0() != nil) {
					t.Errorf("EDNS in reply %v, in query %v", r.IsEdns0() != nil, m.IsEdns0() != nil)
				}
				if opt := r.IsEdns0(); opt != nil && (opt.UDPSize() != 1232 || len(opt.Option) != 0 || opt.Version() != 0) {
					t.Errorf("reply OPT %v: want size 1232, no options, version 0", opt)
				}
				// Names the cases set themselves are asked over UDP first,
				// and come from the record cache over TCP.
				if got := len(e.up.asked(qname)) > asked; got != (tc.upstream && (netw == "udp" || strings.HasPrefix(qname, "odd-"))) {
					t.Errorf("forwarder asked: %v, want %v", got, tc.upstream)
				}
				if n := e.stat("questions") - before; n != 1 {
					t.Errorf("questions moved by %d, want 1", n)
				}
			})
		}
	}
}

// TestAllowFrom: a client outside allow_from gets nothing: its UDP query
// is dropped (unauthorized-udp), its TCP connection closed
// (unauthorized-tcp), and neither is a question; an inside client is
// served.
func TestAllowFrom(t *testing.T) {
	e := newEnv(t, func(c *resolver.Config) { c.AllowFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} })
	before := e.stats("unauthorized-udp", "unauthorized-tcp", "questions", "client-parse-errors")

	c := e.udpClient("127.0.0.2")
	if _, err := c.Write(goodQuery(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{1, 2, 3}); err != nil { // not even parsed
		t.Fatal(err)
	}
	e.waitStat("unauthorized-udp", before["unauthorized-udp"]+2)
	// Counted means handled: a reply would have been written before.
	if b := readUDP(t, c, 200*time.Millisecond); b != nil {
		t.Fatalf("outside client got a UDP reply: %x", b)
	}

	tc := e.tcpClient("127.0.0.2")
	writeTCP(t, tc, goodQuery(t), []byte{1, 2, 3})
	if reply, closed := readTCP(t, tc); !closed {
		t.Fatalf("outside client got a TCP reply: %x", reply)
	}
	e.waitStat("unauthorized-tcp", before["unauthorized-tcp"]+1)
	e.wantMoved("outside client", before, map[string]uint64{"questions": 0, "client-parse-errors": 0, "unauthorized-udp": 2, "unauthorized-tcp": 1})

	for _, netw := range []string{"udp", "tcp"} {
		if r := e.mustAsk(netw, "127.0.0.1", query("inside.test", dns.TypeA, 1232, false)); r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s from inside: %v", netw, r)
		}
	}
}

// TestEDNSBufferSize: the client's payload size is honoured. An answer of
// ~1000 bytes fits 1232 but not 512: over UDP with 512 (or no EDNS) it
// comes truncated with TC, the client's cue for TCP, where it comes whole;
// the truncated reply is not cached.
func TestEDNSBufferSize(t *testing.T) {
	e := newEnv(t, nil)
	cases := []struct {
		netw    string
		size    uint16
		tc      bool
		answers int
	}{
		{"udp", 1232, false, bigCount}, // stored in the packet cache
		{"udp", 4096, false, bigCount}, // another key (EDNS size is not in it: the same), a hit
		{"udp", 512, true, -1},         // the cached answer is too big for it
		{"udp", 0, true, -1},           // no EDNS: 512
		{"udp", 512, true, -1},         // still not cached truncated
		{"tcp", 512, false, bigCount},  // over TCP the whole answer
		{"tcp", 0, false, bigCount},
	}
	for i, tc := range cases {
		q := query("big.test", dns.TypeA, tc.size, false)
		var r *dns.Msg
		if tc.netw == "udp" {
			wire := e.rawUDP("", mustPack(t, q))
			if limit := max(int(tc.size), 512); len(wire) > limit {
				t.Errorf("%d: UDP reply of %d bytes for a %d-byte client", i, len(wire), limit)
			}
			r = mustUnpack(t, wire)
		} else {
			r = e.mustAsk(tc.netw, "", q)
		}
		if r.Rcode != dns.RcodeSuccess || r.Truncated != tc.tc || (tc.answers >= 0 && len(r.Answer) != tc.answers) {
			t.Fatalf("%d: %s size %d: TC %v, %d answers; want TC %v, %d", i, tc.netw, tc.size, r.Truncated, len(r.Answer),
				tc.tc, tc.answers)
		}
		if tc.tc && len(r.Answer) >= bigCount {
			t.Errorf("%d: truncated but whole", i)
		}
	}
	if n := len(e.up.asked("big.test")); n != 1 {
		t.Errorf("forwarder asked %d times, want once (record cache, packet cache)", n)
	}
}

// TestDNSSECPassThrough: the DO bit reaches the forwarder and its RRSIGs
// reach the client (from the forwarder, the packet cache and the record
// cache); without DO they do not; dnssec-queries counts DO queries.
func TestDNSSECPassThrough(t *testing.T) {
	e := newEnv(t, nil)
	before := e.stats("dnssec-queries", "packetcache-hits")
	rrsigs := func(m *dns.Msg) (n int) {
		for _, rr := range m.Answer {
			if _, ok := rr.(*dns.RRSIG); ok {
				n++
			}
		}
		return n
	}
	for i, step := range []struct {
		netw  string
		do    bool
		sigs  int
		label string
	}{
		{"udp", true, 1, "forwarder"},
		{"udp", false, 0, "forwarder without DO"},
		{"udp", true, 1, "packet cache"},
		{"tcp", true, 1, "record cache over TCP"},
		{"tcp", false, 0, "record cache without DO"},
	} {
		r := e.mustAsk(step.netw, "", query("signed.test", dns.TypeA, 1232, step.do))
		if r.Rcode != dns.RcodeSuccess || rrsigs(r) != step.sigs || r.IsEdns0() == nil || r.IsEdns0().Do() != step.do {
			t.Errorf("%d %s: rcode %s, %d RRSIGs, OPT %v; want %d RRSIGs, DO %v", i, step.label, dns.RcodeToString[r.Rcode],
				rrsigs(r), r.IsEdns0(), step.sigs, step.do)
		}
	}
	asked := e.up.asked("signed.test")
	if len(asked) != 2 || !asked[0].do || asked[1].do {
		t.Errorf("forwarder asked %+v, want once with DO, once without", asked)
	}
	e.wantMoved("DNSSEC", before, map[string]uint64{"dnssec-queries": 3, "packetcache-hits": 1})
}

// TestOctetStringsPassThrough: a URI target with a backslash reaches the
// client as the forwarder's bytes (miekg/dns unpacks it raw and would pack
// it reading escapes), from the forwarder, the packet cache, the record
// cache for another policy class and over TCP.
func TestOctetStringsPassThrough(t *testing.T) {
	e := newEnv(t, nil)
	for _, step := range []struct{ netw, from, label string }{
		{"udp", "127.0.0.1", "forwarder"},
		{"udp", "127.0.0.1", "packet cache"},
		{"udp", "127.0.0.8", "record cache, another class"},
		{"tcp", "", "record cache over TCP"},
	} {
		r := e.mustAsk(step.netw, step.from, query("uri.test", dns.TypeURI, 1232, false))
		// miekg/dns unpacks the target as the raw bytes: compared as they are.
		if len(r.Answer) != 1 || r.Answer[0].(*dns.URI).Target != upstreamURITarget {
			t.Errorf("%s: %v, want the target %q", step.label, r.Answer, upstreamURITarget)
		}
	}
	if n := len(e.up.asked("uri.test")); n != 1 {
		t.Errorf("forwarder asked %d times, want once", n)
	}
}

// TestCaseRandomization: a mixed-case question (0x20) is answered with
// the client's spelling, from the forwarder, the packet cache and over
// TCP.
func TestCaseRandomization(t *testing.T) {
	e := newEnv(t, nil)
	for i, step := range []struct {
		netw, name string
		hit        bool
	}{
		{"udp", "WwW.ExAmPlE.TeSt.", false},
		{"udp", "wWw.eXaMpLe.tEsT.", true},
		{"udp", "WWW.EXAMPLE.TEST.", true},
		{"tcp", "www.EXAMPLE.test.", false},
	} {
		hits := e.stat("packetcache-hits")
		m := new(dns.Msg)
		m.SetQuestion(step.name, dns.TypeA)
		m.SetEdns0(1232, false)
		r := e.mustAsk(step.netw, "", m)
		if len(r.Question) != 1 || r.Question[0].Name != step.name || len(r.Answer) != 1 {
			t.Errorf("%d: question %v answer %v, want %q answered", i, r.Question, r.Answer, step.name)
		}
		if got := e.stat("packetcache-hits") > hits; got != step.hit {
			t.Errorf("%d: packet cache hit %v, want %v", i, got, step.hit)
		}
	}
	// The raw bytes too: miekg would not tell a compressed owner from the
	// question.
	c := e.udpClient("")
	m := new(dns.Msg)
	m.SetQuestion("wWW.examPLE.test.", dns.TypeA)
	m.SetEdns0(1232, false)
	if _, err := c.Write(mustPack(t, m)); err != nil {
		t.Fatal(err)
	}
	b := readUDP(t, c, bound)
	if b == nil || !strings.Contains(string(b), "\x03wWW\x07examPLE\x04test\x00") {
		t.Errorf("raw reply %q lacks the question as asked", b)
	}
}
