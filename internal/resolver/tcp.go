package resolver

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

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

func (t *tcpServer) serve(r *Resolver) {
	t.srv = &dns.Server{
		Listener: t.ln, Net: "tcp", MaxTCPQueries: -1,
		IdleTimeout:   func() time.Duration { return r.cfg.TCPIdleTimeout },
		ReadTimeout:   r.cfg.TCPIdleTimeout,
		WriteTimeout:  5 * time.Second,
		Handler:       dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) { t.handle(r, w, req) }),
		MsgAcceptFunc: acceptAll,
	}
	_ = t.srv.ActivateAndServe()
}

// acceptAll leaves every message to the pipeline, which answers FORMERR
// or NOTIMP itself and counts it.
func acceptAll(dns.Header) dns.MsgAcceptAction { return dns.MsgAccept }

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
	if !r.allowed(client) {
		t.shard.Inc(stats.UnauthorizedTCP)
		_ = w.Close()
		return
	}
	t.shard.Question(true, client.Is6())
	if req.Response || req.Opcode != dns.OpcodeQuery {
		t.shard.Inc(stats.ClientParseErrors)
		reply := errorReply(req, dns.RcodeNotImplemented)
		if req.Opcode == dns.OpcodeQuery {
			reply.Rcode = dns.RcodeFormatError
		}
		t.write(r, w, req, reply, start)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
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
	wire, err := finish(req, reply, true)
	if err != nil {
		t.shard.Inc(stats.ServerParseErrors)
		wire, _ = finish(req, errorReply(req, dns.RcodeServerFailure), true)
	}
	_, _ = w.Write(wire)
	t.shard.Replied(reply.Rcode, r.now().Sub(start))
}

// limitListener closes connections beyond max at once and counts them
// (tcp-client-overflow), instead of letting them queue unseen; it keeps
// tcp-clients current.
type limitListener struct {
	net.Listener
	max   int64
	open  atomic.Int64
	shard *stats.Shard
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
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
