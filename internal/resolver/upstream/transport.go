package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

var (
	errTimeout = errors.New("timeout")
	// errSpoofed: the answer came after too many near misses and was dropped.
	errSpoofed = errors.New("answer dropped after replies with wrong ids (spoofing suspected)")
	// errTruncated: the UDP answer had TC set; the attempt goes on over TCP.
	errTruncated = errors.New("truncated answer")
)

// exchange is the state one Exchange shares between its attempts.
type exchange struct {
	c        *Client
	ctx      context.Context
	wire     []byte // two-byte TCP length prefix, then the query; each attempt rewrites the id
	want     *expected
	rbuf     []byte // UDP read buffer; TCP messages that fit
	deadline time.Time
	viaTCP   bool // a forwarder truncated: every later attempt goes straight to TCP
}

// attempt asks one forwarder: over UDP, then over TCP when the answer was
// truncated (RFC 7766 §5: the client must retry over TCP).
func (ex *exchange) attempt(f *forwarder) (*dns.Msg, error) {
	if !ex.viaTCP {
		m, err := ex.udp(f)
		if !errors.Is(err, errTruncated) {
			return m, err
		}
		ex.viaTCP = true
	}
	return ex.tcp(f)
}

// udp sends the query from a socket of its own (taken from the pool or
// made; the kernel binds it to a random ephemeral port and, the socket being
// connected, drops datagrams from any other address) and reads until the
// answer comes or the attempt's deadline passes.
func (ex *exchange) udp(f *forwarder) (*dns.Msg, error) {
	c := ex.c
	now := time.Now()
	until := earlier(now.Add(c.timeout), ex.deadline)
	// Counted before the socket is made, as PowerDNS counts an out-query
	// whether or not it gets on the wire.
	c.metrics.OutQuery(f.ipv6, false)
	pc := f.udp.get(now, c.idleTimeout)
	if pc == nil {
		conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(f.addr))
		if err != nil {
			return nil, ex.failed(f, "udp", err)
		}
		pc = &pooledConn{Conn: conn}
		if err := pc.raw.init(conn); err != nil {
			_ = conn.Close()
			return nil, ex.failed(f, "udp", err)
		}
	}
	keep := false
	untouched := ex.watch(pc)
	defer func() {
		// Back to the pool only when nothing marred the socket: no stray
		// packet (its port may be known), no timeout (a late answer would
		// greet the next query), no cancellation (the watcher may have set
		// a deadline).
		if untouched() && keep {
			f.udp.put(pc, time.Now(), c.maxIdleUDP, c.idleTimeout)
		} else {
			pc.Close()
		}
	}()
	pc.uses++
	newID(ex.wire, ex.want)
	if err := pc.SetDeadline(until); err != nil {
		return nil, ex.failed(f, "udp", err)
	}
	sent := time.Now()
	if err := pc.raw.write(ex.wire[2:]); err != nil {
		return nil, ex.failed(f, "udp", err)
	}
	clean := true
	nearMisses := 0
	for {
		n, err := pc.raw.read(ex.rbuf)
		if err != nil {
			return nil, ex.failed(f, "udp", err)
		}
		m, v, caseDiffers := checkReply(ex.rbuf[:n], ex.want)
		switch v {
		case replyParseError:
			c.metrics.ServerParseError()
			clean = false
			continue
		case replyUnexpected:
			c.metrics.UnexpectedPacket()
			clean = false
			continue
		case replyNearMiss:
			c.metrics.UnexpectedPacket()
			nearMisses++
			clean = false
			continue
		}
		received := time.Now()
		if c.nearMissMax >= 0 && nearMisses > c.nearMissMax {
			// PowerDNS's rule: the real answer may be among the guesses,
			// so even a matching one is not trusted. The next attempt uses
			// a new socket, hence a new port, and a new id.
			c.metrics.SpoofPrevent()
			return nil, fmt.Errorf("%s over udp: %w", f.addr, errSpoofed)
		}
		rtt := received.Sub(sent)
		if m != nil && isForwarderFailure(m.Rcode) {
			f.failures.Add(1)
			f.failed(received, 0)
		} else if v == replyTruncated {
			f.revive(received, rtt) // the answer is counted when TCP brings it
		} else {
			f.answered(received, rtt)
		}
		keep = clean && pc.uses < c.maxUDPUses
		if v == replyTruncated {
			return nil, errTruncated
		}
		c.metrics.Answer(f.ipv6, rtt)
		if caseDiffers {
			c.metrics.CaseMismatch()
		}
		return m, nil
	}
}

// tcp asks f over TCP, on a kept connection when there is one (RFC 7766
// §6.2.1: reuse rather than a handshake per query). A kept connection the
// forwarder has meanwhile closed fails at once, before any reply; then the
// query is sent once more on a new connection.
func (ex *exchange) tcp(f *forwarder) (*dns.Msg, error) {
	m, stale, err := ex.tcpOnce(f, true)
	if stale {
		m, _, err = ex.tcpOnce(f, false)
	}
	return m, err
}

