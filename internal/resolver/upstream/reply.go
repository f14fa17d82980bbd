package upstream

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// DNS header layout (RFC 1035 §4.1.1), read straight from the wire so that a
// reply is judged before the cost of a full parse.
const (
	headerLen = 12
	flagQR    = 1 << 15
	flagTC    = 1 << 9
	flagRD    = 1 << 8
	flagAD    = 1 << 5
	flagCD    = 1 << 4
	optDO     = 1 << 15 // the DO bit in an OPT record's TTL (RFC 3225)
)

// appendQuery writes the message sent upstream for q into buf (from its
// start, within its length) and returns it: the caller's question exactly
// as given (its letter case travels to the forwarder and back, so a
// client's 0x20 case randomisation survives), RD set when rd (forwarders are
// recursive resolvers and we want the whole answer from them; an
// authoritative server is asked without it), the client's
// CD and AD bits (RFC 6840 §5.7, §5.9: asking for unvalidated data, and
// saying the AD bit is understood), and an OPT record of our own carrying
// our UDP payload size and the client's DO bit. The client's other EDNS
// options (client subnet, cookies, padding) are hop-by-hop or private and
// are not forwarded. The id is left zero: every attempt writes a fresh one.
//
// The bytes are those miekg/dns packs for the same message (TestAppendQuery,
// FuzzAppendQuery) but written in place: building a dns.Msg with an OPT and
// packing it allocated several objects and a compression map per query.
func appendQuery(buf []byte, q *dns.Msg, udpSize uint16, rd bool) ([]byte, error) {
	const optLen = 11 // root name, type, class, TTL, RDLENGTH
	if len(buf) < headerLen+1+4+optLen {
		return nil, dns.ErrBuf
	}
	qs := q.Question[0]
	var flags uint16
	if rd {
		flags = flagRD
	}
	if q.AuthenticatedData {
		flags |= flagAD
	}
	if q.CheckingDisabled {
		flags |= flagCD
	}
	clear(buf[:headerLen])
	binary.BigEndian.PutUint16(buf[2:], flags)
	binary.BigEndian.PutUint16(buf[4:], 1)  // QDCOUNT
	binary.BigEndian.PutUint16(buf[10:], 1) // ARCOUNT: our OPT
	off, err := dns.PackDomainName(qs.Name, buf[:len(buf)-4-optLen], headerLen, nil, false)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint16(buf[off:], qs.Qtype)
	binary.BigEndian.PutUint16(buf[off+2:], qs.Qclass)
	off += 4
	do := false
	if opt := q.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	buf[off] = 0 // the root name
	binary.BigEndian.PutUint16(buf[off+1:], dns.TypeOPT)
	binary.BigEndian.PutUint16(buf[off+3:], udpSize) // CLASS: our payload size
	var ttl uint32                                   // extended rcode 0, version 0, flags
	if do {
		ttl = optDO
	}
	binary.BigEndian.PutUint32(buf[off+5:], ttl)
	binary.BigEndian.PutUint16(buf[off+9:], 0) // no options
	return buf[:off+optLen], nil
}

// replyVerdict is what checkReply concluded about one packet.
type replyVerdict int

const (
	// replyAnswer: the answer to our query, fully parsed.
	replyAnswer replyVerdict = iota
	// replyTruncated: the answer to our query with TC set; only its
	// header and question were read, the rest may be cut anywhere.
	replyTruncated
	// replyParseError: too short, or the header or question could not be
	// read, or the answer to our query could not be parsed.
	replyParseError
	// replyUnexpected: a well-formed packet that is not the answer to our
	// query (not a response, other opcode, other question).
	replyUnexpected
	// replyNearMiss: a response to our question with another id, the
	// signature of someone guessing ids.
	replyNearMiss
)

// expected is what a reply must match: the id and question of the packet
// as sent. name is the question name as the wire carries it back (unpacked
// from our own packet), so that comparing does not depend on how the caller
// spelled escapes.
type expected struct {
	id     uint16
	name   string
	qtype  uint16
	qclass uint16
}

