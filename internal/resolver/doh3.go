package resolver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2/hpack"
)

// DNS over HTTPS over HTTP/3 (RFC 8484 over RFC 9114), the DoH3 adapter
// of the entry (serve.go), on quic-go's http3. Its QUIC side is DoQ's
// (doq.go: the handshake timeout, the per-address handshake bound with
// its Retry, allow_from and the per-client connection bound, counted
// under the listener "doh3"); each accepted connection is handed to
// http3.Server, whose requests go to the HTTP/1.1 handler of doh.go
// (dohServer.ServeHTTP): the same parser (parseDoH), client ids (path,
// then SNI), padding, 4xx JSON errors and policy drop (a reset stream).
// Its queries are DoH queries to the policy, the activity log and dnstap
// (transport "doh"): HTTP/3 is one more way of carrying the same
// protocol. 0-RTT is not accepted: a replayed query would be answered
// (and logged) twice.

// doh3Server serves DoH over HTTP/3 on one UDP address.
type doh3Server struct {
	q    *doqServer // the QUIC listener and its connections
	h3   *http3.Server
	doh  *dohServer // the request handler, HTTP/1.1's
	idle time.Duration
}

// doh3AltSvcMaxAge is how long a client may remember the Alt-Svc
// advertisement (seconds): a day. A client that finds the HTTP/3
// endpoint gone falls back to the TCP one.
const doh3AltSvcMaxAge = 86400

// listenDoH3 binds dns.doh3, after dns.doh (whose answers then advertise
// it, altSvc).
func (r *Resolver) listenDoH3(certs getCertFunc, counts *handshakeCounts) error {
	c := &r.cfg.Encrypted
	for _, ap := range c.DoH3 {
		tc := &tls.Config{GetCertificate: certs, MinVersion: tls.VersionTLS13, NextProtos: []string{http3.NextProtoH3}}
		// Unidirectional streams: HTTP/3's control and QPACK streams (3),
		// with room for the reserved ones a client may open to grease.
		qc := &quic.Config{MaxIdleTimeout: c.IdleTimeout, HandshakeIdleTimeout: c.HandshakeTimeout,
			MaxIncomingStreams: int64(c.MaxQueriesPerConnection), MaxIncomingUniStreams: 16}
		q, err := r.listenQUIC("dns.doh3", ap, tc, qc, counts)
		if err != nil {
			return err
		}
		d := &doh3Server{q: q, idle: c.IdleTimeout,
			doh: &dohServer{r: r, addr: q.addr, shard: q.shard}}
		d.doh.fronts.New = func() any { return newFront(r, q.shard, nil, nil) }
		d.h3 = &http3.Server{
			Handler:        d,
			MaxHeaderBytes: 16 << 10,
			IdleTimeout:    c.IdleTimeout,
			Logger:         slog.New(infoFloor{r.log.Handler()}),
		}
		q.handle = d.serveConn
		r.doh3 = append(r.doh3, d)
	}
	for _, d := range r.doh {
		d.advertiseH3(altSvc(d.addr, r.DoH3Addrs()))
	}
	return nil
}

// DoH3Addrs are the bound dns.doh3 addresses (UDP), in config order.
func (r *Resolver) DoH3Addrs() []netip.AddrPort { return addrsOf(r.doh3) }

func (d *doh3Server) boundAddr() netip.AddrPort { return d.q.addr }

// serve accepts connections until the listener closes.
func (d *doh3Server) serve() { d.q.serve() }

// serveConn serves one accepted connection's requests until it closes.
func (d *doh3Server) serveConn(c *quic.Conn, _ netip.AddrPort) {
	err := d.h3.ServeQUICConn(c)
	if errors.Is(err, http.ErrServerClosed) {
		_ = c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
}

// ServeHTTP answers one request: the HTTP/1.1 handler's, with the
// request's reading and the answer's writing bounded by the idle timeout
// (a client trickling a body holds a stream no longer).
func (d *doh3Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(d.idle)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
	d.doh.ServeHTTP(w, req)
}

// stop stops accepting connections and sends every connection a GOAWAY
// (no new requests; a client closes its connection once its requests
// are answered), lets the requests under way be answered until
// deadline, then closes the connections left. Closing a connection as
// soon as its handlers returned would lose the answers not yet sent.
func (d *doh3Server) stop(deadline time.Time) {
	q := d.q
	q.mu.Lock()
	q.done = true
	q.mu.Unlock()
	_ = q.ln.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_ = d.h3.Shutdown(ctx) // at deadline it closes the connections left
	_ = d.h3.Close()
	q.wg.Wait()
	_ = q.tr.Close()
	_ = q.udp.Close()
}

// altSvc is the Alt-Svc field value a DoH listener at doh advertises the
// dns.doh3 listeners with ("": none): those a client reaches at the host
// it reached doh at (the same address, or either is a wildcard), each
// port once.
func altSvc(doh netip.AddrPort, h3 []netip.AddrPort) string {
	var ports []uint16
	for _, a := range h3 {
		if !sameHost(doh.Addr(), a.Addr()) || slices.Contains(ports, a.Port()) {
			continue
		}
		ports = append(ports, a.Port())
	}
	var b strings.Builder
	for i, p := range ports {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `h3=":%d"; ma=%d`, p, doh3AltSvcMaxAge)
	}
	return b.String()
}

// sameHost: a client that reached a listener bound to a may reach one
// bound to b at the same address.
func sameHost(a, b netip.Addr) bool {
	return a.IsUnspecified() || b.IsUnspecified() || a.Unmap() == b.Unmap()
}

// advertiseH3 adds Alt-Svc: v to the listener's answers (HTTP/1.1 and
// HTTP/2); before serve.
func (d *dohServer) advertiseH3(v string) {
	if v == "" {
		return
	}
	d.altSvc = v
	d.hdr = newDoHHeaders()
	for _, l := range []*[]hpack.HeaderField{&d.hdr.ok, &d.hdr.err, &d.hdr.allow} {
		*l = append(*l, hpack.HeaderField{Name: "alt-svc", Value: v})
	}
}

// infoFloor passes on http3's lines from Info up (a handler's panic and
// the like): its debug lines, one per request, would flood a resolver
// run with --debug.
type infoFloor struct{ slog.Handler }

func (h infoFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo && h.Handler.Enabled(ctx, l)
}
