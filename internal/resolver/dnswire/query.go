package dnswire

import "encoding/binary"

// Sizes of the wire format (RFC 1035 §2.3.4, §4.1).
const (
	HeaderLen  = 12
	MaxNameLen = 255 // a wire name, root label included
	MaxMsgLen  = 65535

	// MaxReplyLen is the longest reply AppendError writes:
	// header, the longest question, and an OPT record without options. A dst
	// with this capacity is never grown.
	MaxReplyLen = HeaderLen + MaxNameLen + 4 + optRRLen

	optRRLen = 11 // root owner, type, class, TTL, RDLENGTH 0
)

// Record types and classes the fast path needs to recognise.
const (
	TypeSOA = 6
	TypeOPT = 41

	ClassINET = 1
)

// Response codes; the ones above 15 exist only with EDNS (RFC 6891 §6.1.3).
const (
	RcodeSuccess        = 0
	RcodeFormatError    = 1
	RcodeServerFailure  = 2
	RcodeNameError      = 3 // NXDOMAIN
	RcodeNotImplemented = 4
	RcodeRefused        = 5
	RcodeBadVers        = 16
)

// OpcodeQuery is the only opcode a recursor answers normally.
const OpcodeQuery = 0

// Header flag bits (RFC 1035 §4.1.1, RFC 4035 §3.2 for AD and CD).
const (
	FlagQR Flags = 1 << 15
	FlagAA Flags = 1 << 10
	FlagTC Flags = 1 << 9
	FlagRD Flags = 1 << 8
	FlagRA Flags = 1 << 7
	FlagZ  Flags = 1 << 6
	FlagAD Flags = 1 << 5
	FlagCD Flags = 1 << 4
)

// Flags is the second 16-bit word of the header: QR, opcode, AA, TC, RD, RA,
// Z, AD, CD and the low four bits of the rcode.
type Flags uint16

// Has reports whether every bit of f2 is set.
func (f Flags) Has(f2 Flags) bool { return f&f2 == f2 }

// Opcode is the four-bit operation code.
func (f Flags) Opcode() int { return int(f>>11) & 0xF }

// Rcode is the header's four-bit response code (without the EDNS extension).
func (f Flags) Rcode() int { return int(f) & 0xF }

// EDNS option codes (IANA "DNS EDNS0 Option Codes").
const (
	OptionNSID      = 3
	OptionECS       = 8 // client subnet, RFC 7871
	OptionExpire    = 9
	OptionCookie    = 10 // RFC 7873
	OptionKeepalive = 11
	OptionPadding   = 12
	OptionEDE       = 15 // extended DNS error, RFC 8914
)

// Options records which EDNS options a query carried, one bit per known
// option and OptUnknown for any other, so that the server can count them and
// decide (an ECS or cookie query may need the slow path) without a second
// pass over the OPT record.
type Options uint16

// Bits of Options.
const (
	OptNSID Options = 1 << iota
	OptECS
	OptExpire
	OptCookie
	OptKeepalive
	OptPadding
	OptEDE
	OptUnknown
)

// Span locates an option's data inside the query packet.
type Span struct {
	Off, Len uint16
}

// EDNS is what the query's OPT record said (RFC 6891 §6.1).
type EDNS struct {
	Present bool
	// UDPSize is the payload size the client announced, as sent; use
	// MaxUDP for the value to honour.
	UDPSize uint16
	// ExtRcode is the upper eight bits of the rcode; zero in a query.
	ExtRcode uint8
	// Version other than 0 is answered BADVERS (RFC 6891 §6.1.3): the parse
	// succeeds and the caller checks Query.BadVersion.
	Version uint8
	DO      bool
	// Z holds the 15 flag bits after DO (the top one is the CO bit of the
	// compact-denial draft), ignored by a responder but kept for logging.
	Z       uint16
	Options Options
	// ECS and Cookie are the data of the first client-subnet and cookie
	// options, when Options has the bit.
	ECS    Span
	Cookie Span
}

// MaxUDP is the largest UDP reply the client accepts: 512 without EDNS, and
// never less than 512 with it (RFC 6891 §6.2.3).
func (e *EDNS) MaxUDP() int {
	if !e.Present || e.UDPSize < 512 {
		return 512
	}
	return int(e.UDPSize)
}

// Query is one parsed client query. It refers to the packet it was parsed
// from (RawName, Question, option spans), so it is valid only while that
// buffer is not reused; the lower-cased name is a copy held inside Query
// itself, which is the caller-provided buffer the cache key is built from.
type Query struct {
	ID     uint16
	Flags  Flags
	QType  uint16
	QClass uint16
	EDNS   EDNS

	nameLen uint16 // wire length of the name, 0 when the question was not parsed
	end     uint16 // offset after the last section parsed
	raw     []byte
	name    [MaxNameLen + 1]byte // lower-cased copy of the question name; one spare byte so that lowerASCII works in whole words
}

