package dnswire

import (
	"encoding/binary"
	"math"
)

// AnswerInfo is what the packet cache needs to know about a response before
// storing it: how long it may live and whether it may be stored at all.
type AnswerInfo struct {
	Flags Flags
	// Rcode includes the upper bits from the OPT record (RFC 6891 §6.1.3).
	Rcode int
	// QuestionEnd is the offset after the question section; the question
	// name starts at HeaderLen.
	QuestionEnd int
	QDCount     uint16
	ANCount     uint16
	NSCount     uint16
	ARCount     uint16
	// Records counts the records that have a TTL: all but the OPT.
	Records int
	// MinTTL is the smallest TTL of those records, a TTL with the top bit
	// set counting as 0 (RFC 2181 §8). Zero when Records is 0.
	MinTTL uint32
	// SOA is the first SOA record of the authority section, which carries
	// the negative-caching TTL of an NXDOMAIN or NODATA answer (RFC 2308
	// §5: the smaller of its TTL and its MINIMUM field).
	HasSOA     bool
	SOATTL     uint32
	SOAMinimum uint32
	HasOPT     bool
}

// NegativeTTL is the RFC 2308 §5 lifetime of a negative answer: the smaller
// of the SOA record's TTL and its MINIMUM. Zero without an SOA, which RFC
// 2308 §5 says not to cache.
func (a *AnswerInfo) NegativeTTL() uint32 {
	if !a.HasSOA {
		return 0
	}
	return min(a.SOATTL, a.SOAMinimum)
}

// AnswerError is ScanAnswer's error: why a response will not be stored. A
// string constant converts to an error without allocating.
type AnswerError string

func (e AnswerError) Error() string { return "dnswire: malformed answer: " + string(e) }

// ScanAnswer walks a complete response once and appends to offs the offset
// of the TTL field of every record except the OPT (whose TTL field holds
// flags and must never be aged), returning the extended slice. With those
// offsets a cache ages and clamps TTLs in place without parsing again. Names
// may be compressed anywhere but in the question. Trailing bytes after the
// counted records are an error: a stored answer is replayed byte for byte.
func ScanAnswer(msg []byte, offs []uint16) (AnswerInfo, []uint16, error) {
	var a AnswerInfo
	if len(msg) < HeaderLen {
		return a, offs, AnswerError("shorter than a header")
	}
	if len(msg) > MaxMsgLen {
		return a, offs, AnswerError("longer than 65535 bytes")
	}
	a.Flags = Flags(binary.BigEndian.Uint16(msg[2:]))
	a.Rcode = a.Flags.Rcode()
	a.QDCount = binary.BigEndian.Uint16(msg[4:])
	a.ANCount = binary.BigEndian.Uint16(msg[6:])
	a.NSCount = binary.BigEndian.Uint16(msg[8:])
	a.ARCount = binary.BigEndian.Uint16(msg[10:])

	off := HeaderLen
	for range a.QDCount {
		next, err := skipName(msg, off)
		if err != nil || next+4 > len(msg) {
			return a, offs, AnswerError("bad question")
		}
		off = next + 4
	}
	a.QuestionEnd = off

	total := int(a.ANCount) + int(a.NSCount) + int(a.ARCount)
	authorityStart, authorityEnd := int(a.ANCount), int(a.ANCount)+int(a.NSCount)
	minTTL := ^uint32(0)
	for i := range total {
		rootOwner := off < len(msg) && msg[off] == 0
		next, err := skipName(msg, off)
		if err != nil || next+10 > len(msg) {
			return a, offs, AnswerError("bad record header")
		}
		off = next
		rrtype := binary.BigEndian.Uint16(msg[off:])
		ttl := binary.BigEndian.Uint32(msg[off+4:])
		rdlen := int(binary.BigEndian.Uint16(msg[off+8:]))
		ttlOff := off + 4
		off += 10
		if off+rdlen > len(msg) {
			return a, offs, AnswerError("record data past the end")
		}
		if rrtype == TypeOPT {
			if i < authorityEnd || !rootOwner || a.HasOPT {
				return a, offs, AnswerError("misplaced or repeated OPT")
			}
			a.HasOPT = true
			a.Rcode |= int(ttl>>24) << 4
			off += rdlen
			continue
		}
		ttl = CapTTL(ttl, math.MaxUint32)
		minTTL = min(minTTL, ttl)
		a.Records++
		offs = append(offs, uint16(ttlOff))
		if rrtype == TypeSOA && !a.HasSOA && i >= authorityStart && i < authorityEnd {
			minimum, ok := soaMinimum(msg, off, off+rdlen)
			if !ok {
				return a, offs, AnswerError("bad SOA")
			}
			a.HasSOA, a.SOATTL, a.SOAMinimum = true, ttl, minimum
		}
		off += rdlen
	}
	if off != len(msg) {
		return a, offs, AnswerError("trailing bytes")
	}
	if a.Records > 0 {
		a.MinTTL = minTTL
	}
	return a, offs, nil
}

// soaMinimum reads the MINIMUM field, the last of the SOA's RDATA, after
// two possibly compressed names and four 32-bit fields.
func soaMinimum(msg []byte, off, end int) (uint32, bool) {
	rdata := msg[:end] // names must not run past the record
	for range 2 {
		next, err := skipName(rdata, off)
		if err != nil {
			return 0, false
		}
		off = next
	}
	if off+20 != end {
		return 0, false
	}
	m := binary.BigEndian.Uint32(msg[off+16:])
	if m > 1<<31-1 {
		m = 0
	}
	return m, true
}

// ClampTTLs writes CapTTL of every TTL at offs, so that a client never
// caches a record longer than this server's cache would.
func ClampTTLs(msg []byte, offs []uint16, maxTTL uint32) {
	for _, o := range offs {
		p := msg[int(o) : int(o)+4 : int(o)+4]
		binary.BigEndian.PutUint32(p, CapTTL(binary.BigEndian.Uint32(p), maxTTL))
	}
}

// CapTTL is the one rule for a TTL this server passes on, on a cache miss
// and a hit alike: one with the top bit set is 0 (RFC 2181 §8), and none
// is above maxTTL.
func CapTTL(ttl, maxTTL uint32) uint32 {
	if ttl > 1<<31-1 {
		return 0
	}
	return min(ttl, maxTTL)
}
