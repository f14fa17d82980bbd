package resolver_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

func withDoQ(c *resolver.Config) {
	c.Encrypted.DoQ = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}
}

// doqAsk sends m on a new stream of conn and reads the reply.
func doqAsk(t *testing.T, conn *quic.Conn, m *dns.Msg) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	wire := mustPack(t, m)
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(wire)))
	if _, err := s.Write(append(msg, wire...)); err != nil {
		return nil, err
	}
	_ = s.Close() // the query is whole
	return io.ReadAll(s)
}

// TestDoQ: queries over DNS over QUIC, one per stream, are answered
// through the one entry, padded, the server name's client id carried to
// the observer; a message id other than 0 closes the connection
// (RFC 9250); DDR names the DoQ endpoint.
func TestDoQ(t *testing.T) {
	rec := &recorder{}
	e := newEncEnv(t, func(c *resolver.Config) { withDoQ(c); c.Observer = rec })
	addr := e.r.DoQAddrs()[0].String()
	tc := &tls.Config{RootCAs: e.ca.pool, ServerName: "kid4.dns.example.test", NextProtos: []string{"doq"}}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	for i := range 3 {
		m := query("doq.test", dns.TypeA, 1232, false)
		m.Id = 0
		b, err := doqAsk(t, conn, m)
		if err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		if len(b) < 2 || int(binary.BigEndian.Uint16(b)) != len(b)-2 || (len(b)-2)%468 != 0 {
			t.Fatalf("reply of %d bytes", len(b))
		}
		if r := mustUnpack(t, b[2:]); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("answer %v", r)
		}
		if ev := rec.next(t, i); ev.ClientID != "kid4" || ev.Transport.String() != "doq" {
			t.Fatalf("observer: %q over %s", ev.ClientID, ev.Transport)
		}
	}
	m := new(dns.Msg)
	m.SetQuestion("_dns.resolver.arpa.", dns.TypeSVCB)
	r := e.mustAsk("udp", "", m)
	if n := len(r.Answer); n != 3 || !strings.Contains(r.Answer[2].String(), `alpn="doq"`) {
		t.Fatalf("DDR: %v", r)
	}
	bad := query("doq.test", dns.TypeA, 1232, false)
	bad.Id = 7
	_, _ = doqAsk(t, conn, bad)
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		t.Fatal("a message id other than 0 did not close the connection")
	}
}

// TestKdigDoQ: kdig +quic, a DoQ client written by others.
func TestKdigDoQ(t *testing.T) {
	e := newEncEnv(t, withDoQ)
	host, port := splitHostPort(t, e.r.DoQAddrs()[0].String())
	out := e.runKdig(t, "@"+host, "-p", port, "+quic", "kdigq.test", "A")
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, upstreamA.String()) {
		t.Fatalf("kdig +quic:\n%s", out)
	}
}
