package resolver

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// tcpShutdownGrace is how long Close lets TCP queries already read be
// answered before it closes their connections: a bound, so that a client
// that never reads its answers cannot hold the shutdown (UDP's queries in
// flight get none: their socket is closed at once).
const tcpShutdownGrace = time.Second

// tcpServer serves DNS over TCP on one address (RFC 7766): the TCP
// adapter of the entry (serve.go). A connection's reader reads its
// queries in turn and hands each to the entry, which answers what needs no
// pipeline (FORMERR, NOTIMP, BADVERS) at once; every other query is
// answered on a goroutine of its own, up to Config.TCPMaxQueriesPerConnection of a
// connection at once (RFC 7766 §6.2.1.1: a slow answer does not hold up
// the ones after it), each holding a slow-path slot of its client
// (inFlight). Replies are written whole, one at a time, each within the
// idle timeout, so that a client that stops reading loses its connection
// instead of holding it, and its goroutines, for ever.
type tcpServer struct {
	r     *Resolver
	addr  netip.AddrPort
	ln    *limitListener
	shard *stats.Shard
	done  chan struct{} // closed by stop: accept and read no more

	mu    sync.RWMutex // conns; done's closing against armRead
	conns map[*tcpConn]struct{}
	wg    sync.WaitGroup // one per connection in conns
}

func newTCPServer(r *Resolver, addr netip.AddrPort, ln *limitListener, shard *stats.Shard) *tcpServer {
	return &tcpServer{r: r, addr: addr, ln: ln, shard: shard, done: make(chan struct{}), conns: map[*tcpConn]struct{}{}}
}

// serve accepts connections until the listener is closed.
func (t *tcpServer) serve() {
	var backoff time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait a little, as
			// net/http's server does, rather than spin on the error.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc := t.track(c)
		if tc == nil {
			_ = c.Close() // accepted while stopping
			return
		}
		go tc.serve()
	}
}

// track registers a new connection; nil once stop has begun.
func (t *tcpServer) track(c net.Conn) *tcpConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.done:
		return nil
	default:
	}
	var from netip.AddrPort // always set: the listener is a TCP one
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		from = a.AddrPort()
	}
	tc := &tcpConn{t: t, conn: c, from: from, idle: t.r.cfg.TCPIdleTimeout,
		slots: make(chan struct{}, t.r.cfg.TCPMaxQueriesPerConnection),
		front: newFront(t.r, t.shard, nil, nil)}
	t.conns[tc] = struct{}{}
	t.wg.Add(1)
	return tc
}

func (t *tcpServer) untrack(c *tcpConn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	t.wg.Done()
}

// armRead sets a connection's read deadline d from now, unless stop has
// begun: stop's deadline in the past must not be moved forward again.
func (t *tcpServer) armRead(c net.Conn, d time.Duration) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	select {
	case <-t.done:
		return false
	default:
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	return true
}

// stop closes the listener and makes every connection stop reading; the
// queries already read go on (drain).
func (t *tcpServer) stop() {
	t.mu.Lock()
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	for c := range t.conns {
		_ = c.conn.SetReadDeadline(time.Unix(1, 0))
	}
	t.mu.Unlock()
	_ = t.ln.Close()
}

// drain waits, until deadline at most, for the connections to answer
// what they read, then closes those left: a query still waiting on a
// forwarder finds its connection gone when it writes (within the 5 s
// bound of a query), and a blocked write fails at once.
func (t *tcpServer) drain(deadline time.Time) {
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
	t.mu.Lock()
	for c := range t.conns {
		_ = c.conn.Close()
	}
	t.mu.Unlock()
}

// tcpConn is one client connection.
type tcpConn struct {
	t     *tcpServer
	conn  net.Conn
	from  netip.AddrPort
	idle  time.Duration
	front *front // the reader's: the entry's scratch for this connection
	// slots holds one token per query of the connection being answered,
	// and one for the reader while it reads: when it is full the reader
	// waits and the client's next queries stay in its socket, as
	// PowerDNS's max-concurrent-requests-per-tcp-connection does.
	slots   chan struct{}
	queries sync.WaitGroup
	wmu     sync.Mutex // one reply written at a time
}