// Parse parses the client query b into q, reusing q (a server keeps one per
// socket worker, so that the 255-byte name buffer is not copied around).
//
// On error q holds what was read before it: ID and Flags once the header was
// readable, the question once it was valid, so that AppendError can echo
// them. The error is always a ParseError; its Drop and Rcode methods say how
// to answer.
//
// Accepted: QR=0, opcode QUERY, QDCOUNT=1, ANCOUNT=NSCOUNT=0, a question name
// of plain labels (no compression pointer, no reserved label types, at most
// 255 bytes), and any number of well-formed additional records of which at
// most one is an OPT with the root as owner. Bytes after the last counted
// record are ignored, as miekg/dns, Unbound and PowerDNS do.
func (q *Query) Parse(b []byte) error {
	q.ID, q.Flags, q.QType, q.QClass = 0, 0, 0, 0
	q.EDNS = EDNS{}
	q.nameLen, q.end = 0, 0
	q.raw = b

	if len(b) < HeaderLen {
		q.raw = nil
		return ErrShortHeader
	}
	if len(b) > MaxMsgLen {
		b = b[:MaxMsgLen] // offsets are uint16; nothing valid lies beyond
		q.raw = b
	}
	q.ID = binary.BigEndian.Uint16(b[0:])
	q.Flags = Flags(binary.BigEndian.Uint16(b[2:]))
	if q.Flags&FlagQR != 0 {
		return ErrNotQuery
	}
	if q.Flags.Opcode() != OpcodeQuery {
		return ErrOpcode
	}
	qd := binary.BigEndian.Uint16(b[4:])
	an := binary.BigEndian.Uint16(b[6:])
	ns := binary.BigEndian.Uint16(b[8:])
	ar := binary.BigEndian.Uint16(b[10:])
	if qd != 1 {
		return ErrQuestionCount
	}

	// The question: validate the labels by jumping from length byte to
	// length byte, then copy the name and lower-case the copy eight bytes at
	// a time. Length bytes (0–63) are below 'A', so lower-casing the whole
	// wire name leaves them alone.
	off := HeaderLen
	for {
		if off >= len(b) {
			return ErrTruncated
		}
		l := int(b[off])
		if l == 0 {
			off++
			break
		}
		switch l & 0xC0 {
		case 0xC0:
			return ErrCompression
		case 0x40, 0x80:
			return ErrLabelType
		}
		off += 1 + l
		if off-HeaderLen+1 > MaxNameLen { // the labels so far and the root
			return ErrNameTooLong
		}
	}
	n := off - HeaderLen
	copy(q.name[:n], b[HeaderLen:off])
	lowerASCII(q.name[:(n+7)&^7])
	if off+4 > len(b) {
		return ErrTruncated
	}
	q.QType = binary.BigEndian.Uint16(b[off:])
	q.QClass = binary.BigEndian.Uint16(b[off+2:])
	off += 4
	q.nameLen = uint16(n)
	q.end = uint16(off)

	// A query asks; records in the answer or authority section make it
	// something else (an UPDATE-like or malformed message), FORMERR as in
	// Unbound.
	if an != 0 || ns != 0 {
		return ErrAnswerSections
	}

	for range ar {
		next, err := q.parseAdditional(b, off)
		if err != nil {
			return err
		}
		off = next
	}
	q.end = uint16(off)
	return nil
}

