package dnstap

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// The dnstap schema (dnstap.proto, proto2), the part written here. The
// encoder below is hand-written with protowire rather than generated: a
// dozen fields do not justify generated code and its runtime.
//
//	message Dnstap {
//	  optional bytes identity = 1; optional bytes version = 2;
//	  optional Message message = 14; required Type type = 15; // MESSAGE = 1
//	}
//	message Message {
//	  required Type type = 1;                // CLIENT_QUERY = 5, CLIENT_RESPONSE = 6
//	  optional SocketFamily socket_family = 2;     // INET = 1, INET6 = 2
//	  optional SocketProtocol socket_protocol = 3; // UDP 1, TCP 2, DOT 3, DOH 4, DOQ 7
//	  optional bytes query_address = 4; optional uint32 query_port = 6;
//	  optional uint64 query_time_sec = 8; optional fixed32 query_time_nsec = 9;
//	  optional bytes query_message = 10;
//	  optional uint64 response_time_sec = 12; optional fixed32 response_time_nsec = 13;
//	  optional bytes response_message = 14;
//	  optional Policy policy = 15;
//	}
//	message Policy {
//	  optional string type = 1; optional bytes rule = 2;
//	  optional Action action = 3; // NXDOMAIN 1, NODATA 2, PASS 3, DROP 4, TRUNCATE 5, LOCAL_DATA 6
//	}
const (
	fDnstapIdentity = 1
	fDnstapVersion  = 2
	fDnstapMessage  = 14
	fDnstapType     = 15
	dnstapMessage   = 1

	fMsgType          = 1
	fMsgFamily        = 2
	fMsgProtocol      = 3
	fMsgQueryAddress  = 4
	fMsgQueryPort     = 6
	fMsgQueryTimeSec  = 8
	fMsgQueryTimeNsec = 9
	fMsgQueryMessage  = 10
	fMsgRespTimeSec   = 12
	fMsgRespTimeNsec  = 13
	fMsgRespMessage   = 14
	fMsgPolicy        = 15

	fPolicyType   = 1
	fPolicyRule   = 2
	fPolicyAction = 3

	typeClientQuery    = 5
	typeClientResponse = 6

	familyINET  = 1
	familyINET6 = 2
)

// socketProtocol maps a transport to dnstap's SocketProtocol.
func socketProtocol(t policy.Transport) uint64 {
	switch t {
	case policy.TransportTCP:
		return 2
	case policy.TransportDoT:
		return 3
	case policy.TransportDoH:
		return 4
	case policy.TransportDoQ:
		return 7
	}
	return 1 // UDP
}

// Policy actions (dnstap's Policy.Action); 0: the field is left out (a
// REFUSED block has no counterpart).
const (
	actionNone      = 0
	actionNXDomain  = 1
	actionNoData    = 2
	actionDrop      = 4
	actionTruncate  = 5
	actionLocalData = 6
)

func policyAction(a policy.Action) uint8 {
	switch a {
	case policy.ActionNXDomain:
		return actionNXDomain
	case policy.ActionNoData:
		return actionNoData
	case policy.ActionDrop:
		return actionDrop
	case policy.ActionTruncate:
		return actionTruncate
	case policy.ActionRedirect, policy.ActionCNAME:
		return actionLocalData
	}
	return actionNone
}

// reasons are the policy reasons a record names by index (Policy.type);
// 0 is none: no Policy is written.
var reasons = [...]policy.Reason{"", policy.ReasonFilteringOff, policy.ReasonAllowlist, policy.ReasonRPZ,
	policy.ReasonBlocklist, policy.ReasonPaused, policy.ReasonSafeSearch, policy.ReasonCategory,
	policy.ReasonNetwork, policy.ReasonDefault}

func reasonIndex(r policy.Reason) uint8 {
	for i, x := range reasons {
		if x == r {
			return uint8(i)
		}
	}
	return 0
}

// record is one answered query as queued: what Answered copied. Its bytes
// (the reply, the rule, the name) share one pooled buffer.
type record struct {
	buf       *[]byte
	nReply    int
	nRule     int // the rule's bytes follow the reply's, the name's the rule's
	client    netip.AddrPort
	at        time.Time // the reply handed to the transport
	took      time.Duration
	qtype     uint16
	transport policy.Transport
	dropped   bool  // the policy dropped the query: no reply
	blocked   bool  // a Policy is written
	reason    uint8 // reasons' index
	action    uint8 // dnstap's Policy.Action, 0 none
}

func (r *record) reply() []byte { return (*r.buf)[:r.nReply] }
func (r *record) rule() []byte  { return (*r.buf)[r.nReply : r.nReply+r.nRule] }
func (r *record) name() []byte  { return (*r.buf)[r.nReply+r.nRule:] }

