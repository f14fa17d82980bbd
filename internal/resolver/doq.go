package resolver

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// DNS over QUIC (RFC 9250), the DoQ adapter of the entry (serve.go), on
// quic-go: a connection (ALPN "doq") carries one query per bidirectional
// stream, length-prefixed as over TCP; the client ends its side after the
// query, the server answers on the same stream and ends it. A stream's
// query is handed to the entry on the stream's goroutine, as a DoH
// request's is.
//
// Handshakes: quic-go hands Accept only connections whose handshake
// completed, and drops the others itself after HandshakeIdleTimeout. To
// count those (svcpf_resolver_tls_handshake_timeouts_total and
// _failures_total, listener "doq", as DoT's and DoH's), every connection
// quic-go creates passes connContext, whose context quic-go cancels, with
// the reason, when the connection ends: one that ends before Accept took
// it is a handshake that did not complete. The per-client bound counts
// accepted connections only: before its handshake completes a
// connection's source address is not proven (an Initial is one spoofable
// datagram), and counting those would let anyone lock a victim's address
// out of DoQ. A source address with a bound's worth of handshakes under
// way must prove itself with a Retry (one round trip, no state kept on
// the server) before it gets another, so a flood of Initials from one
// address holds at most that many handshakes, and a real client from that
// address still gets through. The handshakes of Initials that passed the
// Retry (their address is proven) are bounded apart, by the same number:
// one more is refused, so a client at its own address cannot hold more
// than twice the bound, and a spoofer cannot use up the proven slots.

// DoQ error codes (RFC 9250 §4.3).
const (
	doqNoError         = 0x0
	doqProtocolError   = 0x2
	doqRequestCanceled = 0x3
)

// doqServer is a QUIC listener's connection machinery (the handshake
// bounds, Retry, allow_from, the per-client bound) and DoQ's streams; DoH
// over HTTP/3 (doh3.go) shares the machinery and hands each connection to
// http3 instead (handle).
type doqServer struct {
	r      *Resolver
	addr   netip.AddrPort
	ln     *quic.Listener
	tr     *quic.Transport
	udp    *net.UDPConn
	counts *handshakeCounts
	shard  *stats.Shard
	fronts sync.Pool // *front, one per stream at a time
	idle   time.Duration
	suffix string
	max    int // connections per client address
	// handle serves an accepted connection instead of serveConn's DoQ
	// streams (DoH3); nil: DoQ.
	handle func(c *quic.Conn, from netip.AddrPort)

	mu    sync.Mutex
	open  map[netip.Addr]int // accepted connections
	hs    map[netip.Addr]int // handshakes under way, address not proven
	hsv   map[netip.Addr]int // handshakes under way, address proven by a Retry token
	conns map[*quic.Conn]struct{}
	done  bool
	wg    sync.WaitGroup // connection goroutines
}

// listenDoQ binds one dns.doq address; its handshakes that do not
// complete are counted in counts.
func (r *Resolver) listenDoQ(ap netip.AddrPort, certs getCertFunc, counts *handshakeCounts) (*doqServer, error) {
	c := &r.cfg.Encrypted
	tc := &tls.Config{GetCertificate: certs, MinVersion: tls.VersionTLS13, NextProtos: []string{"doq"}}
	qc := &quic.Config{MaxIdleTimeout: c.IdleTimeout, HandshakeIdleTimeout: c.HandshakeTimeout, MaxIncomingStreams: int64(c.MaxQueriesPerConnection),
		MaxIncomingUniStreams: -1}
	return r.listenQUIC("dns.doq", ap, tc, qc, counts)
}

// listenQUIC binds one QUIC address of key (dns.doq, dns.doh3).
func (r *Resolver) listenQUIC(key string, ap netip.AddrPort, tc *tls.Config, qc *quic.Config, counts *handshakeCounts) (*doqServer, error) {
	c := &r.cfg.Encrypted
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (is the address this host's, and the UDP port free?)", key, ap, err)
	}
	d := &doqServer{r: r, addr: udp.LocalAddr().(*net.UDPAddr).AddrPort(), udp: udp, counts: counts, shard: r.stats.Shard(uint(r.shardSeq.Add(1))),
		idle: c.IdleTimeout, suffix: c.ClientIDSuffix, max: c.MaxConnectionsPerClient,
		open: map[netip.Addr]int{}, hs: map[netip.Addr]int{}, hsv: map[netip.Addr]int{}, conns: map[*quic.Conn]struct{}{}}
	d.tr = &quic.Transport{Conn: udp, ConnContext: d.connContext, VerifySourceAddress: d.mustRetry}
	ln, err := d.tr.Listen(tc, qc)
	if err != nil {
		_ = udp.Close()
		return nil, fmt.Errorf("%s %s: %w", key, ap, err)
	}
	d.ln = ln
	d.fronts.New = func() any { return newFront(r, d.shard, nil, nil) }
	return d, nil
}