func (ex *exchange) tcpOnce(f *forwarder, mayReuse bool) (_ *dns.Msg, stale bool, _ error) {
	c := ex.c
	now := time.Now()
	until := earlier(now.Add(c.timeout), ex.deadline)
	c.metrics.OutQuery(f.ipv6, true)
	var pc *pooledConn
	if mayReuse {
		pc = f.tcp.get(now, c.idleTimeout)
	}
	reused := pc != nil
	if pc == nil {
		d := net.Dialer{Deadline: until}
		conn, err := d.DialContext(ex.ctx, "tcp", f.addr.String())
		if err != nil {
			return nil, false, ex.failed(f, "tcp", err)
		}
		pc = &pooledConn{Conn: conn}
	}
	keep := false
	untouched := ex.watch(pc)
	defer func() {
		if untouched() && keep {
			f.tcp.put(pc, time.Now(), c.maxIdleTCP, c.idleTimeout)
		} else {
			pc.Close()
		}
	}()
	pc.uses++
	newID(ex.wire, ex.want)
	if err := pc.SetDeadline(until); err != nil {
		return nil, false, ex.failed(f, "tcp", err)
	}
	sent := time.Now()
	if _, err := pc.Write(ex.wire); err != nil {
		if reused && isRemoteRefusal(err) && ex.ctx.Err() == nil {
			return nil, true, nil
		}
		return nil, false, ex.failed(f, "tcp", err)
	}
	clean := true
	for first := true; ; first = false {
		var prefix [2]byte
		if _, err := io.ReadFull(pc, prefix[:]); err != nil {
			if reused && first && isRemoteRefusal(err) && ex.ctx.Err() == nil {
				return nil, true, nil
			}
			return nil, false, ex.failed(f, "tcp", err)
		}
		msg := ex.rbuf
		if n := int(binary.BigEndian.Uint16(prefix[:])); n <= len(msg) {
			msg = msg[:n]
		} else {
			msg = make([]byte, n)
		}
		if _, err := io.ReadFull(pc, msg); err != nil {
			return nil, false, ex.failed(f, "tcp", err)
		}
		m, v, caseDiffers := checkReply(msg, ex.want)
		switch v {
		case replyParseError:
			c.metrics.ServerParseError()
			clean = false
			continue
		case replyUnexpected, replyNearMiss:
			// Off-path spoofing cannot reach a TCP connection: this is a
			// stale or broken reply, ignored like one over UDP.
			c.metrics.UnexpectedPacket()
			clean = false
			continue
		case replyTruncated:
			// TCP carries any size: a forwarder truncating here is broken.
			c.metrics.ServerParseError()
			return nil, false, fmt.Errorf("%s over tcp: truncated answer", f.addr)
		}
		c.metrics.Answer(f.ipv6, time.Since(sent))
		if isForwarderFailure(m.Rcode) {
			f.failures.Add(1)
			f.failed(time.Now(), 0)
		} else {
			f.answers.Add(1) // the UDP attempt set its RTT, which a handshake would distort
		}
		if caseDiffers {
			c.metrics.CaseMismatch()
		}
		keep = clean
		return m, false, nil
	}
}

// watch makes cancellation of the Exchange's context interrupt a read on
// conn. The returned func stops watching and tells whether conn was left
// untouched, i.e. may be reused.
func (ex *exchange) watch(conn net.Conn) (untouched func() bool) {
	if ex.ctx.Done() == nil {
		return alwaysTrue
	}
	return context.AfterFunc(ex.ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
}

func alwaysTrue() bool { return true }

// failed counts a failed attempt and charges it to the forwarder when it
// was the forwarder's doing: a timeout (outgoing-timeouts) or a refusal
// from its end (unreachables). Other errors are ours (no socket, no route:
// resource-limits) and a cancelled context is the caller's; neither says
// anything about the forwarder.
func (ex *exchange) failed(f *forwarder, transport string, err error) error {
	c := ex.c
	if ctxErr := ex.ctx.Err(); errors.Is(ctxErr, context.Canceled) {
		return fmt.Errorf("%s over %s: %w", f.addr, transport, ctxErr)
	}
	switch {
	case isTimeout(err):
		c.metrics.Timeout(f.ipv6)
		f.timeouts.Add(1)
		f.failed(time.Now(), c.timeout)
		err = errTimeout
	case isRemoteRefusal(err):
		c.metrics.Unreachable()
		f.failures.Add(1)
		f.failed(time.Now(), c.timeout)
	default:
		c.metrics.ResourceLimit()
	}
	return fmt.Errorf("%s over %s: %w", f.addr, transport, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// isRemoteRefusal tells the errors that come from the forwarder's end:
// ICMP port or host unreachable (ECONNREFUSED, EHOSTUNREACH on a connected
// UDP socket), a refused or reset TCP connection, or one closed under us.
func isRemoteRefusal(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
