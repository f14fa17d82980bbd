package resolver_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// quicInitial is the first datagram of a real QUIC client (quic-go)
// dialling for DoQ: an Initial with (the start of) its ClientHello, under
// a connection id of its own. It is caught on a socket of the test's,
// which never answers.
func quicInitial(t testing.TB) []byte {
	t.Helper()
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ctx, cancel := context.WithCancel(context.Background())
	dialed := make(chan struct{})
	go func() {
		defer close(dialed)
		tc := &tls.Config{ServerName: "dns.example.test", NextProtos: []string{"doq"}}
		_, _ = quic.DialAddr(ctx, sink.LocalAddr().String(), tc, nil)
	}()
	defer func() { cancel(); <-dialed }()
	_ = sink.SetReadDeadline(time.Now().Add(bound))
	b := make([]byte, 2048)
	n, _, err := sink.ReadFrom(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// fakeInitial is a datagram that passes for a QUIC v1 Initial (long
// header, an 8-byte connection id, 1200 bytes) with a random payload that
// no key decrypts.
func fakeInitial() []byte {
	b := make([]byte, 1200)
	_, _ = rand.Read(b)
	b[0] = 0xc3 // long header, fixed bit, Initial, 4-byte packet number
	binary.BigEndian.PutUint32(b[1:], 1)
	b[5] = 8  // destination connection id (b[6:14])
	b[14] = 8 // source connection id (b[15:23])
	b[23] = 0 // no token
	binary.BigEndian.PutUint16(b[24:], 0x4000|uint16(len(b)-26))
	return b
}

func doqTimeouts(t testing.TB, reg prometheus.Gatherer) float64 {
	return promtest.Value(t, reg, "svcpf_resolver_tls_handshake_timeouts_total", "listener", "doq")
}

// doqQuery dials the DoQ listener from src (a local address) and asks one
// query.
func doqQuery(t *testing.T, e *encEnv, src string) error {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	tc := &tls.Config{RootCAs: e.ca.pool, ServerName: "dns.example.test", NextProtos: []string{"doq"}}
	conn, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(e.r.DoQAddrs()[0]), tc, nil)
	if err != nil {
		return err
	}
	defer conn.CloseWithError(0, "")
	m := query("doqhs.test", dns.TypeA, 1232, false)
	m.Id = 0
	b, err := doqAsk(t, conn, m)
	if err != nil {
		return err
	}
	if r := mustUnpack(t, b[2:]); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("answer %v", r)
	}
	return nil
}

