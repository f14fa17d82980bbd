package dnswire

import "encoding/binary"

// PatchHeader makes a cached answer the reply to q: the id, and the RD bit,
// which RFC 1035 §4.1.1 says is copied from the query (the answer in the
// cache may have been made for a client that set it differently). CD is part
// of the packet-cache key, so it already matches.
func PatchHeader(msg []byte, q *Query) {
	if len(msg) < HeaderLen {
		return
	}
	binary.BigEndian.PutUint16(msg, q.ID)
	if q.Flags&FlagRD != 0 {
		msg[2] |= byte(FlagRD >> 8)
	} else {
		msg[2] &^= byte(FlagRD >> 8)
	}
}

// CopyQuestionCase writes the client's spelling of the question name over
// the one in msg, whose question must start right after the header, as in
// every answer this server builds. Clients using 0x20 (random letter case as
// extra entropy against spoofing) check that the reply's question matches
// theirs byte for byte; the cache stores one spelling for all of them.
// Returns false, changing nothing, when the names differ other than in case.
func CopyQuestionCase(msg, clientName []byte) bool {
	end := HeaderLen + len(clientName)
	if len(msg) < end || !EqualFoldName(msg[HeaderLen:end], clientName) {
		return false
	}
	copy(msg[HeaderLen:end], clientName)
	return true
}

// AppendError appends a reply to q with the given rcode and no records but
// the echoed question (when it was parsed) and, when the query had an OPT
// record, an OPT of ours (RFC 6891 §7: a responder answers an EDNS query with
// EDNS, FORMERR and BADVERS included) announcing udpSize and carrying the
// upper bits of rcode, so RcodeBadVers works. Without EDNS only the low four
// bits of rcode can be sent. It never allocates when cap(dst)-len(dst) is at
// least MaxReplyLen.
//
// q may come from a failed parse: whatever it holds (at least the header,
// when the error was not a Drop) is used.
func AppendError(dst []byte, q *Query, rcode int, udpSize uint16) []byte {
	return appendReply(dst, q, rcode, udpSize)
}

func appendReply(dst []byte, q *Query, rcode int, udpSize uint16) []byte {
	// Opcode, RD and CD are echoed; RA because this is a recursor.
	flags := FlagQR | FlagRA | Flags(rcode&0xF) |
		q.Flags&(0xF<<11|FlagRD|FlagCD)
	var qd, ar uint16
	if q.HasQuestion() {
		qd = 1
	}
	if q.EDNS.Present {
		ar = 1
	}
	dst = append(dst,
		byte(q.ID>>8), byte(q.ID),
		byte(flags>>8), byte(flags),
		0, byte(qd), 0, 0, 0, 0, 0, byte(ar))
	if qd == 1 {
		dst = append(dst, q.Question()...)
	}
	if ar == 1 {
		if udpSize < 512 {
			udpSize = 512
		}
		var do byte
		if q.EDNS.DO {
			do = 0x80 // RFC 3225 §3: the DO bit is copied into the response
		}
		dst = append(dst,
			0,          // root owner
			0, TypeOPT, // type
			byte(udpSize>>8), byte(udpSize),
			byte(rcode>>4), // extended rcode
			0,              // version 0
			do, 0,          // flags
			0, 0) // no options
	}
	return dst
}