// doqHandshake is a connection's handshake state, from quic-go's creating
// the connection: ended is set once, by Accept (completed) or by the
// connection's end before it (did not complete).
type doqHandshake struct {
	from     netip.Addr
	verified bool
	ended    atomic.Bool
}

type doqHandshakeKey struct{}

var (
	errDoQStopping = errors.New("dns.doq: stopping")
	errDoQBound    = errors.New("dns.doq: too many handshakes under way from this address")
)

// handshakes returns the map counting h's kind of handshakes; d.mu held.
func (d *doqServer) handshakes(h *doqHandshake) map[netip.Addr]int {
	if h.verified {
		return d.hsv
	}
	return d.hs
}

// connContext runs, on quic-go's packet loop, for each connection quic-go
// creates from a client's Initial, before its handshake.
func (d *doqServer) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	h := &doqHandshake{from: addrPortOf(info.RemoteAddr).Addr().Unmap(), verified: info.AddrVerified}
	d.mu.Lock()
	if d.done {
		d.mu.Unlock()
		return nil, errDoQStopping
	}
	hs := d.handshakes(h)
	if h.verified && hs[h.from] >= d.max {
		d.mu.Unlock()
		// quic-go answers CONNECTION_REFUSED. Not counted as a handshake
		// failure: none was started, as DoT's and DoH's connections past
		// the bound are not counted either.
		return nil, errDoQBound
	}
	hs[h.from]++
	d.mu.Unlock()
	// No goroutine per handshake: the function runs when quic-go cancels
	// ctx, at the connection's end.
	context.AfterFunc(ctx, func() {
		if !d.endHandshake(h) {
			return // accepted: serveConn's
		}
		d.mu.Lock()
		stopping := d.done
		d.mu.Unlock()
		if stopping {
			return // closed by stop: not the client's doing
		}
		var ne net.Error
		if err := context.Cause(ctx); errors.As(err, &ne) && ne.Timeout() {
			// HandshakeTimeoutError or IdleTimeoutError: the client
			// stalled (or its Initial could not be decrypted).
			d.counts.timeouts.Add(1)
		} else {
			// A TLS alert (no common ALPN protocol or version), a
			// protocol violation, the client's close, or the accept
			// queue full.
			d.counts.failures.Add(1)
		}
	})
	return context.WithValue(ctx, doqHandshakeKey{}, h), nil
}

// endHandshake marks h ended and takes it off its address's handshakes;
// false: it had ended already.
func (d *doqServer) endHandshake(h *doqHandshake) bool {
	if !h.ended.CompareAndSwap(false, true) {
		return false
	}
	d.mu.Lock()
	hs := d.handshakes(h)
	if hs[h.from]--; hs[h.from] <= 0 {
		delete(hs, h.from)
	}
	d.mu.Unlock()
	return true
}

// mustRetry tells quic-go to send a Retry to an Initial without a valid
// token when its source address already has a bound's worth of
// handshakes under way.
func (d *doqServer) mustRetry(a net.Addr) bool {
	from := addrPortOf(a).Addr().Unmap()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hs[from] >= d.max
}

// serve accepts connections until the listener closes.
func (d *doqServer) serve() {
	for {
		conn, err := d.ln.Accept(context.Background())
		if err != nil {
			return // closed
		}
		if h, ok := conn.Context().Value(doqHandshakeKey{}).(*doqHandshake); ok {
			d.endHandshake(h) // completed
		}
		from := addrPortOf(conn.RemoteAddr())
		if !d.r.allowed(from.Addr().Unmap()) {
			d.shard.Inc(stats.UnauthorizedUDP)
			_ = conn.CloseWithError(doqNoError, "")
			continue
		}
		if !d.track(conn, from.Addr().Unmap()) {
			_ = conn.CloseWithError(doqNoError, "")
			continue
		}
		go d.serveConn(conn, from)
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.AddrPort()
	}
	return netip.AddrPort{}
}

