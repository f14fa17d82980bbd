package upstream

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// seenQuery is one query a fake forwarder received.
type seenQuery struct {
	msg     *dns.Msg
	srcPort uint16
	tcp     bool
}

// fakeForwarder is a small forwarder on loopback for the tests: a UDP
// socket on a kernel-chosen port and, when asked, a TCP listener on the same
// port. Each received query is parsed, recorded, and handed to the test's
// respond func, whose packets are sent back in order.
type fakeForwarder struct {
	t    testing.TB
	addr netip.AddrPort
	conn *net.UDPConn

	respondUDP func(q *dns.Msg, raw []byte) [][]byte
	respondTCP func(q *dns.Msg, raw []byte) [][]byte

	mu       sync.Mutex
	queries  []seenQuery
	tcpConns int
	wg       sync.WaitGroup
}

// startFake starts a fake forwarder on host ("127.0.0.1" or "::1").
func startFake(t testing.TB, host string, respond func(q *dns.Msg, raw []byte) [][]byte) *fakeForwarder {
	t.Helper()
	var conn *net.UDPConn
	for attempt := 0; ; attempt++ {
		var err error
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(host), 0)))
		if err != nil {
			t.Fatalf("listen udp on %s: %v", host, err)
		}
		// serveTCP binds the same port for TCP later: take a port whose
		// TCP twin is free now, so that it does not flake with "address
		// already in use".
		ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(conn.LocalAddr().(*net.UDPAddr).AddrPort()))
		if err == nil {
			ln.Close()
			break
		}
		conn.Close()
		if attempt == 20 {
			t.Fatalf("no port free for both UDP and TCP on %s: %v", host, err)
		}
	}
	f := &fakeForwarder{t: t, conn: conn, addr: conn.LocalAddr().(*net.UDPAddr).AddrPort(), respondUDP: respond}
	f.wg.Add(1)
	go f.serveUDP()
	t.Cleanup(func() {
		conn.Close()
		f.wg.Wait()
	})
	return f
}

func (f *fakeForwarder) serveUDP() {
	defer f.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := f.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		raw := append([]byte(nil), buf[:n]...)
		q := new(dns.Msg)
		if q.Unpack(raw) != nil {
			continue
		}
		f.mu.Lock()
		f.queries = append(f.queries, seenQuery{msg: q, srcPort: from.Port()})
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for _, p := range f.respondUDP(q, raw) {
				if _, err := f.conn.WriteToUDPAddrPort(p, from); err != nil {
					return
				}
			}
		}()
	}
}

// serveTCP listens on TCP at the fake's port; respond's packets are written
// with length prefixes. closeAfter closes each connection after one reply,
// as a server with a very short idle timeout would.
func (f *fakeForwarder) serveTCP(respond func(q *dns.Msg, raw []byte) [][]byte, closeAfter bool) {
	f.t.Helper()
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(f.addr))
	if err != nil {
		f.t.Fatalf("listen tcp on %s: %v", f.addr, err)
	}
	f.respondTCP = respond
	var conns sync.Map
	f.t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
	})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			f.mu.Lock()
			f.tcpConns++
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				for {
					var prefix [2]byte
					if _, err := io.ReadFull(c, prefix[:]); err != nil {
						return
					}
					raw := make([]byte, binary.BigEndian.Uint16(prefix[:]))
					if _, err := io.ReadFull(c, raw); err != nil {
						return
					}
					q := new(dns.Msg)
					if q.Unpack(raw) != nil {
						return
					}
					f.mu.Lock()
					f.queries = append(f.queries, seenQuery{msg: q, tcp: true})
					f.mu.Unlock()
					for _, p := range f.respondTCP(q, raw) {
						out := binary.BigEndian.AppendUint16(nil, uint16(len(p)))
						if _, err := c.Write(append(out, p...)); err != nil {
							return
						}
					}
					if closeAfter {
						return
					}
				}
			}()
		}
	}()
}

func (f *fakeForwarder) seen() []seenQuery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenQuery(nil), f.queries...)
}

func (f *fakeForwarder) connsAccepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tcpConns
}

// closedPort returns a loopback address nothing listens on: a UDP query to
// it draws an ICMP port unreachable, a TCP connect a reset.
func closedPort(t testing.TB) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ap := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	return ap
}

// reply builds the answer to q with n A records for its name, echoing the
// question exactly as asked.
func reply(q *dns.Msg, n int) *dns.Msg {
	r := new(dns.Msg)
	r.SetReply(q)
	r.RecursionAvailable = true
	for i := range n {
		r.Answer = append(r.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A:   net.IPv4(192, 0, 2, byte(i)),
		})
	}
	return r
}

// wire packs m for a responder, which runs on the fake's goroutines where
// t.Fatal must not be called: a message that does not pack is a bug in the
// test.
func wire(m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		panic(err)
	}
	return b
}

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("pack: %v", err)
	}
	return b
}

// Responders: each returns the packets a fake forwarder sends for a query.

func answerWith(n int) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte { return [][]byte{wire(reply(q, n))} }
}

func silent(*dns.Msg, []byte) [][]byte { return nil }

func rcodeOnly(rcode int) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		r := new(dns.Msg)
		r.SetRcode(q, rcode)
		return [][]byte{wire(r)}
	}
}

