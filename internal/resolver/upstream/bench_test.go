package upstream

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// startFastResponder is a forwarder that costs as little as possible, so
// that a benchmark measures the client: it answers each query in place
// with one A record, no parsing beyond walking the question name.
func startFastResponder(b *testing.B) netip.AddrPort {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			end := headerLen
			for end < n && buf[end] != 0 {
				end += int(buf[end]) + 1
			}
			end += 5 // root label, type, class
			if end > n {
				continue
			}
			p := buf[:end]
			p[2] |= 0x80                         // QR
			p[3] |= 0x80                         // RA
			binary.BigEndian.PutUint16(p[6:], 1) // ANCOUNT
			binary.BigEndian.PutUint16(p[8:], 0)
			binary.BigEndian.PutUint16(p[10:], 0) // our OPT is dropped: no ARCOUNT
			p = append(p, 0xc0, headerLen, 0, 1, 0, 1, 0, 0, 1, 0x2c, 0, 4, 192, 0, 2, 1)
			_, _ = conn.WriteToUDPAddrPort(p, from)
		}
	}()
	return conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// BenchmarkExchange: one query at a time against a local fast responder;
// the time is the client's work plus two loopback syscalls each way.
func BenchmarkExchange(b *testing.B) {
	c, _ := newClient(b, Config{}, startFastResponder(b))
	q := question("www.Example.com.", dns.TypeA)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ans, err := c.Exchange(ctx, q)
		if err != nil || len(ans.Answer) != 1 {
			b.Fatalf("Exchange: %v %v", ans, err)
		}
	}
}

// BenchmarkExchangeParallel: many queries in flight, each on its own
// pooled socket.
func BenchmarkExchangeParallel(b *testing.B) {
	c, _ := newClient(b, Config{}, startFastResponder(b))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		q := question("www.Example.com.", dns.TypeA)
		ctx := context.Background()
		for pb.Next() {
			if _, err := c.Exchange(ctx, q); err != nil {
				b.Errorf("Exchange: %v", err)
				return
			}
		}
	})
}

// BenchmarkCheckReply: judging and parsing one answer, no network.
func BenchmarkCheckReply(b *testing.B) {
	q := question("www.example.com.", dns.TypeA)
	q.Id = 0x1234
	pkt := pack(b, reply(q, 3))
	want := &expected{id: 0x1234, name: "www.example.com.", qtype: dns.TypeA, qclass: dns.ClassINET}
	b.ReportAllocs()
	for b.Loop() {
		if _, v, _ := checkReply(pkt, want); v != replyAnswer {
			b.Fatal(fmt.Sprint("verdict ", v))
		}
	}
}