// serve reads the connection's queries until it closes, idles, breaks or
// the server stops, lets the queries read be answered, and closes it.
func (c *tcpConn) serve() {
	defer c.t.untrack(c)
	br := bufio.NewReader(c.conn)
	for c.next(br) {
	}
	c.queries.Wait()
	_ = c.conn.Close()
}

// next reads one message and answers it or hands it on; false: read no
// more.
func (c *tcpConn) next(br *bufio.Reader) bool {
	select {
	case c.slots <- struct{}{}:
	case <-c.t.done:
		return false
	}
	msg, err := c.read(br)
	if err != nil {
		<-c.slots
		return false
	}
	return c.handle(msg)
}

// read reads one length-prefixed message. The connection is idle when
// nothing arrives for the idle timeout while none of its queries is being
// answered (RFC 7766 §6.2.3); with answers pending the wait goes on. A
// message begun must arrive whole within the idle timeout too.
func (c *tcpConn) read(br *bufio.Reader) ([]byte, error) {
	for {
		if !c.t.armRead(c.conn, c.idle) {
			return nil, net.ErrClosed
		}
		_, err := br.Peek(1)
		if err == nil {
			break
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || len(c.slots) <= 1 {
			return nil, err
		}
	}
	if !c.t.armRead(c.conn, c.idle) {
		return nil, net.ErrClosed
	}
	var l [2]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(br, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// handle hands a message to the entry (allow_from was the listener's,
// at accept) and writes what it answers at once; a query on the slow path
// takes the reader's slot with it, the others give it back here. False:
// close the connection.
func (c *tcpConn) handle(msg []byte) bool {
	r := c.t.r
	v := r.engine.View()
	rq := request{from: c.from, transport: policy.TransportTCP, pkt: msg, start: r.now(), owned: true}
	c.queries.Add(1) // before the slow path's goroutine can end it
	reply, out := c.front.serve(c, &rq, &v, -1, nil)
	switch out {
	case outPending:
		return true
	case outReply:
		c.queries.Done()
		return c.replyNow(reply)
	default:
		// No header, or a response: nothing to answer; the connection
		// is closed, as PowerDNS does.
		c.queries.Done()
		<-c.slots
		return false
	}
}

// replyNow writes a reply the reader built and gives back its slot.
func (c *tcpConn) replyNow(wire []byte) bool {
	err := c.write(wire)
	<-c.slots
	return err == nil
}

// The connection is the replier of its slow-path queries.

func (c *tcpConn) send(_ *replyScratch, wire []byte, _ netip.AddrPort) error { return c.write(wire) }

// dropped closes the connection: the policy dropped the query, and over
// TCP the client would otherwise wait for its answer.
func (c *tcpConn) dropped() { _ = c.conn.Close() }

// done gives back the query's slot of the connection.
func (c *tcpConn) done() {
	<-c.slots
	c.queries.Done()
}

// write sends one reply, length-prefixed, whole: one at a time on the
// connection, so that two replies' bytes never interleave, and within the
// idle timeout from when it was ready (waiting behind another reply
// included). A reply not written by then — the client does not read —
// closes the connection: its queries' slots come back and its reader
// stops, rather than a goroutine waiting in Write for ever.
func (c *tcpConn) write(wire []byte) error {
	deadline := time.Now().Add(c.idle)
	out := make([]byte, 2+len(wire))
	binary.BigEndian.PutUint16(out, uint16(len(wire)))
	copy(out[2:], wire)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(deadline)
	if _, err := c.conn.Write(out); err != nil {
		_ = c.conn.Close() // cut, or never read: the stream cannot carry another reply
		return err
	}
	return nil
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
