package resolver

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// tcpServer serves DNS over TCP on one address: miekg/dns's connection
// loop (pipelined queries are read in turn, idle connections closed) over
// a listener that refuses connections past the limit.
type tcpServer struct {
	addr  netip.AddrPort
	ln    *limitListener
	srv   *dns.Server
	shard *stats.Shard
}

// newTCPServer builds the miekg/dns server of one TCP listener (before Run,
// so that Close never races with serve over it).
func newTCPServer(r *Resolver, addr netip.AddrPort, ln *limitListener, shard *stats.Shard) *tcpServer {
	t := &tcpServer{addr: addr, ln: ln, shard: shard}
	t.srv = &dns.Server{
		Listener: t.ln, Net: "tcp", MaxTCPQueries: -1,
		IdleTimeout:    func() time.Duration { return r.cfg.TCPIdleTimeout },
		ReadTimeout:    r.cfg.TCPIdleTimeout,
		WriteTimeout:   5 * time.Second,
		Handler:        dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) { t.handle(r, w, req) }),
		MsgAcceptFunc:  acceptAll,
		DecorateReader: func(rd dns.Reader) dns.Reader { return checkedReader{Reader: rd, shard: shard} },
		// What dnswire accepted and miekg/dns cannot unpack: miekg/dns
		// answers FORMERR itself.
		MsgInvalidFunc: func([]byte, error) { shard.Inc(stats.ClientParseErrors) },
	}
	return t
}

func (t *tcpServer) serve() { _ = t.srv.ActivateAndServe() }

// acceptAll leaves every message to the pipeline, which answers FORMERR
// or NOTIMP itself and counts it.
func acceptAll(dns.Header) dns.MsgAcceptAction { return dns.MsgAccept }

// errTCPDrop ends a connection whose message gets no answer.
var errTCPDrop = errors.New("resolver: a TCP message without a header, or a response: connection closed")

// checkedReader parses each TCP message with dnswire before miekg/dns
// sees it, so that TCP refuses, answers and counts malformed queries as
// UDP does (pipeline.go step 2). A message that gets no answer (no header,
// or a response) closes the connection, as PowerDNS does; the others get
// their FORMERR or NOTIMP here and the connection reads on.
type checkedReader struct {
	dns.Reader
	shard *stats.Shard
}

func (c checkedReader) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	for {
		m, err := c.Reader.ReadTCP(conn, timeout)
		if err != nil {
			return nil, err
		}
		var q dnswire.Query
		err = q.Parse(m)
		if err == nil {
			return m, nil
		}
		var pe dnswire.ParseError
		errors.As(err, &pe)
		countParseError(c.shard, pe)
		if pe == 0 || pe.Drop() {
			return nil, errTCPDrop
		}
		out := dnswire.AppendError(make([]byte, 2, 2+dnswire.MaxReplyLen), &q, pe.Rcode(), ourUDPSize)
		binary.BigEndian.PutUint16(out, uint16(len(out)-2))
		if err := conn.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return nil, err
		}
		if _, err := conn.Write(out); err != nil {
			return nil, err
		}
	}
}

func (t *tcpServer) close() {
	if t.srv != nil {
		_ = t.srv.Shutdown()
	}
	_ = t.ln.Close()
}

func (t *tcpServer) handle(r *Resolver, w dns.ResponseWriter, req *dns.Msg) {
	start := r.now()
	ap, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	client := ap.Addr().Unmap()
	t.shard.Question(true, client.Is6())
	opt := req.IsEdns0()
	if opt != nil && opt.Do() {
		t.shard.Inc(stats.DNSSECQueries)
	}
	if opt != nil && opt.Version() != 0 {
		t.write(r, w, req, errorReply(req, dns.RcodeBadVers), start) // RFC 6891 §6.1.3
		return
	}
	ctx := queryContext(start)
	t.shard.Inc(stats.ConcurrentQueries)
	reply := r.resolve(ctx, &query{req: req, client: client, tcp: true, start: start, shard: t.shard})
	t.shard.Dec(stats.ConcurrentQueries)
	if reply == nil {
		_ = w.Close() // drop: over TCP, close the connection
		return
	}
	t.write(r, w, req, reply, start)
}

func (t *tcpServer) write(r *Resolver, w dns.ResponseWriter, req, reply *dns.Msg, start time.Time) {
	wire, err := finish(nil, req, reply, true)
	if err != nil {
		t.shard.Inc(stats.ServerParseErrors)
		wire, _ = finish(nil, req, errorReply(req, dns.RcodeServerFailure), true)
	}
	_, _ = w.Write(wire)
	t.shard.Replied(reply.Rcode, r.now().Sub(start))
}

// limitListener closes a connection from outside allow_from at once
// (unauthorized-tcp, as PowerDNS checks allow-from on accept), and
// connections beyond max (tcp-client-overflow), instead of letting them
// queue unseen; it keeps tcp-clients current.
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	shard   *stats.Shard
	allowed func(netip.Addr) bool
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && !l.allowed(a.AddrPort().Addr().Unmap()) {
			l.shard.Inc(stats.UnauthorizedTCP)
			_ = c.Close()
			continue
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.shard.Inc(stats.TCPClientOverflow)
			_ = c.Close()
			continue
		}
		l.shard.Inc(stats.TCPClients)
		return &countedConn{Conn: c, l: l}, nil
	}
}

type countedConn struct {
	net.Conn
	l      *limitListener
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		c.l.shard.Dec(stats.TCPClients)
	}
	return c.Conn.Close()
}
