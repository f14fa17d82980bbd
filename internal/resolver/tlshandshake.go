package resolver

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEncryptedHandshakeTimeout bounds a DoT or DoH TLS handshake, and
// a DoQ handshake (quic-go's HandshakeIdleTimeout), when
// dns.tls.handshake_timeout is not set. A TLS 1.3 handshake is one round
// trip and the client's Finished; 10 s lets a phone on a poor link
// through and still frees, soon, the connection slot of a client that
// opens a connection and sends nothing (or half a ClientHello).
const DefaultEncryptedHandshakeTimeout = 10 * time.Second

// handshakeCounts counts, per listener kind, the TLS handshakes that did
// not complete: timeouts (the client stalled) and failures (bad
// ClientHello, no common version or cipher, the client closed). Exported
// by tlsCollector.
type handshakeCounts struct {
	timeouts, failures atomic.Uint64
}

// handshakeListener is the TLS side of the DoT and DoH listeners: it
// accepts TCP connections from the listener below (allow_from, the
// connection bounds), runs each one's TLS handshake on a goroutine of its
// own, within timeout, and hands Accept only connections whose handshake
// completed. So a client that connects and stalls holds its connection
// slot (the per-client bound counts it) for timeout at most, and never
// holds the accept loop nor another client's handshake. The *tls.Conn
// handed on has its handshake done: net/http's own handshake call returns
// at once.
type handshakeListener struct {
	inner   net.Listener
	cfg     *tls.Config
	timeout time.Duration
	counts  *handshakeCounts

	start sync.Once
	ready chan *tls.Conn        // handshakes done, waiting for Accept
	done  chan struct{}         // closed by Close, or when the inner listener fails
	err   error                 // why done was closed; set before closing it
	once  sync.Once             // closing done
	mu    sync.Mutex            // pending
	pend  map[net.Conn]struct{} // handshakes under way: Close closes them
}

func newHandshakeListener(inner net.Listener, cfg *tls.Config, timeout time.Duration, counts *handshakeCounts) *handshakeListener {
	return &handshakeListener{inner: inner, cfg: cfg, timeout: timeout, counts: counts,
		ready: make(chan *tls.Conn), done: make(chan struct{}), pend: map[net.Conn]struct{}{}}
}

// Accept returns the next connection whose handshake completed.
func (l *handshakeListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

func (l *handshakeListener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting and closes the handshakes under way; the
// connections already handed on are their server's.
func (l *handshakeListener) Close() error {
	err := l.inner.Close()
	l.finish(net.ErrClosed)
	l.mu.Lock()
	for c := range l.pend {
		_ = c.Close()
	}
	l.mu.Unlock()
	return err
}

func (l *handshakeListener) finish(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

// acceptLoop accepts TCP connections and starts their handshakes; it
// only ever waits for the next connection.
func (l *handshakeListener) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.Is(err, net.ErrClosed) || !errors.As(err, &ne) {
				l.finish(err)
				return
			}
			// Out of file descriptors and the like: wait a little, as
			// net/http's server does, rather than spin on the error.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		l.mu.Lock()
		select {
		case <-l.done:
			l.mu.Unlock()
			_ = c.Close()
			return
		default:
		}
		l.pend[c] = struct{}{}
		l.mu.Unlock()
		go l.handshake(c)
	}
}

// handshake runs one connection's handshake within the timeout, then
// waits for Accept to take it (or Close).
func (l *handshakeListener) handshake(c net.Conn) {
	tc := tls.Server(c, l.cfg)
	_ = c.SetDeadline(time.Now().Add(l.timeout))
	err := tc.Handshake()
	l.mu.Lock()
	delete(l.pend, c)
	l.mu.Unlock()
	if err != nil {
		select {
		case <-l.done: // closed under it: not the client's doing
		default:
			l.count(err)
		}
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	select {
	case l.ready <- tc:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *handshakeListener) count(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.counts.timeouts.Add(1)
	} else {
		l.counts.failures.Add(1)
	}
}