// TestDoQHandshakeTimeout: QUIC clients that send their Initial and go
// silent are dropped after dns.tls.handshake_timeout (far before the idle
// timeout) and counted in svcpf_resolver_tls_handshake_timeouts_total
// {listener="doq"}; a client offering no common ALPN protocol is counted
// in _failures_total; a client completing its handshake in neither.
func TestDoQHandshakeTimeout(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEncEnv(t, func(c *resolver.Config) {
		withDoQ(c)
		c.Registerer = reg
		c.Encrypted.HandshakeTimeout = 300 * time.Millisecond
		c.Encrypted.IdleTimeout = time.Hour
	})
	failures := func() float64 {
		return promtest.Value(t, reg, "svcpf_resolver_tls_handshake_failures_total", "listener", "doq")
	}
	if err := doqQuery(t, e, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if n, f := doqTimeouts(t, reg), failures(); n != 0 || f != 0 {
		t.Fatalf("a completed handshake counted: %v timeouts, %v failures", n, f)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	to := net.UDPAddrFromAddrPort(e.r.DoQAddrs()[0])
	const silent = 2
	for range silent {
		if _, err := udp.WriteTo(quicInitial(t), to); err != nil {
			t.Fatal(err)
		}
	}
	// The server answers the Initials (its flight, within the
	// amplification limit): the connections exist.
	_ = udp.SetReadDeadline(time.Now().Add(bound))
	if _, _, err := udp.ReadFrom(make([]byte, 2048)); err != nil {
		t.Fatalf("no answer to a real Initial: %v", err)
	}
	eventually(t, "silent DoQ handshakes counted as timeouts", func() bool { return doqTimeouts(t, reg) == silent })

	tc := &tls.Config{RootCAs: e.ca.pool, ServerName: "dns.example.test", NextProtos: []string{"h3"}}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if conn, err := quic.DialAddr(ctx, to.String(), tc, nil); err == nil {
		_ = conn.CloseWithError(0, "")
		t.Fatal("a handshake without the doq ALPN protocol completed")
	}
	eventually(t, "a failed DoQ handshake counted", func() bool { return failures() == 1 })
	if n := doqTimeouts(t, reg); n != silent {
		t.Fatalf("%v timeouts, want %d", n, silent)
	}
}

// TestDoQInitialFlood: a flood of datagrams from one address — garbage,
// and Initials no key decrypts, each of which makes quic-go start a
// handshake — holds at most dns.tls.max_connections_per_client handshakes
// (past that its address must answer a Retry, which a spoofer or a flood
// does not); real DoQ clients, from another address and from the flooding
// one, are answered while it lasts.
func TestDoQInitialFlood(t *testing.T) {
	reg := prometheus.NewRegistry()
	const perClient = 3
	e := newEncEnv(t, func(c *resolver.Config) {
		withDoQ(c)
		c.Registerer = reg
		c.Encrypted.HandshakeTimeout = 2 * time.Second
		c.Encrypted.MaxConnectionsPerClient = perClient
	})
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	to := net.UDPAddrFromAddrPort(e.r.DoQAddrs()[0])
	garbage := make([]byte, 1300)
	for i := range 400 {
		b := fakeInitial()
		if i%2 == 1 {
			_, _ = rand.Read(garbage)
			b = garbage
		}
		if _, err := udp.WriteTo(b, to); err != nil {
			t.Fatal(err)
		}
	}
	for _, src := range []string{"127.0.0.2", "127.0.0.1"} {
		if err := doqQuery(t, e, src); err != nil {
			t.Fatalf("DoQ client from %s during the flood: %v", src, err)
		}
	}
	eventually(t, "the flood's handshakes time out", func() bool { return doqTimeouts(t, reg) >= perClient })
	time.Sleep(5 * time.Second) // 2×handshake_timeout: any other handshake would have ended
	if n := doqTimeouts(t, reg); n != perClient {
		t.Fatalf("%v handshakes from the flooding address timed out, want %d (the bound)", n, perClient)
	}
}

// deafConn is a client's UDP socket on which every datagram after the
// first is lost: a real QUIC client behind it gets the server's Retry,
// sends its Initial again with the token, and then never hears the
// server's handshake. heard is closed when the first lost datagram
// arrives (the server has the connection); retried says whether the
// first datagram was a Retry (else the server took the client's first
// Initial as it came, unproven).
type deafConn struct {
	c       *net.UDPConn
	n       int
	retried bool
	heard   chan struct{}
}

func (d *deafConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, a, err := d.c.ReadFrom(b)
		if err != nil {
			return n, a, err
		}
		if d.n++; d.n == 1 {
			// QUIC v1 long header, packet type 3: Retry.
			d.retried = n > 0 && b[0]&0x80 != 0 && (b[0]>>4)&0x3 == 3
			return n, a, nil
		}
		if d.n == 2 {
			close(d.heard)
		}
	}
}

func (d *deafConn) WriteTo(b []byte, a net.Addr) (int, error) { return d.c.WriteTo(b, a) }
func (d *deafConn) Close() error                              { return d.c.Close() }
func (d *deafConn) LocalAddr() net.Addr                       { return d.c.LocalAddr() }
func (d *deafConn) SetDeadline(t time.Time) error             { return d.c.SetDeadline(t) }
func (d *deafConn) SetReadDeadline(t time.Time) error         { return d.c.SetReadDeadline(t) }
func (d *deafConn) SetWriteDeadline(t time.Time) error        { return d.c.SetWriteDeadline(t) }

// TestDoQProvenHandshakeBound: handshakes from an address proven by a
// Retry are bounded by dns.tls.max_connections_per_client too: with its
// unproven handshakes at the bound (fake Initials) and then as many
// proven ones stalled (clients that pass the Retry and hear nothing
// more), one more client from that address is refused, one from another
// address is answered, and once they have timed out the address is
// answered again.
func TestDoQProvenHandshakeBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	const perClient = 2
	e := newEncEnv(t, func(c *resolver.Config) {
		withDoQ(c)
		c.Registerer = reg
		c.Encrypted.HandshakeTimeout = 2 * time.Second
		c.Encrypted.MaxConnectionsPerClient = perClient
	})
	to := net.UDPAddrFromAddrPort(e.r.DoQAddrs()[0])
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	for range perClient {
		if _, err := udp.WriteTo(fakeInitial(), to); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*bound)
	defer cancel()
	tc := &tls.Config{RootCAs: e.ca.pool, ServerName: "dns.example.test", NextProtos: []string{"doq"}}
	// quic-go may take a stalled client's Initial before the fake ones
	// (a loaded machine): such a client is one more unproven handshake,
	// and another is started until perClient were proven by a Retry.
	stalled := 0
	for proven := 0; proven < perClient; stalled++ {
		if stalled == 10*perClient {
			t.Fatalf("%d stalled clients, %d of them sent a Retry: the unproven bound does not hold", stalled, proven)
		}
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		deaf := &deafConn{c: c, heard: make(chan struct{})}
		tr := &quic.Transport{Conn: deaf}
		t.Cleanup(func() { _ = tr.Close(); _ = c.Close() })
		go func() { _, _ = tr.Dial(ctx, to, tc, nil) }()
		select {
		case <-deaf.heard:
		case <-time.After(bound):
			t.Fatalf("stalled client %d: the server never answered its Initial", stalled)
		}
		if deaf.retried {
			proven++
		}
	}
	if err := doqQuery(t, e, "127.0.0.1"); err == nil {
		t.Fatal("a client past the bound of proven handshakes was served")
	} else if !strings.Contains(err.Error(), "CONNECTION_REFUSED") {
		t.Fatalf("refused with %v, want CONNECTION_REFUSED", err)
	}
	if err := doqQuery(t, e, "127.0.0.2"); err != nil {
		t.Fatalf("a client from another address: %v", err)
	}
	cancel() // the stalled clients give up; their handshakes time out
	eventually(t, "the stalled handshakes time out", func() bool { return doqTimeouts(t, reg) == float64(perClient+stalled) })
	if err := doqQuery(t, e, "127.0.0.1"); err != nil {
		t.Fatalf("once the handshakes ended: %v", err)
	}
}
