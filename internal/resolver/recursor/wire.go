package recursor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// errTimeout: no acceptable reply before the attempt's deadline.
var errTimeout = errors.New("timeout")

// errUnreachable: the network refused at the server's end.
var errUnreachable = errors.New("unreachable")

// randomCase is 0x20 randomisation: each letter's case flipped at random.
// The server must echo the name exactly; a forger who does not see the
// query must guess one more bit per letter.
func randomCase(name string) string {
	b := []byte(name)
	bits := rand.Uint64()
	n := 0
	for i, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			if n == 64 {
				bits, n = rand.Uint64(), 0
			}
			if bits&1 != 0 {
				b[i] = c ^ 0x20
			}
			bits >>= 1
			n++
		}
	}
	return string(b)
}

// ask sends one question to one server and returns its reply: over UDP
// from a socket of its own, then over TCP if the reply is truncated. The
// reply echoes the id and the question exactly (case included); anything
// else read meanwhile is counted and ignored until the deadline.
func (q *query) ask(ap netip.AddrPort, rd bool, name string, qtype uint16, edns bool) (*dns.Msg, time.Duration, error) {
	r := q.r
	id := uint16(rand.N(1 << 16))
	wire := randomCase(name)
	want := dns.Question{Name: wire, Qtype: qtype, Qclass: dns.ClassINET}
	packed, err := packQuery(id, rd, want, edns, r.cfg.UDPSize, r.sec.mode != ModeOff)
	if err != nil {
		return nil, 0, fmt.Errorf("packing query for %s: %w", name, err)
	}
	deadline := time.Now().Add(r.cfg.Timeout)
	if deadline.After(q.deadline) {
		deadline = q.deadline
	}
	q.sent++
	ipv6 := ap.Addr().Is6()
	r.metrics.OutQuery(ipv6, false)
	start := time.Now()
	reply, err := q.udp(ap, packed, id, want, deadline)
	if err != nil {
		return nil, 0, err
	}
	if reply.Truncated {
		id = uint16(rand.N(1 << 16))
		binary.BigEndian.PutUint16(packed, id)
		deadline = time.Now().Add(r.cfg.Timeout)
		if deadline.After(q.deadline) {
			deadline = q.deadline
		}
		q.sent++
		r.metrics.OutQuery(ipv6, true)
		start = time.Now()
		if reply, err = q.tcp(ap, packed, id, want, deadline); err != nil {
			return nil, 0, err
		}
	}
	rtt := time.Since(start)
	r.metrics.Answer(ipv6, rtt)
	uncase(reply, wire, name)
	return reply, rtt, nil
}

