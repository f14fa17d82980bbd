package resolver_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// clientHello is the first flight of a real TLS client for
// dns.example.test: a whole ClientHello record.
func clientHello(t testing.TB) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: "dns.example.test", MinVersion: tls.VersionTLS12, NextProtos: []string{"dot"}})
		_ = c.Handshake() // fails when b closes
	}()
	_ = b.SetReadDeadline(time.Now().Add(bound))
	var hdr [5]byte
	if _, err := io.ReadFull(b, hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr[:], body...)
}

// dialFrom opens a TCP connection to addr from the local address src.
func dialFrom(t testing.TB, src, addr string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: bound, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// closedWithin reports whether the server closes c (a read ends in EOF
// or a reset, after any alert it sends) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestEncryptedHandshakeTimeout: connections to the DoT and DoH listeners
// that never complete their TLS handshake — silent, or stopped half-way
// through a ClientHello — are closed after dns.tls.handshake_timeout,
// far before the idle timeout, and counted in
// svcpf_resolver_tls_handshake_timeouts_total; while they are open they
// count against the per-client bound (one more from that address is
// closed at once), and a client from another address is answered
// meanwhile; once they are closed their address has room again.
func TestEncryptedHandshakeTimeout(t *testing.T) {
	reg := prometheus.NewRegistry()
	const hsTimeout = 300 * time.Millisecond
	e := newEncEnv(t, func(c *resolver.Config) {
		c.Registerer = reg
		c.Encrypted.HandshakeTimeout = hsTimeout
		c.Encrypted.IdleTimeout = time.Hour // what bounded a stalled handshake before
		c.Encrypted.MaxConnectionsPerClient = 3
	})
	hello := clientHello(t)
	for _, tc := range []struct {
		listener, addr string
		good           func(t *testing.T, src string) error
	}{
		{"dot", e.dot, func(t *testing.T, src string) error {
			d := &net.Dialer{Timeout: bound, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			c, err := tls.DialWithDialer(d, "tcp", e.dot, e.tlsConfig("dns.example.test"))
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(bound))
			writeTCP(t, c, mustPack(t, query("h.example.", dns.TypeA, 0, false)))
			if _, closed := readTCP(t, c); closed {
				return errors.New("closed without an answer")
			}
			return nil
		}},
		{"doh", e.doh, func(t *testing.T, src string) error {
			tr := &http.Transport{TLSClientConfig: e.tlsConfig("dns.example.test"), ForceAttemptHTTP2: true,
				DialContext: (&net.Dialer{Timeout: bound, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodPost, e.dohURL("/dns-query"),
				strings.NewReader(string(mustPack(t, query("h.example.", dns.TypeA, 0, false)))))
			req.Header.Set("Content-Type", "application/dns-message")
			resp, err := (&http.Client{Transport: tr, Timeout: bound}).Do(req)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return errors.New(resp.Status)
			}
			return nil
		}},
	} {
		t.Run(tc.listener, func(t *testing.T) {
			before := promtest.Value(t, reg, "svcpf_resolver_tls_handshake_timeouts_total", "listener", tc.listener)
			// three stalled connections from 127.0.0.1: the bound
			silent := dialFrom(t, "127.0.0.1", tc.addr)
			half := dialFrom(t, "127.0.0.1", tc.addr)
			if _, err := half.Write(hello[:len(hello)/2]); err != nil {
				t.Fatal(err)
			}
			header := dialFrom(t, "127.0.0.1", tc.addr)
			if _, err := header.Write(hello[:3]); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			// the fourth from that address is closed at once (it is
			// accepted after the three: the listener takes them in turn)
			time.Sleep(50 * time.Millisecond)
			over := dialFrom(t, "127.0.0.1", tc.addr)
			if !closedWithin(over, hsTimeout/2) {
				t.Fatal("a connection over the per-client bound was not closed at once")
			}
			// another address is served while they stall
			if err := tc.good(t, "127.0.0.2"); err != nil {
				t.Fatalf("a client from 127.0.0.2 while 127.0.0.1 stalls: %v", err)
			}
			for name, c := range map[string]net.Conn{"silent": silent, "half a ClientHello": half, "a record header's first bytes": header} {
				if !closedWithin(c, bound) {
					t.Fatalf("%s: not closed within %v", name, bound)
				}
			}
			if el := time.Since(start); el < hsTimeout/2 {
				t.Fatalf("stalled connections closed after %v, before the handshake timeout", el)
			}
			eventually(t, "3 handshake timeouts counted", func() bool {
				return promtest.Value(t, reg, "svcpf_resolver_tls_handshake_timeouts_total", "listener", tc.listener)-before == 3
			})
			// room again for 127.0.0.1
			if err := tc.good(t, "127.0.0.1"); err != nil {
				t.Fatalf("127.0.0.1 after its stalled connections closed: %v", err)
			}
		})
	}
}

// malformedHellos are first bytes no TLS server can complete a handshake
// with: each must end in the connection's close (an alert, or the
// handshake timeout), counted, and never in a hang or a crash.
func malformedHellos(t testing.TB) map[string][]byte {
	hello := clientHello(t)
	long := append([]byte(nil), hello...)
	long[3], long[4] = 0xff, 0xff // record length past the maximum
	badType := append([]byte(nil), hello...)
	badType[0] = 0x17 // application data before any handshake
	badMsg := append([]byte(nil), hello...)
	badMsg[5] = 0x02 // a ServerHello from the client
	shortLen := append([]byte(nil), hello...)
	shortLen[8]-- // the handshake message claims one byte less than the record carries
	sslv2 := []byte{0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10}
	zeroLen := []byte{0x16, 0x03, 0x01, 0x00, 0x00}
	return map[string][]byte{
		"random bytes":             {0x9f, 0x11, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x42, 0x07},
		"plain DNS over TCP":       {0x00, 0x1d, 0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 'h', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1},
		"an HTTP request":          []byte("GET /dns-query HTTP/1.1\r\nHost: x\r\n\r\n"),
		"SSLv2 ClientHello":        sslv2,
		"empty handshake record":   zeroLen,
		"record too long":          long,
		"application data first":   badType,
		"ServerHello from client":  badMsg,
		"handshake length off":     shortLen,
		"ClientHello cut in half":  hello[:len(hello)/2],
		"ClientHello less a byte":  hello[:len(hello)-1],
		"a record header only":     hello[:5],
		"ClientHello twice":        append(append([]byte(nil), hello...), hello...)[:len(hello)+7],
		"TLS 1.0 record, no bytes": {0x16, 0x03, 0x01},
	}
}

// TestDoTMalformedClientHello: each malformed first flight to the DoT
// listener ends in the connection's close within the handshake timeout
// (whether the client keeps its side open or closes it), is counted as a
// handshake failure or timeout, and the listener answers a good client
// afterwards.
func TestDoTMalformedClientHello(t *testing.T) {
	reg := prometheus.NewRegistry()
	const hsTimeout = 300 * time.Millisecond
	e := newEncEnv(t, func(c *resolver.Config) {
		c.Registerer = reg
		c.Encrypted.HandshakeTimeout = hsTimeout
		c.Encrypted.IdleTimeout = time.Hour
	})
	count := func() float64 {
		return promtest.Value(t, reg, "svcpf_resolver_tls_handshake_timeouts_total", "listener", "dot") +
			promtest.Value(t, reg, "svcpf_resolver_tls_handshake_failures_total", "listener", "dot")
	}
	before := count()
	n := 0
	for name, b := range malformedHellos(t) {
		for _, closeWrite := range []bool{false, true} {
			c := dialFrom(t, "127.0.0.1", e.dot)
			if _, err := c.Write(b); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if closeWrite {
				_ = c.CloseWrite()
			}
			if !closedWithin(c, bound) {
				t.Fatalf("%s (close write %v): not closed within %v", name, closeWrite, bound)
			}
			_ = c.Close()
			n++
		}
	}
	eventually(t, "every malformed handshake counted", func() bool { return count()-before == float64(n) })
	if _, _, st := e.dotAsk(t, "dns.example.test", query("h.example.", dns.TypeA, 0, false)); !st.HandshakeComplete {
		t.Fatal("no handshake after the malformed ones")
	}
}

// FuzzDoTClientHello feeds each input, as a client's first bytes, to a
// live DoT listener (one resolver for the whole run) and closes the
// client's side: the server must close the connection within the
// handshake timeout and go on serving. The TLS parsing itself is
// crypto/tls's; what this guards is the listener around it (the
// handshake off the accept loop, its deadline, the counting), which no
// parser-level fuzz target would reach.
func FuzzDoTClientHello(f *testing.F) {
	for _, b := range malformedHellos(f) {
		f.Add(b)
	}
	f.Add(clientHello(f))
	f.Add([]byte{})
	e := newEncEnv(f, func(c *resolver.Config) {
		c.Encrypted.HandshakeTimeout = 300 * time.Millisecond
		c.Encrypted.IdleTimeout = time.Hour
		c.Encrypted.MaxConnectionsPerClient = 1000
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := dialFrom(t, "127.0.0.1", e.dot)
		if len(b) > 0 {
			if _, err := c.Write(b); err != nil {
				return // the server closed already: what we check
			}
		}
		_ = c.CloseWrite()
		if !closedWithin(c, bound) {
			t.Fatalf("not closed within %v", bound)
		}
	})
}
