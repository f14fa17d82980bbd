package dnswire

// ParseError says why a packet is not a query this server answers normally.
// It is a small integer, so returning it as an error allocates nothing, and
// a server can count by value (client-parse-errors, ignored-packets).
//
// Two kinds: Drop errors leave nothing safe to answer (no readable header,
// or a response, which answering could turn into a loop between two
// servers); every other error came with a readable header and is answered
// with Rcode() — FORMERR, or NOTIMP for an opcode other than QUERY.
type ParseError uint8

// Parse errors. The zero value is not an error and never returned.
const (
	// Dropped.
	ErrShortHeader ParseError = iota + 1 // fewer than 12 bytes
	ErrNotQuery                          // QR set: a response, not a query

	// Answered NOTIMP.
	ErrOpcode // opcode other than QUERY (NOTIFY, UPDATE, IQUERY, STATUS, …)

	// Answered FORMERR.
	ErrQuestionCount  // QDCOUNT ≠ 1
	ErrAnswerSections // ANCOUNT or NSCOUNT ≠ 0
	ErrTruncated      // a name, the question or a record runs past the end
	ErrCompression    // compression pointer in the question name
	ErrBadPointer     // compression pointer elsewhere that does not point backwards
	ErrLabelType      // label type 0x40 or 0x80 (obsolete extended labels)
	ErrNameTooLong    // name longer than 255 bytes
	ErrOPTCount       // more than one OPT record (RFC 6891 §6.1.1)
	ErrOPTOwner       // OPT owner is not the root
	ErrOPTOptions     // option lengths disagree with RDLENGTH, or a malformed cookie
)

// Error is a fixed text per value: a switch rather than a table, so that the
// package holds no mutable state.
func (e ParseError) Error() string {
	switch e {
	case ErrShortHeader:
		return "dnswire: shorter than a DNS header"
	case ErrNotQuery:
		return "dnswire: QR bit set (a response, not a query)"
	case ErrOpcode:
		return "dnswire: opcode not implemented"
	case ErrQuestionCount:
		return "dnswire: QDCOUNT is not 1"
	case ErrAnswerSections:
		return "dnswire: answer or authority records in a query"
	case ErrTruncated:
		return "dnswire: message truncated"
	case ErrCompression:
		return "dnswire: compression pointer in the question"
	case ErrBadPointer:
		return "dnswire: compression pointer does not point backwards"
	case ErrLabelType:
		return "dnswire: reserved label type"
	case ErrNameTooLong:
		return "dnswire: name longer than 255 bytes"
	case ErrOPTCount:
		return "dnswire: more than one OPT record"
	case ErrOPTOwner:
		return "dnswire: OPT owner is not the root"
	case ErrOPTOptions:
		return "dnswire: malformed EDNS options"
	}
	return "dnswire: parse error"
}

// Drop reports that the packet gets no reply at all.
func (e ParseError) Drop() bool { return e == ErrShortHeader || e == ErrNotQuery }

// Rcode is the reply's response code: NOTIMP for an opcode other than QUERY,
// FORMERR otherwise. Meaningless when Drop is true.
func (e ParseError) Rcode() int {
	if e == ErrOpcode {
		return RcodeNotImplemented
	}
	return RcodeFormatError
}