func (q *query) udp(ap netip.AddrPort, packed []byte, id uint16, want dns.Question, deadline time.Time) (*dns.Msg, error) {
	r := q.r
	// A connected socket: the kernel picks a random ephemeral port and
	// drops datagrams from any other address.
	c, err := dialUDP(ap)
	if err != nil {
		r.metrics.ResourceLimit()
		return nil, fmt.Errorf("%s: %w", ap, err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(packed); err != nil {
		return nil, q.netErr(ap, err)
	}
	// A reply may not exceed the size we advertised; a larger datagram
	// arrives cut and is ignored as unparsable.
	bufp := r.bufs.Get().(*[]byte)
	defer r.bufs.Put(bufp)
	buf := *bufp
	for {
		if err := q.err(); err != nil {
			return nil, err
		}
		n, err := c.Read(buf)
		if errors.Is(err, io.EOF) {
			// An empty datagram, as an *os.File reports it: not an
			// answer, and no reason to stop waiting for one.
			r.metrics.ServerParseError()
			continue
		}
		if err != nil {
			return nil, q.netErr(ap, err)
		}
		if reply := q.check(buf[:n], id, want); reply != nil {
			return reply, nil
		}
	}
}

// packQuery writes the query: header (id, RD when rd), the question and,
// with edns, an OPT record advertising udpSize, with the DO bit when do;
// no other flag, no option. The bytes are those miekg/dns packs for the
// same message (TestPackQuery, FuzzPackQuery), written into one buffer of
// their size: a dns.Msg with its question slice and OPT record, packed,
// cost five allocations per query.
func packQuery(id uint16, rd bool, want dns.Question, edns bool, udpSize uint16, do bool) ([]byte, error) {
	const (
		headerLen = 12
		optLen    = 11 // root name, type, class, TTL, RDLENGTH
	)
	// The name's wire form is at most its text's length plus two (a
	// leading length byte and the root); escapes only shorten it.
	size := headerLen + len(want.Name) + 2 + 4
	if edns {
		size += optLen
	}
	buf := make([]byte, size)
	binary.BigEndian.PutUint16(buf, id)
	if rd {
		buf[2] = 1 // RD: the low bit of the first flags byte
	}
	binary.BigEndian.PutUint16(buf[4:], 1) // QDCOUNT
	off, err := dns.PackDomainName(want.Name, buf[:size-4-optLen*b2i(edns)], headerLen, nil, false)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint16(buf[off:], want.Qtype)
	binary.BigEndian.PutUint16(buf[off+2:], want.Qclass)
	off += 4
	if !edns {
		return buf[:off], nil
	}
	binary.BigEndian.PutUint16(buf[10:], 1) // ARCOUNT: the OPT
	buf[off] = 0                            // the root name
	binary.BigEndian.PutUint16(buf[off+1:], dns.TypeOPT)
	binary.BigEndian.PutUint16(buf[off+3:], udpSize) // CLASS: the payload size
	var ttl uint32                                   // extended rcode 0, version 0, flags
	if do {
		ttl = 1 << 15
	}
	binary.BigEndian.PutUint32(buf[off+5:], ttl)
	binary.BigEndian.PutUint16(buf[off+9:], 0) // no options
	return buf[:off+optLen], nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// udpConn is what an outgoing UDP query needs of its socket (dialUDP).
type udpConn interface {
	Write(b []byte) (int, error)
	Read(b []byte) (int, error)
	SetDeadline(t time.Time) error
	Close() error
}

func (q *query) tcp(ap netip.AddrPort, packed []byte, id uint16, want dns.Question, deadline time.Time) (*dns.Msg, error) {
	r := q.r
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(q.ctx, "tcp", ap.String())
	if err != nil {
		return nil, q.netErr(ap, err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	out := make([]byte, 2+len(packed))
	binary.BigEndian.PutUint16(out, uint16(len(packed)))
	copy(out[2:], packed)
	if _, err := c.Write(out); err != nil {
		return nil, q.netErr(ap, err)
	}
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return nil, q.netErr(ap, err)
		}
		buf := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, q.netErr(ap, err)
		}
		reply := q.check(buf, id, want)
		if reply == nil {
			continue
		}
		if reply.Truncated {
			r.metrics.ServerParseError()
			return nil, fmt.Errorf("%s: truncated answer over TCP", ap)
		}
		return reply, nil
	}
}

// check accepts a packet as the reply to the query of id and question
// want (its name in the case sent), or counts it and returns nil.
func (q *query) check(pkt []byte, id uint16, want dns.Question) *dns.Msg {
	r := q.r
	if len(pkt) < 12 {
		r.metrics.ServerParseError()
		return nil
	}
	if pkt[2]&0x80 == 0 || binary.BigEndian.Uint16(pkt) != id {
		r.metrics.UnexpectedPacket()
		return nil
	}
	reply := new(dns.Msg)
	if err := reply.Unpack(pkt); err != nil {
		r.metrics.ServerParseError()
		return nil
	}
	if reply.Opcode != dns.OpcodeQuery || len(reply.Question) != 1 {
		r.metrics.UnexpectedPacket()
		return nil
	}
	got := reply.Question[0]
	if got.Qtype != want.Qtype || got.Qclass != want.Qclass || !strings.EqualFold(got.Name, want.Name) {
		r.metrics.UnexpectedPacket()
		return nil
	}
	if got.Name != want.Name {
		// The right question in the wrong case: a 0x20 failure, which
		// a forger who did not see the query makes.
		r.metrics.CaseMismatch()
		return nil
	}
	return reply
}

// netErr classifies a network error: a timeout, the server's refusal, or
// the caller's cancellation.
func (q *query) netErr(ap netip.AddrPort, err error) error {
	r := q.r
	if cerr := q.err(); cerr != nil {
		return cerr
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		r.metrics.Timeout(ap.Addr().Is6())
		return fmt.Errorf("%s: %w", ap, errTimeout)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		r.metrics.Unreachable()
		return fmt.Errorf("%s: %w: %v", ap, errUnreachable, err)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%s: %w: %v", ap, errUnreachable, err)
}
