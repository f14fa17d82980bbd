package resolver_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// FuzzResolverUDP sends arbitrary bytes to a running resolver, over UDP and
// framed over TCP, from a subscriber with a category block (so that fuzzed
// questions reach the policy, RPZ, the forwarder and the debug trace), and
// after each input asserts that the server still answers: a valid query
// over UDP (a packet cache hit, the fast path), a CHAOS trace (never cached:
// the slow path) and a query over a new TCP connection. A panic anywhere in
// the server ends the test binary; a hang fails the bound.
//
//	go test -run '^$' -fuzz '^FuzzResolverUDP$' -fuzztime 60s ./internal/resolver/
func FuzzResolverUDP(f *testing.F) {
	// Every bad query of wire_test.go, those only miekg/dns refuses
	// included (ECS family 3, an ECS source prefix of 200, an empty ECS
	// option, a TSIG record cut short: the slow path's FORMERR).
	for _, bq := range badQueries(f) {
		f.Add(bq.pkt)
	}
	for _, m := range []*dns.Msg{
		query("www.example.test", dns.TypeA, 1232, true),
		query("bad.test", dns.TypeA, 0, false),
		query("big.test", dns.TypeA, 512, false),
		query("nx.rpz.test", dns.TypeAAAA, 1232, false),
		query("cn.rpz.test", dns.TypeANY, 1232, false),
		query("tc.rpz.test", dns.TypeA, 1232, false),
		query("drop.rpz.test", dns.TypeA, 1232, false),
		query("a.wild.rpz.test", dns.TypeAXFR, 1232, false),
	} {
		f.Add(mustPack(f, m))
	}
	ch := query("bad.test", dns.TypeTXT, 1232, false)
	ch.Question[0].Qclass = dns.ClassCHAOS
	f.Add(mustPack(f, ch))

	// With an observer, so that every outcome also goes through its
	// event (the question's text, the stored decision read back).
	e := newEnv(f, func(c *resolver.Config) {
		c.Debug = true
		c.Engine = testEngine(f, rpzSnapshot(f))
		c.Observer = &countingObserver{}
	})
	fuzzUDP := e.udpClient("127.0.0.2")
	probe := e.udpClient("127.0.0.1")
	probeA := query("probe.test", dns.TypeA, 1232, false)
	probeCH := query("bad.test", dns.TypeTXT, 1232, false)
	probeCH.Question[0].Qclass = dns.ClassCHAOS
	var id atomic.Uint32
	tcpAddr := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(e.tcp))

	f.Fuzz(func(t *testing.T, pkt []byte) {
		if _, err := fuzzUDP.Write(pkt); err != nil && len(pkt) <= 65507 {
			t.Fatalf("write: %v", err)
		}
		if len(pkt) <= 65535 {
			fuzzTCP(t, tcpAddr, pkt)
		}
		for _, p := range []*dns.Msg{probeA, probeCH} {
			m := p.Copy()
			m.Id = uint16(id.Add(1))
			b, _ := m.Pack()
			if _, err := probe.Write(b); err != nil {
				t.Fatal(err)
			}
			// Read until the probe's answer: a late answer to an earlier
			// probe may come first.
			deadline := time.Now().Add(bound)
			for {
				r := readUDP(t, probe, time.Until(deadline))
				if r == nil {
					t.Fatalf("after %x: no answer to the probe %v within %v", pkt, m.Question, bound)
				}
				a := new(dns.Msg)
				if a.Unpack(r) == nil && a.Id == m.Id {
					if a.Rcode != dns.RcodeSuccess || len(a.Answer) != 1 {
						t.Fatalf("after %x: probe answered %v", pkt, a)
					}
					break
				}
			}
		}
		// What the fuzzed packets got is left unread on fuzzUDP: once its
		// receive buffer is full the kernel drops the rest.
	})
}

// fuzzTCP sends pkt framed on a new connection, then a valid query; the
// connection must either answer the query or be closed, within bound.
func fuzzTCP(t *testing.T, addr *net.TCPAddr, pkt []byte) {
	c, err := net.DialTCP("tcp", nil, addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	good := query("probe.test", dns.TypeA, 1232, false)
	good.Id = goodID
	gb, _ := good.Pack()
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(len(pkt)))
	b = append(b, pkt...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(gb)))
	b = append(b, gb...)
	_ = c.SetDeadline(time.Now().Add(bound))
	if _, err := c.Write(b); err != nil {
		return // closed while we wrote: the server refused the first message
	}
	for {
		var l [2]byte
		if _, err := readFull(c, l[:]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("TCP after %x: neither the probe's answer nor a close within %v", pkt, bound)
			}
			return // closed
		}
		msg := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := readFull(c, msg); err != nil {
			return
		}
		m := new(dns.Msg)
		if m.Unpack(msg) == nil && m.Id == goodID && m.Question[0].Name == "probe.test." {
			return
		}
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