// parseAdditional checks one additional record at off and, for the OPT
// record, fills q.EDNS. Other records (a TSIG a recursor cannot verify, for
// instance) are skipped after their bounds are checked.
func (q *Query) parseAdditional(b []byte, off int) (int, error) {
	rootOwner := off < len(b) && b[off] == 0
	off, err := skipName(b, off)
	if err != nil {
		return 0, err
	}
	if off+10 > len(b) {
		return 0, ErrTruncated
	}
	rrtype := binary.BigEndian.Uint16(b[off:])
	class := binary.BigEndian.Uint16(b[off+2:])
	ttl := binary.BigEndian.Uint32(b[off+4:])
	rdlen := int(binary.BigEndian.Uint16(b[off+8:]))
	off += 10
	if off+rdlen > len(b) {
		return 0, ErrTruncated
	}
	if rrtype != TypeOPT {
		return off + rdlen, nil
	}
	if q.EDNS.Present {
		return 0, ErrOPTCount
	}
	if !rootOwner {
		return 0, ErrOPTOwner
	}
	e := EDNS{
		Present:  true,
		UDPSize:  class,
		ExtRcode: uint8(ttl >> 24),
		Version:  uint8(ttl >> 16),
		DO:       ttl&0x8000 != 0,
		Z:        uint16(ttl) & 0x7FFF,
	}
	end := off + rdlen
	for off < end {
		if off+4 > end {
			return 0, ErrOPTOptions
		}
		code := binary.BigEndian.Uint16(b[off:])
		olen := int(binary.BigEndian.Uint16(b[off+2:]))
		off += 4
		if off+olen > end {
			return 0, ErrOPTOptions
		}
		span := Span{Off: uint16(off), Len: uint16(olen)}
		switch code {
		case OptionNSID:
			e.Options |= OptNSID
		case OptionECS:
			if e.Options&OptECS == 0 {
				e.ECS = span
			}
			e.Options |= OptECS
		case OptionExpire:
			e.Options |= OptExpire
		case OptionCookie:
			// RFC 7873 §5.2.2: a client cookie of 8 bytes, optionally
			// followed by a server cookie of 8 to 32; anything else is
			// malformed, FORMERR.
			if olen != 8 && (olen < 16 || olen > 40) {
				return 0, ErrOPTOptions
			}
			if e.Options&OptCookie == 0 {
				e.Cookie = span
			}
			e.Options |= OptCookie
		case OptionKeepalive:
			e.Options |= OptKeepalive
		case OptionPadding:
			e.Options |= OptPadding
		case OptionEDE:
			e.Options |= OptEDE
		default:
			e.Options |= OptUnknown
		}
		off += olen
	}
	q.EDNS = e
	return end, nil
}

// lowerASCII lower-cases p in place, eight bytes per step (len(p) must be a
// multiple of 8): a byte gets 0x20 added when it is ASCII (top bit clear) and
// its value lies in 'A'..'Z', found with two additions per 64-bit word that
// cannot carry from one byte into the next.
func lowerASCII(p []byte) {
	const ones = 0x0101010101010101
	for i := 0; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		low7 := x & (0x7F * ones)
		atLeastA := low7 + (0x80-'A')*ones
		pastZ := low7 + (0x80-'Z'-1)*ones
		upper := atLeastA &^ pastZ &^ x & (0x80 * ones)
		binary.LittleEndian.PutUint64(p[i:], x|upper>>2)
	}
}

// skipName steps over a name that may end in a compression pointer, as owner
// names outside the question may. The pointer is not followed (nothing here
// needs the name) but must point backwards, past the header, which also
// rules out loops for whoever follows it later.
func skipName(b []byte, off int) (int, error) {
	start := off
	for {
		if off >= len(b) {
			return 0, ErrTruncated
		}
		l := int(b[off])
		switch l & 0xC0 {
		case 0xC0:
			if off+2 > len(b) {
				return 0, ErrTruncated
			}
			if ptr := (l&0x3F)<<8 | int(b[off+1]); ptr >= start || ptr < HeaderLen {
				return 0, ErrBadPointer
			}
			return off + 2, nil
		case 0x40, 0x80:
			return 0, ErrLabelType
		}
		off += 1 + l
		if l == 0 {
			return off, nil
		}
		if off-start >= MaxNameLen {
			return 0, ErrNameTooLong
		}
	}
}

// Name is the question name in wire form, lower-cased (ASCII only, RFC
// 4343), root label included: the name part of a cache key. Empty when the
// question was not parsed.
func (q *Query) Name() []byte { return q.name[:q.nameLen] }

// RawName is the question name as the client wrote it, for echoing its
// letter case back (0x20, draft-vixie-dnsext-dns0x20).
func (q *Query) RawName() []byte {
	if q.nameLen == 0 {
		return nil
	}
	return q.raw[HeaderLen : HeaderLen+int(q.nameLen)]
}

// HasQuestion reports whether the question was parsed (on error, whether a
// reply can echo it).
func (q *Query) HasQuestion() bool { return q.nameLen != 0 }

// Question is the question section as the client sent it: name, type, class.
func (q *Query) Question() []byte {
	if q.nameLen == 0 {
		return nil
	}
	return q.raw[HeaderLen : HeaderLen+int(q.nameLen)+4]
}

// Len is how many bytes of the packet the parse used; anything after is
// ignored trailing data.
func (q *Query) Len() int { return int(q.end) }

// BadVersion reports an EDNS version this server does not speak: the reply
// is BADVERS (AppendError with RcodeBadVers), not an answer.
func (q *Query) BadVersion() bool { return q.EDNS.Present && q.EDNS.Version != 0 }

// OptionData returns the bytes of an option located by one of EDNS's spans.
func (q *Query) OptionData(s Span) []byte {
	if s.Len == 0 || int(s.Off)+int(s.Len) > len(q.raw) {
		return nil
	}
	return q.raw[s.Off : s.Off+s.Len]
}
