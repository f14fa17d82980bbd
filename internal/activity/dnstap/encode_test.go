package dnstap

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// decoded is a Dnstap payload read back with protowire: every field the
// encoder writes, and whether it was present.
type decoded struct {
	identity, version []byte
	dnstapType        uint64
	msgType           uint64
	family, protocol  uint64
	hasFamily         bool
	address           []byte
	port              uint64
	hasPort           bool
	qSec, rSec        uint64
	qNsec, rNsec      uint32
	hasQTime          bool
	hasRTime          bool
	query, response   []byte
	hasQuery, hasResp bool
	hasPolicy         bool
	policyType        []byte
	policyRule        []byte
	policyAction      uint64
}

// fields calls f for each field of b; an error for bytes that are not a
// protobuf message or use a wire type the schema does not.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var bs []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		case protowire.BytesType:
			bs, n = protowire.ConsumeBytes(b)
		default:
			return fmt.Errorf("field %d: wire type %d", num, typ)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, bs); err != nil {
			return err
		}
	}
	return nil
}

func decode(b []byte) (decoded, error) {
	var d decoded
	var msg []byte
	err := fields(b, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fDnstapIdentity:
			d.identity = bs
		case fDnstapVersion:
			d.version = bs
		case fDnstapMessage:
			msg = bs
		case fDnstapType:
			d.dnstapType = v
		default:
			return fmt.Errorf("Dnstap field %d unexpected", num)
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	var pol []byte
	err = fields(msg, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fMsgType:
			d.msgType = v
		case fMsgFamily:
			d.family, d.hasFamily = v, true
		case fMsgProtocol:
			d.protocol = v
		case fMsgQueryAddress:
			d.address = bs
		case fMsgQueryPort:
			d.port, d.hasPort = v, true
		case fMsgQueryTimeSec:
			d.qSec, d.hasQTime = v, true
		case fMsgQueryTimeNsec:
			d.qNsec = uint32(v)
		case fMsgQueryMessage:
			d.query, d.hasQuery = bs, true
		case fMsgRespTimeSec:
			d.rSec, d.hasRTime = v, true
		case fMsgRespTimeNsec:
			d.rNsec = uint32(v)
		case fMsgRespMessage:
			d.response, d.hasResp = bs, true
		case fMsgPolicy:
			pol, d.hasPolicy = bs, true
		default:
			return fmt.Errorf("Message field %d unexpected", num)
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	err = fields(pol, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fPolicyType:
			d.policyType = bs
		case fPolicyRule:
			d.policyRule = bs
		case fPolicyAction:
			d.policyAction = v
		default:
			return fmt.Errorf("Policy field %d unexpected", num)
		}
		return nil
	})
	return d, err
}

// newRecord builds a record as Answered would.
func newRecord(reply []byte, name, rule string, client netip.AddrPort, at time.Time, took time.Duration) *record {
	b := append(append(append([]byte(nil), reply...), rule...), name...)
	return &record{buf: &b, nReply: len(reply), nRule: len(rule), client: client, at: at, took: took}
}