// track registers a connection within its address's bound; false: over
// it, or stopping.
func (d *doqServer) track(c *quic.Conn, a netip.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done || d.open[a] >= d.max {
		return false
	}
	d.open[a]++
	d.conns[c] = struct{}{}
	d.wg.Add(1)
	return true
}

func (d *doqServer) untrack(c *quic.Conn, a netip.Addr) {
	d.mu.Lock()
	if d.open[a]--; d.open[a] <= 0 {
		delete(d.open, a)
	}
	delete(d.conns, c)
	d.mu.Unlock()
	d.wg.Done()
}

// serveConn accepts the connection's streams until it closes (idle, the
// client's close, stop).
func (d *doqServer) serveConn(c *quic.Conn, from netip.AddrPort) {
	defer d.untrack(c, from.Addr().Unmap())
	if d.handle != nil {
		d.handle(c, from)
		return
	}
	clientID := clientIDFromSNI(c.ConnectionState().TLS.ServerName, d.suffix)
	var streams sync.WaitGroup
	defer streams.Wait()
	for {
		s, err := c.AcceptStream(context.Background())
		if err != nil {
			return
		}
		streams.Go(func() { d.serveStream(c, s, from, clientID) })
	}
}

// serveStream answers a stream's query.
func (d *doqServer) serveStream(c *quic.Conn, s *quic.Stream, from netip.AddrPort, clientID string) {
	_ = s.SetReadDeadline(time.Now().Add(d.idle))
	var l [2]byte
	if _, err := io.ReadFull(s, l[:]); err != nil {
		s.CancelRead(doqRequestCanceled)
		s.CancelWrite(doqRequestCanceled)
		return
	}
	pkt := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(s, pkt); err != nil {
		s.CancelRead(doqRequestCanceled)
		s.CancelWrite(doqRequestCanceled)
		return
	}
	if len(pkt) >= 2 && binary.BigEndian.Uint16(pkt) != 0 {
		// RFC 9250 §4.2.1: a query's id is 0 over DoQ; another is a
		// protocol error, which closes the connection.
		_ = c.CloseWithError(doqProtocolError, "message id must be 0")
		return
	}
	r := d.r
	rp := &dohReplier{fin: make(chan struct{})} // the same hand-back as a DoH request's
	v := r.engine.View()
	rq := request{from: from, transport: policy.TransportDoQ, clientID: clientID, pkt: pkt, start: r.now(), owned: true, inline: true}
	f := d.fronts.Get().(*front)
	reply, out := f.serve(rp, &rq, &v, -1, nil)
	d.fronts.Put(f)
	switch out {
	case outPending:
		select {
		case <-rp.fin:
		case <-c.Context().Done():
			return
		}
		if rp.drop || rp.wire == nil {
			s.CancelWrite(doqRequestCanceled) // dropped: no answer, as a TCP connection is closed
			return
		}
		reply = rp.wire
	case outClose:
		s.CancelWrite(doqProtocolError) // not a query
		return
	}
	reply = padReply(reply)
	msg := make([]byte, 2+len(reply))
	binary.BigEndian.PutUint16(msg, uint16(len(reply)))
	copy(msg[2:], reply)
	_ = s.SetWriteDeadline(time.Now().Add(d.idle))
	if _, err := s.Write(msg); err != nil {
		s.CancelWrite(doqRequestCanceled)
		return
	}
	_ = s.Close()
}

// stop closes the listener, lets the streams read be answered until
// deadline, then closes the connections left.
func (d *doqServer) stop(deadline time.Time) {
	d.mu.Lock()
	d.done = true
	d.mu.Unlock()
	_ = d.ln.Close()
	defer func() {
		_ = d.tr.Close()
		_ = d.udp.Close()
	}()
	if waitUntil(&d.wg, deadline) {
		return
	}
	d.mu.Lock()
	for c := range d.conns {
		_ = c.CloseWithError(doqNoError, "shutting down")
	}
	d.mu.Unlock()
	d.wg.Wait()
}