// before sends the packets bad makes, then a correct answer.
func before(bad func(q *dns.Msg, raw []byte) [][]byte) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, raw []byte) [][]byte {
		return append(bad(q, raw), wire(reply(q, 1)))
	}
}

// garbage looks like a response header (QR set, one question) followed by
// bytes that are no name: a parse error whatever the id.
func garbage(*dns.Msg, []byte) [][]byte {
	return [][]byte{[]byte("\xde\xad\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff not a name")}
}

// text is not DNS at all; its header bytes read as a query (QR clear).
func text(*dns.Msg, []byte) [][]byte {
	return [][]byte{[]byte("hello, this is not DNS at all")}
}

// sameIDGarbage is unparsable after a header carrying the query's id.
func sameIDGarbage(_ *dns.Msg, raw []byte) [][]byte {
	return [][]byte{append([]byte{raw[0], raw[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}, 0x3f, 'x')}
}

func shortPacket(_ *dns.Msg, raw []byte) [][]byte { return [][]byte{raw[:5]} }

func wrongID(count int) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		var out [][]byte
		for i := range count {
			r := reply(q, 1)
			r.Id = q.Id + 1 + uint16(i)
			out = append(out, wire(r))
		}
		return out
	}
}

func otherName() func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		r := reply(q, 1)
		r.Question[0].Name = "other." + q.Question[0].Name
		return [][]byte{wire(r)}
	}
}

func otherType() func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		r := reply(q, 0)
		r.Question[0].Qtype = dns.TypeMX
		return [][]byte{wire(r)}
	}
}

// echoQuery sends the query back unchanged: not a response (QR clear).
func echoQuery(_ *dns.Msg, raw []byte) [][]byte { return [][]byte{raw} }

func lowerCase() func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		r := reply(q, 1)
		r.Question[0].Name = strings.ToLower(r.Question[0].Name)
		return [][]byte{wire(r)}
	}
}

func truncated() func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		r := reply(q, 0)
		r.Truncated = true
		return [][]byte{wire(r)}
	}
}

func delayed(d time.Duration, next func(q *dns.Msg, raw []byte) [][]byte) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, raw []byte) [][]byte {
		time.Sleep(d)
		return next(q, raw)
	}
}

// counters are the statistics the client feeds, read by their PowerDNS
// names: the resolver's own (stats), so the tests check what the API
// reports.
type counters struct{ *stats.Counters }

// upstreamStats are the statistics a Client's Metrics moves, but for the
// answer latency buckets (answers reads those).
var upstreamStats = []string{
	"all-outqueries", "tcp-outqueries", "ipv6-outqueries",
	"outgoing-timeouts", "outgoing4-timeouts", "outgoing6-timeouts",
	"unreachables", "resource-limits", "unexpected-packets",
	"server-parse-errors", "spoof-prevents", "case-mismatches",
}

// get is the value of a statistic.
func (c counters) get(t testing.TB, name string) uint64 {
	t.Helper()
	it, ok := c.Lookup(name)
	if !ok {
		t.Fatalf("no statistic %s", name)
	}
	v, err := strconv.ParseUint(it.Value, 10, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", name, it.Value, err)
	}
	return v
}

// newClient makes a Client on the given forwarders with counters, closed
// at the end of the test.
func newClient(t testing.TB, cfg Config, fwds ...netip.AddrPort) (*Client, counters) {
	t.Helper()
	sc, err := stats.New(stats.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Forwarders = fwds
	cfg.Metrics = sc.Shard(0)
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, counters{sc}
}

// question makes a client query as a stub would send it: mixed case (0x20),
// EDNS with DO, an id of its own.
func question(name string, qtype uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.Id = 4242
	q.SetEdns0(4096, true)
	return q
}

// checkCounts compares the counters named in want; the others must be zero
// unless listed in ignore.
func checkCounts(t *testing.T, c counters, want map[string]uint64, ignore ...string) {
	t.Helper()
	for _, name := range upstreamStats {
		if slices.Contains(ignore, name) {
			continue
		}
		if got := c.get(t, name); got != want[name] {
			t.Errorf("%s = %d, want %d", name, got, want[name])
		}
	}
}

// snapshot is every statistic the client moves, by name.
func (c counters) snapshot(t testing.TB) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for _, name := range upstreamStats {
		m[name] = c.get(t, name)
	}
	for _, fam := range []string{"auth4", "auth6"} {
		for _, b := range answerBuckets {
			m[fam+"-answers"+b] = c.get(t, fam+"-answers"+b)
		}
	}
	return m
}

// answerBuckets are the suffixes of PowerDNS's answer latency statistics.
var answerBuckets = []string{"0-1", "1-10", "10-100", "100-1000", "-slow"}

// answers sums the answer latency buckets of a family ("auth4", "auth6").
func answers(t testing.TB, c counters, family string) uint64 {
	t.Helper()
	var n uint64
	for _, b := range answerBuckets {
		n += c.get(t, family+"-answers"+b)
	}
	return n
}

// errorsIsAll reports whether err Is every one of targets.
func errorsIsAll(err error, targets ...error) bool {
	for _, t := range targets {
		if !errors.Is(err, t) {
			return false
		}
	}
	return true
}
