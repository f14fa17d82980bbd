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
// pipeline (FORMERR, NOTIMP, BADVERS) at once. A query whose answer the
// record cache holds runs its slow path on the reader too
// (request.inlineHit); every other query is answered on a goroutine of
// its own, up to Config.TCPMaxQueriesPerConnection of a connection at once
// (RFC 7766 §6.2.1.1: a slow answer does not hold up the ones after it),
// each holding a slow-path slot of its client (inFlight). The answers the
// reader builds wait while more queries can be read without waiting, and
// are then written together (one write, over TLS one record: read).
// Replies are written whole, each within the idle timeout, so that a
// client that stops reading loses its connection instead of holding it,
// and its goroutines, for ever.
type tcpServer struct {
	r     *Resolver
	addr  netip.AddrPort
	ln    net.Listener // a *limitListener, under TLS for DoT
	shard *stats.Shard
	done  chan struct{} // closed by stop: accept and read no more
	// How this listener's connections are served: plain TCP, or DoT
	// (dot.go: the same framing over TLS, replies padded, the client id
	// from the TLS server name).
	transport policy.Transport
	idle      time.Duration
	perConn   int                 // queries of one connection answered at once
	tls       *encryptedStreamOpt // nil: plain TCP

	mu    sync.RWMutex // conns; done's closing against armRead
	conns map[*tcpConn]struct{}
	wg    sync.WaitGroup // one per connection in conns
}

func newTCPServer(r *Resolver, addr netip.AddrPort, ln net.Listener, shard *stats.Shard) *tcpServer {
	return &tcpServer{r: r, addr: addr, ln: ln, shard: shard, done: make(chan struct{}), conns: map[*tcpConn]struct{}{},
		transport: policy.TransportTCP, idle: r.cfg.TCPIdleTimeout, perConn: r.cfg.TCPMaxQueriesPerConnection}
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
	tc := &tcpConn{t: t, conn: c, from: from, idle: t.idle,
		slots: make(chan struct{}, t.perConn),
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
	waitUntil(&t.wg, deadline)
	t.mu.Lock()
	for c := range t.conns {
		_ = c.conn.Close()
	}
	t.mu.Unlock()
}

// waitUntil waits for wg, until deadline at most; false: the deadline
// came first (wg is waited for still, by a goroutine that ends with it).
func waitUntil(wg *sync.WaitGroup, deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
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
	// clientID is a DoT connection's client id (its TLS server name),
	// read once the handshake is done (idRead).
	clientID string
	idRead   bool
	// polled: the reader's read deadline is in the past (ready), not
	// the idle timeout: read arms it again before it waits.
	polled bool
	// The writers' state (write): pending replies, whether one writer
	// is flushing them, the earliest deadline among them, the buffer the
	// last flush freed, and the error that closed the connection.
	wmu      sync.Mutex
	pending  []byte
	spare    []byte
	flushing bool
	deadline time.Time
	werr     error
}

// serve reads the connection's queries until it closes, idles, breaks or
// the server stops, lets the queries read be answered, and closes it.
func (c *tcpConn) serve() {
	defer c.t.untrack(c)
	br := bufio.NewReader(c.conn)
	for c.next(br) {
		if n := c.pendingBytes(); n >= maxReaderBatch || n > 0 && !c.ready(br) {
			if c.flush() != nil {
				break
			}
		}
	}
	_ = c.flush() // what the reader queued before it stopped
	c.queries.Wait()
	_ = c.conn.Close()
}

// maxReaderBatch is how many bytes of replies the reader queues before
// it writes them though more queries are at hand: a TLS record's worth.
const maxReaderBatch = 16 << 10

// pendingBytes is the size of the replies waiting to be written.
func (c *tcpConn) pendingBytes() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.pending)
}

// ready reports whether a whole message can be read without waiting:
// one is in br already, or the connection has more at hand. Over TLS a
// read returns one record, and a client such as dnsperf sends each query
// in a record of its own; so when br holds no whole message, a read with
// the deadline in the past takes what the TLS layer and the socket hold
// already, without waiting (a timeout there leaves the connection
// usable; plain TCP's bufio.Reader took all the socket held already).
// While ready, the reader's answers are queued; when not, they are written
// before the reader waits.
func (c *tcpConn) ready(br *bufio.Reader) bool {
	if whole(br) {
		return true
	}
	n := br.Buffered()
	if n >= br.Size() || c.t.tls == nil {
		// Plain TCP: a read takes all the socket holds, and a read
		// with the deadline in the past makes no system call.
		return false
	}
	if !c.polled {
		_ = c.conn.SetReadDeadline(time.Unix(1, 0))
		c.polled = true
	}
	_, _ = br.Peek(n + 1) // a timeout, or an error read again by read
	return whole(br)
}

