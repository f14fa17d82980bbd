// Package dnstap writes the resolver's answered queries as dnstap, the
// log format and stream protocol unbound, BIND, Knot and CoreDNS speak, to
// a reader on a Unix or TCP socket (activity.dnstap.socket).
//
// Its place in the data flow: the Writer is one of the resolver's
// observers (resolver.Config.Observer, beside the activity queue). On the
// resolver's goroutine, Answered copies the reply and what describes the
// query into a bounded queue and returns; when the queue is full the
// query is dropped and counted. Run, a goroutine of its own, connects to
// the reader, does the Frame Streams handshake and writes one dnstap
// message per query: a CLIENT_RESPONSE with the client's address and
// port, the transport, the query's arrival and the reply's times, a query
// message standing for the client's and the reply's bytes, and, when the
// policy blocked or rewrote the answer, a Policy naming the reason, the
// rule and the action. When the reader goes away Run reconnects, with
// backoff, for as long as it runs.
package dnstap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// Config is a Writer's configuration.
type Config struct {
	// Socket is activity.dnstap.socket: "unix:/path" or "tcp:host:port".
	Socket string
	// Identity and Version go on every message (the node's name and the
	// build's version, as a DNS server's NSID and version.bind); empty:
	// left out.
	Identity, Version string
	// Queue is how many queries wait for the writer before more are
	// dropped (default DefaultQueue).
	Queue int
	// Registerer gets the svcpf_dnstap_* metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Logger tells of connections made and lost (nil: discarded).
	Logger *slog.Logger
	// Clock is the response time of an Answered without its time (At
	// zero; the resolver always sets it); nil: time.Now.
	Clock func() time.Time
}

// DefaultQueue is Config.Queue's default: a few seconds of a busy node's
// queries while the reader restarts, at a few hundred bytes each.
const DefaultQueue = 8192

// Reconnection, handshake and shutdown bounds.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// stableConn is how long a connection must have lasted for the
	// backoff to start again from minBackoff once it is lost.
	stableConn = 10 * time.Second
	// ioTimeout bounds a connection attempt with its handshake, and one
	// batch's write: a reader that stops reading is dropped and
	// reconnected to, rather than holding the queue.
	ioTimeout = 5 * time.Second
	// finishWait is how long Run waits, at its end, for the reader's
	// FINISH after its STOP.
	finishWait = time.Second
	// maxBatch is how many queued messages one write carries at most.
	maxBatch = 256
	// maxPooled is the largest buffer kept for reuse: a TCP reply of tens
	// of kilobytes is copied into a buffer of its own, left to the
	// collector.
	maxPooled = 4096
)

// Writer is a resolver.Observer that writes dnstap; Run does the writing.
type Writer struct {
	sock     Socket
	identity []byte
	version  []byte
	queue    chan record
	bufs     sync.Pool
	now      func() time.Time
	log      *slog.Logger

	droppedFull, droppedConn, droppedStop prometheus.Counter
	sent                                  prometheus.Counter
	connected                             prometheus.Gauge
}

var _ resolver.Observer = (*Writer)(nil)

// New validates cfg and makes a Writer; it connects when Run runs.
func New(cfg Config) (*Writer, error) {
	sock, err := ParseSocket(cfg.Socket)
	if err != nil {
		return nil, err
	}
	if cfg.Queue == 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Queue < 1 {
		return nil, fmt.Errorf("dnstap: queue %d: want at least 1", cfg.Queue)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcpf_dnstap_dropped_total",
		Help: "Answered queries not written as dnstap: reason queue_full (the queue was full, the reader being away or slow), " +
			"connection (in a write that failed when the reader went away), shutdown (queued when the writer stopped).",
	}, []string{"reason"})
	w := &Writer{
		sock: sock, identity: []byte(cfg.Identity), version: []byte(cfg.Version),
		queue: make(chan record, cfg.Queue), now: cfg.Clock, log: cfg.Logger,
		droppedFull: dropped.WithLabelValues("queue_full"),
		droppedConn: dropped.WithLabelValues("connection"),
		droppedStop: dropped.WithLabelValues("shutdown"),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "svcpf_dnstap_sent_total",
			Help: "dnstap messages written to the reader's socket."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "svcpf_dnstap_connected",
			Help: "1 while the dnstap writer is connected to its reader, else 0."}),
	}
	w.bufs.New = func() any { b := make([]byte, 0, 512); return &b }
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{dropped, w.sent, w.connected} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("dnstap: register metrics: %w", err)
			}
		}
	}
	return w, nil
}

// Socket is where the writer connects.
func (w *Writer) Socket() Socket { return w.sock }

// Answered queues a's query for the writer, or drops and counts it when
// the queue is full. It copies what it keeps and never blocks.
func (w *Writer) Answered(a *resolver.Answered) {
	if len(w.queue) == cap(w.queue) { // full: drop before copying
		w.droppedFull.Inc()
		return
	}
	bp := w.bufs.Get().(*[]byte)
	b := append((*bp)[:0], a.Reply...)
	at := a.At // the resolver's reading of the clock
	if at.IsZero() {
		at = w.now()
	}
	r := record{nReply: len(a.Reply), client: a.Client, at: at, took: a.Took, qtype: a.Type,
		transport: a.Transport, dropped: a.Rcode == resolver.RcodeDropped}
	if v := a.Decision.Verdict; v == policy.VerdictBlock || v == policy.VerdictRedirect {
		r.blocked, r.reason, r.action = true, reasonIndex(a.Decision.Reason), policyAction(a.Decision.Action)
		b = append(b, a.Decision.Rule...)
		r.nRule = len(a.Decision.Rule)
	}
	// The name, for when the reply cannot stand for the query (none was
	// sent): a few bytes more to copy spare a test on the hot path.
	b = append(b, a.Name...)
	*bp = b
	r.buf = bp
	select {
	case w.queue <- r:
	default:
		w.release(bp)
		w.droppedFull.Inc()
	}
}