// appendDnstap appends the Dnstap payload for r: a CLIENT_RESPONSE, or a
// CLIENT_QUERY when the policy dropped the query and no reply was sent.
// scratch is room for the nested Message (returned, grown, for reuse).
func appendDnstap(dst, scratch []byte, identity, version []byte, r *record) (out, scratchOut []byte) {
	m := scratch[:0]
	typ := uint64(typeClientResponse)
	if r.dropped {
		typ = typeClientQuery
	}
	m = protowire.AppendTag(m, fMsgType, protowire.VarintType)
	m = protowire.AppendVarint(m, typ)
	addr := r.client.Addr().Unmap()
	if addr.IsValid() {
		m = protowire.AppendTag(m, fMsgFamily, protowire.VarintType)
		if addr.Is4() {
			m = protowire.AppendVarint(m, familyINET)
		} else {
			m = protowire.AppendVarint(m, familyINET6)
		}
	}
	m = protowire.AppendTag(m, fMsgProtocol, protowire.VarintType)
	m = protowire.AppendVarint(m, socketProtocol(r.transport))
	if addr.IsValid() {
		m = protowire.AppendTag(m, fMsgQueryAddress, protowire.BytesType)
		if addr.Is4() {
			a := addr.As4()
			m = protowire.AppendBytes(m, a[:])
		} else {
			a := addr.As16()
			m = protowire.AppendBytes(m, a[:])
		}
		m = protowire.AppendTag(m, fMsgQueryPort, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(r.client.Port()))
	}
	m = appendTime(m, fMsgQueryTimeSec, fMsgQueryTimeNsec, r.at.Add(-r.took))
	// The query as a question: the resolver keeps the client's bytes
	// only as long as it answers (see synthQuery).
	m = protowire.AppendTag(m, fMsgQueryMessage, protowire.BytesType)
	n := len(m)
	m = append(m, 0) // room for a one-byte length, moved if longer
	var ok bool
	if m, ok = appendQuery(m, r.reply(), r.name(), r.qtype); ok {
		m = fixLength(m, n)
	} else {
		m = m[:n-protowire.SizeTag(fMsgQueryMessage)]
	}
	if !r.dropped {
		m = appendTime(m, fMsgRespTimeSec, fMsgRespTimeNsec, r.at)
		m = protowire.AppendTag(m, fMsgRespMessage, protowire.BytesType)
		m = protowire.AppendBytes(m, r.reply())
	}
	if r.blocked {
		m = protowire.AppendTag(m, fMsgPolicy, protowire.BytesType)
		n := len(m)
		m = append(m, 0)
		if r.reason != 0 {
			m = protowire.AppendTag(m, fPolicyType, protowire.BytesType)
			m = protowire.AppendString(m, string(reasons[r.reason]))
		}
		if r.nRule > 0 {
			m = protowire.AppendTag(m, fPolicyRule, protowire.BytesType)
			m = protowire.AppendBytes(m, r.rule())
		}
		if r.action != actionNone {
			m = protowire.AppendTag(m, fPolicyAction, protowire.VarintType)
			m = protowire.AppendVarint(m, uint64(r.action))
		}
		m = fixLength(m, n)
	}

	if len(identity) > 0 {
		dst = protowire.AppendTag(dst, fDnstapIdentity, protowire.BytesType)
		dst = protowire.AppendBytes(dst, identity)
	}
	if len(version) > 0 {
		dst = protowire.AppendTag(dst, fDnstapVersion, protowire.BytesType)
		dst = protowire.AppendBytes(dst, version)
	}
	dst = protowire.AppendTag(dst, fDnstapMessage, protowire.BytesType)
	dst = protowire.AppendBytes(dst, m)
	dst = protowire.AppendTag(dst, fDnstapType, protowire.VarintType)
	dst = protowire.AppendVarint(dst, dnstapMessage)
	return dst, m
}

// fixLength makes the one byte reserved at m[at] the varint length of
// m[at+1:], moving those bytes when the length needs more than one.
func fixLength(m []byte, at int) []byte {
	n := len(m) - at - 1
	size := protowire.SizeVarint(uint64(n))
	if size > 1 {
		for range size - 1 {
			m = append(m, 0)
		}
		copy(m[at+size:], m[at+1:at+1+n])
	}
	protowire.AppendVarint(m[at:at], uint64(n))
	return m
}

func appendTime(m []byte, fSec, fNsec protowire.Number, t time.Time) []byte {
	m = protowire.AppendTag(m, fSec, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(t.Unix()))
	m = protowire.AppendTag(m, fNsec, protowire.Fixed32Type)
	return protowire.AppendFixed32(m, uint32(t.Nanosecond()))
}

// appendQuery appends a query that stands for the client's: the resolver
// hands the observer the reply, not the query, whose buffer it reuses as
// soon as it has answered. The reply's header gives the ID, the opcode
// and the RD and CD bits the client set (a reply echoes them), and its
// question section is the client's question, in the client's case. A
// reply without one (none was sent: the policy dropped the query) gives
// way to the name and type the observer was told. What is lost: the
// client's EDNS options and its AD bit. False when there is no question
// to write.
func appendQuery(dst, reply, name []byte, qtype uint16) ([]byte, bool) {
	if len(reply) >= 12 && binary.BigEndian.Uint16(reply[4:]) == 1 {
		if end := questionEnd(reply); end > 0 {
			dst = append(dst, reply[0], reply[1], reply[2]&0x79, reply[3]&0x10, 0, 1, 0, 0, 0, 0, 0, 0)
			return append(dst, reply[12:end]...), true
		}
	}
	if len(name) == 0 {
		return dst, false
	}
	var id [2]byte
	if len(reply) >= 2 {
		id = [2]byte{reply[0], reply[1]}
	}
	var wire [256]byte
	n, err := dns.PackDomainName(string(name), wire[:], 0, nil, false)
	if err != nil {
		return dst, false
	}
	dst = append(dst, id[0], id[1], 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0) // RD
	dst = append(dst, wire[:n]...)
	dst = binary.BigEndian.AppendUint16(dst, qtype)
	return binary.BigEndian.AppendUint16(dst, dns.ClassINET), true
}

// questionEnd is the offset past msg's first question, 0 when it is not
// whole. The question's name is the message's first: never compressed.
func questionEnd(msg []byte) int {
	i := 12
	for {
		if i >= len(msg) {
			return 0
		}
		l := int(msg[i])
		if l == 0 {
			break
		}
		if l&0xC0 != 0 {
			return 0
		}
		i += 1 + l
	}
	i += 1 + 4 // the root label, type and class
	if i > len(msg) {
		return 0
	}
	return i
}