// whole reports whether br holds a whole length-prefixed message.
func whole(br *bufio.Reader) bool {
	if br.Buffered() < 2 {
		return false
	}
	l, _ := br.Peek(2)
	return br.Buffered() >= 2+int(binary.BigEndian.Uint16(l))
}

// next reads one message and answers it or hands it on; false: read no
// more.
func (c *tcpConn) next(br *bufio.Reader) bool {
	select {
	case c.slots <- struct{}{}:
	case <-c.t.done:
		return false
	default:
		// Every slot is taken: what the reader queued goes out before it
		// waits for one, not after the slow queries holding them.
		if c.flush() != nil {
			return false
		}
		select {
		case c.slots <- struct{}{}:
		case <-c.t.done:
			return false
		}
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
	if whole(br) {
		select {
		case <-c.t.done: // stop: read no more, buffered or not
			return nil, net.ErrClosed
		default:
		}
		return c.take(br)
	}
	c.polled = false
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
	return c.take(br)
}

// take reads the message br holds or begins.
func (c *tcpConn) take(br *bufio.Reader) ([]byte, error) {
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
	if c.t.tls != nil && !c.idRead {
		c.clientID, c.idRead = c.t.tls.clientIDOf(c.conn), true
	}
	rq := request{from: c.from, transport: c.t.transport, clientID: c.clientID, pkt: msg, start: r.now(), owned: true,
		inlineHit: true, held: (*tcpHeld)(c)}
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

// replyNow queues a reply the reader built and gives back its slot.
func (c *tcpConn) replyNow(wire []byte) bool {
	err := c.queue(wire)
	<-c.slots
	return err == nil
}

// tcpHeld is the connection as the replier of a query whose slow path
// runs on its reader: the reply is queued, and the reader writes it with
// the others ready together.
type tcpHeld tcpConn

func (h *tcpHeld) send(_ *replyScratch, wire []byte, _ netip.AddrPort) error {
	return (*tcpConn)(h).queue(wire)
}
func (h *tcpHeld) dropped() { (*tcpConn)(h).dropped() }
func (h *tcpHeld) done()    { (*tcpConn)(h).done() }

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

// write sends one reply, length-prefixed, whole: replies never
// interleave, and each is written within the idle timeout from when it
// was ready (waiting behind other replies included). A reply not written
// by then — the client does not read — closes the connection: its
// queries' slots come back and its reader stops, rather than a goroutine
// waiting in Write for ever.
//
// Replies ready while another is being written are coalesced: the
// writer appends its reply to the connection's pending bytes and, unless
// a flush is under way, flushes them itself, looping until none are left;
// a writer that finds a flush under way leaves its reply to it and
// returns. The reader's own replies (queue) wait in the pending bytes
// until it has no more queries at hand, and go out with the first flush.
// Under load one write(2), and over TLS one record, carries several
// replies: with one write per reply, the system calls were a third of a
// DoT cache hit's CPU (bench/encrypted.sh).
func (c *tcpConn) write(wire []byte) error {
	if err := c.queue(wire); err != nil {
		return err
	}
	return c.flush()
}

// queue appends a reply to the pending bytes, padded over TLS, without
// writing it.
func (c *tcpConn) queue(wire []byte) error {
	deadline := time.Now().Add(c.idle)
	if c.t.tls != nil {
		wire = padReply(wire)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	c.pending = binary.BigEndian.AppendUint16(c.pending, uint16(len(wire)))
	c.pending = append(c.pending, wire...)
	if c.deadline.IsZero() || deadline.Before(c.deadline) {
		c.deadline = deadline
	}
	return nil
}

// flush writes the pending bytes, unless another writer is flushing
// (which writes them too).
func (c *tcpConn) flush() error {
	c.wmu.Lock()
	if c.werr != nil || c.flushing {
		err := c.werr
		c.wmu.Unlock()
		return err
	}
	c.flushing = true
	for len(c.pending) > 0 {
		out, d := c.pending, c.deadline
		c.pending, c.spare = c.spare[:0], nil
		c.deadline = time.Time{}
		c.wmu.Unlock()
		_ = c.conn.SetWriteDeadline(d)
		_, err := c.conn.Write(out)
		c.wmu.Lock()
		if err != nil {
			c.werr, c.flushing, c.pending = err, false, nil
			c.wmu.Unlock()
			_ = c.conn.Close() // cut, or never read: the stream cannot carry another reply
			return err
		}
		if cap(out) <= maxSpareWrite {
			c.spare = out[:0]
		}
	}
	c.flushing = false
	c.wmu.Unlock()
	return nil
}

// maxSpareWrite bounds the write buffer a connection keeps between
// flushes: a burst of large (TCP) replies does not stay allocated while
// the connection idles.
const maxSpareWrite = 4 << 10

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