// checkRoundTrip encodes r and checks that every field decodes as r says.
func checkRoundTrip(t *testing.T, r *record, identity, version string) decoded {
	t.Helper()
	out, _ := appendDnstap([]byte("prefix"), nil, []byte(identity), []byte(version), r)
	if !bytes.HasPrefix(out, []byte("prefix")) {
		t.Fatalf("appendDnstap overwrote what dst held")
	}
	d, err := decode(out[len("prefix"):])
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if string(d.identity) != identity || string(d.version) != version || d.dnstapType != dnstapMessage {
		t.Errorf("envelope: identity %q version %q type %d, want %q %q %d", d.identity, d.version, d.dnstapType, identity, version, dnstapMessage)
	}
	wantType := uint64(typeClientResponse)
	if r.dropped {
		wantType = typeClientQuery
	}
	if d.msgType != wantType || d.protocol != socketProtocol(r.transport) {
		t.Errorf("type %d protocol %d, want %d %d", d.msgType, d.protocol, wantType, socketProtocol(r.transport))
	}
	if a := r.client.Addr().Unmap(); a.IsValid() {
		got, ok := netip.AddrFromSlice(d.address)
		wantFamily := uint64(familyINET6)
		if a.Is4() {
			wantFamily = familyINET
		}
		if !ok || got != a || d.family != wantFamily || !d.hasPort || d.port != uint64(r.client.Port()) {
			t.Errorf("client %v family %d port %d, want %v %d %d", got, d.family, d.port, a, wantFamily, r.client.Port())
		}
	} else if d.hasFamily || d.address != nil || d.hasPort {
		t.Errorf("no client, but family %d address %x port %d written", d.family, d.address, d.port)
	}
	qt := r.at.Add(-r.took)
	if !d.hasQTime || d.qSec != uint64(qt.Unix()) || d.qNsec != uint32(qt.Nanosecond()) {
		t.Errorf("query time %d.%09d, want %d.%09d", d.qSec, d.qNsec, qt.Unix(), qt.Nanosecond())
	}
	if r.dropped {
		if d.hasRTime || d.hasResp {
			t.Errorf("a dropped query has a response")
		}
	} else if !d.hasRTime || d.rSec != uint64(r.at.Unix()) || d.rNsec != uint32(r.at.Nanosecond()) || !bytes.Equal(d.response, r.reply()) ||
		!d.hasResp {
		t.Errorf("response time %d.%09d message %x, want %d.%09d %x", d.rSec, d.rNsec, d.response, r.at.Unix(), r.at.Nanosecond(), r.reply())
	}
	if d.hasPolicy != r.blocked {
		t.Errorf("policy written %v, want %v", d.hasPolicy, r.blocked)
	}
	if r.blocked && (string(d.policyType) != string(reasons[r.reason]) || !bytes.Equal(d.policyRule, r.rule()) ||
		d.policyAction != uint64(r.action)) {
		t.Errorf("policy %q %q %d, want %q %q %d", d.policyType, d.policyRule, d.policyAction, reasons[r.reason], r.rule(), r.action)
	}
	// The query stands for the client's: a reply with its question gives
	// the question back, with the reply's ID, as a query.
	// (miekg/dns reads a question cut short before its type and class;
	// such a reply does not stand for a query.)
	var reply dns.Msg
	_, qEnd, qErr := dns.UnpackDomainName(r.reply(), 12)
	if reply.Unpack(r.reply()) == nil && len(reply.Question) == 1 && qErr == nil && qEnd+4 <= len(r.reply()) {
		var q dns.Msg
		if !d.hasQuery {
			t.Fatalf("no query message for a reply with a question")
		}
		if err := q.Unpack(d.query); err != nil {
			t.Fatalf("query message %x: %v", d.query, err)
		}
		if q.Response || q.Id != reply.Id || q.Opcode != reply.Opcode || q.RecursionDesired != reply.RecursionDesired ||
			len(q.Question) != 1 || q.Question[0] != reply.Question[0] || len(q.Answer)+len(q.Ns)+len(q.Extra) != 0 {
			t.Errorf("query %v, want the question of %v", &q, &reply)
		}
	}
	return d
}

func TestEncodeRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 1, 999_999_999, time.UTC)
	m := new(dns.Msg)
	m.SetQuestion("Blocked.Example.", dns.TypeAAAA)
	m.CheckingDisabled = true
	m.SetRcode(m, dns.RcodeNameError)
	reply, _ := m.Pack()
	for _, tt := range []struct {
		name string
		r    *record
	}{
		{"udp v4 blocked", func() *record {
			r := newRecord(reply, "", "blocklist:blocked.example", netip.MustParseAddrPort("192.0.2.7:5353"), at, 1500*time.Microsecond)
			r.blocked, r.reason, r.action = true, reasonIndex(policy.ReasonBlocklist), policyAction(policy.ActionNXDomain)
			return r
		}()},
		{"doq v6 allowed", func() *record {
			r := newRecord(reply, "", "", netip.MustParseAddrPort("[2001:db8::1]:853"), at, time.Second)
			r.transport = policy.TransportDoQ
			return r
		}()},
		{"v4-mapped", newRecord(reply, "", "", netip.MustParseAddrPort("[::ffff:10.0.0.1]:1"), at, 0)},
		{"a 20000-byte reply: three-byte lengths", newRecord(append(append([]byte(nil), reply...), make([]byte, 20000)...), "", "",
			netip.MustParseAddrPort("10.0.0.1:53"), at, 0)},
		{"dropped, by name", func() *record {
			r := newRecord(nil, "dropped.example.", "blocklist:dropped.example", netip.MustParseAddrPort("10.0.0.1:53"), at, time.Millisecond)
			r.dropped, r.blocked, r.reason, r.action, r.qtype = true, true, reasonIndex(policy.ReasonBlocklist), actionDrop, dns.TypeMX
			return r
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := checkRoundTrip(t, tt.r, "node-1", "v1.2.3")
			if tt.r.dropped {
				var q dns.Msg
				if err := q.Unpack(d.query); err != nil || len(q.Question) != 1 ||
					q.Question[0] != (dns.Question{Name: "dropped.example.", Qtype: dns.TypeMX, Qclass: dns.ClassINET}) {
					t.Errorf("dropped query's message %v (%v), want its name and type", &q, err)
				}
			}
		})
	}
}

// FuzzEncode: whatever the record holds, the payload decodes with
// protowire into the same fields.
func FuzzEncode(f *testing.F) {
	m := new(dns.Msg)
	m.SetQuestion("example.com.", dns.TypeA)
	reply, _ := m.Pack()
	f.Add(reply, "", "", []byte{127, 0, 0, 1}, uint16(53), int64(1_700_000_000_123_456_789), int64(1000), uint8(0), false, false, uint8(0), uint8(0), "id", "v")
	f.Add([]byte(nil), "x.example.", "rule", make([]byte, 16), uint16(0), int64(0), int64(-5), uint8(4), true, true, uint8(4), uint8(4), "", "")
	f.Add(make([]byte, 300), `a\.b.\255.`, strings.Repeat("r", 200), []byte{1}, uint16(65535), int64(-1), int64(1<<40), uint8(9), false, true, uint8(200), uint8(6), "", "")
	f.Fuzz(func(t *testing.T, reply []byte, name, rule string, addr []byte, port uint16, atNanos, took int64,
		transport uint8, dropped, blocked bool, reason, action uint8, identity, version string) {
		a, _ := netip.AddrFromSlice(addr)
		if dropped {
			reply = nil // as Answered: no reply when the query was dropped
		}
		if !blocked {
			rule = "" // as Answered: a rule only with a Policy
		}
		r := newRecord(reply, name, rule, netip.AddrPortFrom(a, port), time.Unix(0, atNanos), time.Duration(took))
		r.transport, r.dropped, r.blocked = policy.Transport(transport), dropped, blocked
		r.reason, r.action = reason%uint8(len(reasons)), action%7
		checkRoundTrip(t, r, identity, version)
	})
}

// FuzzAppendQuery: the query that stands for the client's is a DNS query
// miekg/dns reads, with the reply's question, whatever the reply holds.
func FuzzAppendQuery(f *testing.F) {
	m := new(dns.Msg)
	m.SetQuestion("example.com.", dns.TypeA)
	reply, _ := m.Pack()
	f.Add(reply, "")
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}, "")
	f.Add([]byte{}, "name.example.")
	f.Fuzz(func(t *testing.T, reply []byte, name string) {
		q, ok := appendQuery(nil, reply, []byte(name), dns.TypeA)
		if !ok {
			if len(q) != 0 {
				t.Fatalf("no query, but %x appended", q)
			}
			return
		}
		var msg dns.Msg
		if err := msg.Unpack(q); err != nil {
			t.Fatalf("query %x (from reply %x, name %q): %v", q, reply, name, err)
		}
		if msg.Response || len(msg.Question) != 1 || len(msg.Answer)+len(msg.Ns)+len(msg.Extra) != 0 {
			t.Fatalf("query %v: want one question and nothing else", &msg)
		}
	})
}