// checkReply judges one packet read from a forwarder against the query it
// should answer. It never panics, whatever pkt holds (FuzzCheckReply). For
// replyAnswer the parsed message is returned, and caseDiffers tells that
// the echoed question name matched only case-insensitively.
//
// A response with no question section is accepted when it carries our id
// and an error rcode: servers answer FORMERR, NOTIMP or REFUSED like that,
// and the caller treats the rcode as this forwarder's failure, never as an
// answer, so an off-path guess of the id alone gains nothing.
func checkReply(pkt []byte, want *expected) (m *dns.Msg, v replyVerdict, caseDiffers bool) {
	if len(pkt) < headerLen {
		return nil, replyParseError, false
	}
	id := binary.BigEndian.Uint16(pkt[0:])
	bits := binary.BigEndian.Uint16(pkt[2:])
	qdcount := binary.BigEndian.Uint16(pkt[4:])
	// The order of the checks follows PowerDNS's (handleUDPServerResponse),
	// so that the same packet lands in the same statistic: a query or a
	// response without a question is unexpected, a question that cannot be
	// read is a parse error, a question that is not ours is unexpected.
	if bits&flagQR == 0 {
		return nil, replyUnexpected, false
	}
	if qdcount == 0 {
		if id != want.id || int(bits>>11)&0xF != dns.OpcodeQuery || !isForwarderFailure(int(bits&0xF)) {
			return nil, replyUnexpected, false
		}
		m = new(dns.Msg)
		if err := m.Unpack(pkt); err != nil {
			return nil, replyParseError, false
		}
		if !isForwarderFailure(m.Rcode) {
			// An OPT record's extended rcode bits made it another rcode
			// (found by FuzzCheckReply): not the failure it looked like.
			return nil, replyUnexpected, false
		}
		return m, replyAnswer, false
	}
	name, off, err := dns.UnpackDomainName(pkt, headerLen)
	if err != nil || off+4 > len(pkt) {
		return nil, replyParseError, false
	}
	qtype := binary.BigEndian.Uint16(pkt[off:])
	qclass := binary.BigEndian.Uint16(pkt[off+2:])
	if qdcount != 1 || int(bits>>11)&0xF != dns.OpcodeQuery ||
		qtype != want.qtype || qclass != want.qclass || !equalFoldASCII(name, want.name) {
		return nil, replyUnexpected, false
	}
	if id != want.id {
		return nil, replyNearMiss, false
	}
	caseDiffers = name != want.name
	if bits&flagTC != 0 {
		return nil, replyTruncated, caseDiffers
	}
	m = new(dns.Msg)
	if err := m.Unpack(pkt); err != nil {
		return nil, replyParseError, false
	}
	return m, replyAnswer, caseDiffers
}

// equalFoldASCII compares DNS names ignoring ASCII letter case only
// (RFC 4343): bytes outside A–Z must match exactly, unlike strings.EqualFold,
// which would also fold Unicode look-alikes.
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// isForwarderFailure tells the rcodes that speak about the forwarder, not
// about the name: every rcode but NOERROR, NXDOMAIN and YXDOMAIN (a DNAME
// substitution too long, RFC 6672 §2.2). It could not resolve (SERVFAIL),
// will not serve us (REFUSED), did not understand the query (FORMERR,
// NOTIMP), or answered with an rcode no query of ours can get: BADVERS
// (we send EDNS version 0, which every EDNS server must accept, RFC 6891
// §6.1.3), BADCOOKIE (we send no cookie), TSIG's (we sign nothing),
// UPDATE's. Such an rcode is the resolver's problem, not its client's:
// another forwarder may do better, so the reply is not returned as the
// answer, and with none left the client gets SERVFAIL.
func isForwarderFailure(rcode int) bool {
	switch rcode {
	case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeYXDomain:
		return false
	}
	return true
}