func (w *Writer) release(bp *[]byte) {
	if cap(*bp) <= maxPooled {
		w.bufs.Put(bp)
	}
}

// Run connects to the reader and writes until ctx ends; then it sends
// STOP, waits briefly for the reader's FINISH and returns nil. A reader
// that cannot be reached or goes away is connected to again, after a
// backoff from 100ms doubling to 5s; meanwhile queries wait in the
// queue, and those beyond it are dropped and counted.
func (w *Writer) Run(ctx context.Context) error {
	backoff := minBackoff
	failures := 0
	for {
		conn, err := w.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				w.dropQueued()
				return nil
			}
			failures++
			// The first failure and then one in ten: a reader down for
			// an hour does not fill the log.
			if failures == 1 || failures%10 == 0 {
				w.log.Warn("dnstap: cannot connect to the reader; is it listening there? Queries wait in the queue, "+
					"then are dropped (svcpf_dnstap_dropped_total)",
					"socket", w.sock.String(), "err", err, "attempts", failures, "retry_in", backoff)
			}
			select {
			case <-ctx.Done():
				w.dropQueued()
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		w.log.Info("dnstap: connected to the reader", "socket", w.sock.String(), "after_failures", failures)
		failures = 0
		w.connected.Set(1)
		since := time.Now()
		err = w.serve(ctx, conn)
		w.connected.Set(0)
		_ = conn.Close()
		if ctx.Err() != nil {
			w.dropQueued()
			return nil
		}
		// A connection that lasted resets the backoff; one the reader
		// closes as soon as it is made (a reader refusing us, or
		// crashing in a loop) keeps doubling it, rather than spinning.
		if time.Since(since) > stableConn {
			backoff = minBackoff
		}
		w.log.Warn("dnstap: the reader went away; reconnecting", "socket", w.sock.String(), "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			w.dropQueued()
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// connect dials the reader and does the handshake, within ioTimeout.
func (w *Writer) connect(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: ioTimeout}
	conn, err := d.DialContext(ctx, w.sock.Network, w.sock.Address)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(ioTimeout))
	if err := handshake(conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// errFinished is what the reader's side of a connection reports when the
// reader answered FINISH.
var errFinished = errors.New("the reader finished")

// serve writes queued queries to conn until ctx ends (nil) or the
// connection fails (the error).
func (w *Writer) serve(ctx context.Context, conn net.Conn) error {
	// A reader sends nothing after ACCEPT but FINISH; reading tells at
	// once, even with no query to write, that it closed or went away.
	gone := make(chan error, 1)
	go func() {
		c, err := readControl(conn)
		switch {
		case err != nil:
		case c.typ == ctrlFinish:
			err = errFinished
		default:
			err = fmt.Errorf("the reader sent control frame type %d unasked", c.typ)
		}
		gone <- err
	}()
	bw := bufio.NewWriterSize(conn, 64<<10)
	var frame, scratch []byte
	write := func(r *record) {
		frame = append(frame[:0], 0, 0, 0, 0)
		frame, scratch = appendDnstap(frame, scratch, w.identity, w.version, r)
		n := len(frame) - 4
		frame[0], frame[1], frame[2], frame[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		_, _ = bw.Write(frame) // bufio keeps the first error for Flush
		w.release(r.buf)
	}
	// flush writes the batch of n messages; on failure they are counted
	// dropped: which of them the reader read cannot be told.
	flush := func(n int) error {
		if err := bw.Flush(); err != nil {
			w.droppedConn.Add(float64(n))
			return err
		}
		w.sent.Add(float64(n))
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			_ = conn.SetDeadline(time.Now().Add(finishWait))
			// What is queued now, and no more: the resolver may still be
			// answering.
			n := 0
			for range cap(w.queue) {
				var r record
				select {
				case r = <-w.queue:
				default:
				}
				if r.buf == nil {
					break
				}
				write(&r)
				n++
			}
			_, _ = bw.Write(appendControl(nil, ctrlStop, ""))
			if err := flush(n); err != nil {
				return nil
			}
			select {
			case <-gone:
			case <-time.After(finishWait):
			}
			return nil
		case err := <-gone:
			return err
		case r := <-w.queue:
			_ = conn.SetWriteDeadline(time.Now().Add(ioTimeout))
			write(&r)
			n := 1
			for n < maxBatch {
				var r record
				select {
				case r = <-w.queue:
				default:
				}
				if r.buf == nil {
					break
				}
				write(&r)
				n++
			}
			if err := flush(n); err != nil {
				return err
			}
		}
	}
}

// dropQueued counts what is left in the queue when Run ends.
func (w *Writer) dropQueued() {
	for range cap(w.queue) {
		select {
		case r := <-w.queue:
			w.release(r.buf)
			w.droppedStop.Inc()
		default:
			return
		}
	}
}