// FuzzControl: a control frame appendControl writes reads back the same;
// parseControl refuses or reads whatever bytes, never panicking.
func FuzzControl(f *testing.F) {
	f.Add(ctrlAccept, contentType, []byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 'x'})
	f.Add(ctrlStop, "", []byte{0, 0, 0, 5})
	f.Add(ctrlReady, "a", []byte{0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, typ uint32, ct string, raw []byte) {
		if c, err := parseControl(raw); err == nil {
			for _, x := range c.contentTypes {
				if len(x) > len(raw) {
					t.Fatalf("content type longer than the frame")
				}
			}
		}
		if len(ct) > maxControl-12 {
			return
		}
		frame := appendControl(nil, typ, ct)
		c, err := readControl(bytes.NewReader(frame))
		if err != nil {
			t.Fatalf("readControl(appendControl(%d, %q)): %v", typ, ct, err)
		}
		if c.typ != typ || (ct != "" && (!c.has(ct) || len(c.contentTypes) != 1)) || (ct == "" && len(c.contentTypes) != 0) {
			t.Fatalf("read back type %d content types %q, want %d %q", c.typ, c.contentTypes, typ, ct)
		}
	})
}

// FuzzParseSocket: a socket string parses to what it says, printed back
// the same, or is refused; never a panic.
func FuzzParseSocket(f *testing.F) {
	for _, s := range []string{"unix:/run/dnstap.sock", "tcp:127.0.0.1:6000", "tcp:[::1]:6000", "tcp:collector:6000",
		"unix:relative", "tcp:host", "tcp::6000", "tcp:h:0", "tcp:h:65536", "udp:h:1", "", "unix:", "tcp:h:06000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sock, err := ParseSocket(s)
		if err != nil {
			if err.Error() == "" || !strings.Contains(err.Error(), "dnstap socket") {
				t.Fatalf("ParseSocket(%q): error %q does not name the key", s, err)
			}
			return
		}
		if sock.String() != s {
			t.Fatalf("ParseSocket(%q).String() = %q", s, sock.String())
		}
		switch sock.Network {
		case "unix":
			if !strings.HasPrefix(sock.Address, "/") || len(sock.Address) > maxUnixPath {
				t.Fatalf("unix socket %q accepted", sock.Address)
			}
		case "tcp":
			if h, _, err := net.SplitHostPort(sock.Address); err != nil || h == "" {
				t.Fatalf("tcp address %q accepted", sock.Address)
			}
		default:
			t.Fatalf("network %q accepted", sock.Network)
		}
	})
}

func TestParseSocket(t *testing.T) {
	for s, want := range map[string]Socket{
		"unix:/run/dnstap.sock": {"unix", "/run/dnstap.sock"},
		"tcp:127.0.0.1:6000":    {"tcp", "127.0.0.1:6000"},
		"tcp:[::1]:6000":        {"tcp", "[::1]:6000"},
		"tcp:collector:6000":    {"tcp", "collector:6000"},
	} {
		if got, err := ParseSocket(s); err != nil || got != want {
			t.Errorf("ParseSocket(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "/run/x", "unix:", "unix:run/x", "unix:/" + strings.Repeat("x", 107), "tcp:", "tcp:h",
		"tcp::6000", "tcp:h:0", "tcp:h:65536", "tcp:h:x", "tcp:h:+1", "tcp:h:06000", "udp:h:53", "tcp:a b:1"} {
		if got, err := ParseSocket(s); err == nil {
			t.Errorf("ParseSocket(%q) = %+v, want an error", s, got)
		}
	}
}
