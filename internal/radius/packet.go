package radius

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"layeh.com/radius"
	"layeh.com/radius/rfc2865"
	"layeh.com/radius/rfc2866"
	"layeh.com/radius/rfc2869"
	"layeh.com/radius/rfc3162"
	"layeh.com/radius/rfc4818"
	"layeh.com/radius/rfc6911"

	"github.com/svc-pf/svc-pf/internal/session"
)

// Status types (Acct-Status-Type).
const (
	statusStart         = 1
	statusStop          = 2
	statusInterim       = 3
	statusAccountingOn  = 7
	statusAccountingOff = 8
)

// statusLabel is the status_type label of a status type.
func statusLabel(t uint32) string {
	switch t {
	case statusStart:
		return "start"
	case statusStop:
		return "stop"
	case statusInterim:
		return "interim"
	case statusAccountingOn:
		return "accounting_on"
	case statusAccountingOff:
		return "accounting_off"
	}
	return "other"
}

// header is what is known of a datagram before its attributes are read.
type header struct {
	length int // the RADIUS Length field, ≤ len(datagram)
}

var errMalformed = errors.New("malformed packet")

// checkHeader validates the fixed header of an Accounting-Request: the
// code and a Length within the datagram. Bytes past Length are padding
// (RFC 2865) and are ignored.
func checkHeader(b []byte) (header, error) {
	if len(b) < 20 {
		return header{}, errMalformed
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if n < 20 || n > radius.MaxPacketLength || n > len(b) {
		return header{}, errMalformed
	}
	return header{length: n}, nil
}

// order is an event's place in its session's history: Event-Timestamp,
// else Acct-Session-Time, then the status type (Start < Interim < Stop).
type order struct {
	ts, st       uint32
	hasTS, hasST bool
	rank         int
}

func rankOf(status uint32) int {
	switch status {
	case statusStart:
		return 0
	case statusInterim:
		return 1
	}
	return 2
}

// olderThan reports whether o happened before p, by the first of
// Event-Timestamp, Acct-Session-Time both carry that differs, then by
// rank. Events that cannot be told apart are not older: a repeat is
// written again (the IP Mapper writes nothing when nothing changed).
func (o order) olderThan(p order) bool {
	if o.hasTS && p.hasTS && o.ts != p.ts {
		return o.ts < p.ts
	}
	if o.hasST && p.hasST && o.st != p.st {
		return o.st < p.st
	}
	return o.rank < p.rank
}

// event is an authenticated Accounting-Request, decoded.
type event struct {
	status uint32
	nas    string // the NAS identity: its source address
	// id is the session id (Start, Interim, Stop).
	id    string
	order order
	// sess is the session to write (Start, Interim).
	sess session.Session
	// orgGuessed: the packet had no User-Name, so sess.Org is the client
	// entry's for want of a realm; the session's known organisation, if
	// any, replaces it (stateCache.admit).
	orgGuessed bool
}

// decoder maps packets to events under one configuration.
type decoder struct {
	realms map[string]string // lower-case realm → org
	attrs  AttributesConfig
}

func newDecoder(c Config) *decoder {
	d := &decoder{realms: make(map[string]string, len(c.Realms)), attrs: c.Attributes}
	for r, o := range c.Realms {
		d.realms[strings.ToLower(r)] = o
	}
	return d
}

// decode reads the attributes of an authenticated packet from nas
// (source address) with the client entry cl.
func (d *decoder) decode(p *radius.Packet, nas netip.Addr, cl *client) (event, error) {
	st, err := rfc2866.AcctStatusType_Lookup(p)
	if err != nil {
		return event{}, fmt.Errorf("%w: Acct-Status-Type: %v", errMalformed, err)
	}
	ev := event{status: uint32(st), nas: nas.Unmap().String()}
	switch ev.status {
	case statusStart, statusInterim, statusStop:
	default:
		return ev, nil
	}
	sid, err := rfc2866.AcctSessionID_Lookup(p)
	if err != nil || len(sid) == 0 {
		return event{}, fmt.Errorf("%w: Acct-Session-Id is required", errMalformed)
	}
	ev.id = sessionID(ev.nas, sid)
	ev.order.rank = rankOf(ev.status)
	if a, ok := p.Lookup(rfc2869.EventTimestamp_Type); ok && len(a) == 4 {
		ev.order.ts, ev.order.hasTS = binary.BigEndian.Uint32(a), true
	}
	if a, ok := p.Lookup(rfc2866.AcctSessionTime_Type); ok && len(a) == 4 {
		ev.order.st, ev.order.hasST = binary.BigEndian.Uint32(a), true
	}
	if ev.status == statusStop {
		return ev, nil
	}
	s := session.Session{ID: ev.id, Org: cl.org, Producer: session.ProducerRADIUS, OpaqueID: nasOpaqueID(ev.nas)}
	user := d.source(p, d.attrs.Username)
	if d.attrs.Username == SourceUserName {
		if i := strings.LastIndexByte(user, '@'); i >= 0 {
			if org, ok := d.realms[strings.ToLower(user[i+1:])]; ok {
				s.Org = org
				if !d.attrs.KeepRealm {
					user = user[:i]
				}
			}
		}
	} else if u := rfc2865.UserName_GetString(p); u != "" {
		// The realm picks the organisation whatever fills username.
		if i := strings.LastIndexByte(u, '@'); i >= 0 {
			if org, ok := d.realms[strings.ToLower(u[i+1:])]; ok {
				s.Org = org
			}
		}
	}
	s.Username = user
	ev.orgGuessed = len(d.realms) > 0 && !hasAttr(p, rfc2865.UserName_Type)
	if dev := d.source(p, d.attrs.DeviceID); dev != "" {
		s.DeviceID = deviceID(dev)
	}
	s.Location = d.source(p, d.attrs.Location)
	if err := s.Attributes.Validate(); err != nil {
		return event{}, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if s.Allocations, err = allocations(p); err != nil {
		return event{}, err
	}
	ev.sess = s
	return ev, nil
}

// source is the text of the attribute a mapping names ("" when absent).
func (d *decoder) source(p *radius.Packet, src string) string {
	var t radius.Type
	switch src {
	case SourceUserName:
		t = rfc2865.UserName_Type
	case SourceCallingStationID:
		t = rfc2865.CallingStationID_Type
	case SourceCalledStationID:
		t = rfc2865.CalledStationID_Type
	case SourceNASIdentifier:
		t = rfc2865.NASIdentifier_Type
	case SourceNASPortID:
		t = rfc2869.NASPortID_Type
	default:
		return ""
	}
	a, ok := p.Lookup(t)
	if !ok {
		return ""
	}
	return strings.TrimSpace(radius.String(a))
}

// allocations are the addresses the NAS assigned: Framed-IP-Address as a
// /32, Framed-IPv6-Address as a /128, Framed-IPv6-Prefix and
// Delegated-IPv6-Prefix as they are. 0.0.0.0 and 255.255.255.254/255
// ("the NAS or the user chooses") name no address and are skipped.
func allocations(p *radius.Packet) ([]netip.Prefix, error) {
	var out []netip.Prefix
	add := func(pr netip.Prefix) {
		pr = normPrefix(pr)
		for _, q := range out {
			if q == pr {
				return
			}
		}
		out = append(out, pr)
	}
	for _, avp := range p.Attributes {
		switch avp.Type {
		case rfc2865.FramedIPAddress_Type:
			if len(avp.Attribute) != 4 {
				return nil, fmt.Errorf("%w: Framed-IP-Address is %d bytes", errMalformed, len(avp.Attribute))
			}
			a := netip.AddrFrom4([4]byte(avp.Attribute))
			if a.IsUnspecified() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || a == netip.AddrFrom4([4]byte{255, 255, 255, 254}) {
				continue
			}
			add(netip.PrefixFrom(a, 32))
		case rfc6911.FramedIPv6Address_Type:
			ip, err := radius.IPv6Addr(avp.Attribute)
			if err != nil {
				return nil, fmt.Errorf("%w: Framed-IPv6-Address: %v", errMalformed, err)
			}
			a, _ := netip.AddrFromSlice(ip)
			if a.IsUnspecified() {
				continue
			}
			add(netip.PrefixFrom(a, 128))
		case rfc3162.FramedIPv6Prefix_Type, rfc4818.DelegatedIPv6Prefix_Type:
			pr, err := ipv6Prefix(avp.Attribute)
			if err != nil {
				return nil, fmt.Errorf("%w: IPv6 prefix attribute %d: %v", errMalformed, avp.Type, err)
			}
			add(pr)
		}
	}
	return out, nil
}

// ipv6Prefix decodes the RFC 3162 prefix format (reserved, length,
// prefix bytes), shared by Framed-IPv6-Prefix and Delegated-IPv6-Prefix.
// Host bits are masked, as a NAS may send the full address.
func ipv6Prefix(b []byte) (netip.Prefix, error) {
	if len(b) < 2 || len(b) > 18 {
		return netip.Prefix{}, errors.New("wrong length")
	}
	bits := int(b[1])
	if bits > 128 || len(b)-2 > 16 {
		return netip.Prefix{}, errors.New("prefix length above 128")
	}
	if (bits+7)/8 > len(b)-2 {
		return netip.Prefix{}, errors.New("prefix shorter than its length")
	}
	var a [16]byte
	copy(a[:], b[2:])
	addr := netip.AddrFrom16(a)
	if addr.Is4In6() {
		return netip.Prefix{}, errors.New("IPv4-mapped prefix")
	}
	return netip.PrefixFrom(addr, bits).Masked(), nil
}

// sessionID is the session id of a NAS's accounting session: the first
// 32 hex digits of SHA-256 over the NAS identity and Acct-Session-Id,
// length-prefixed so that no two pairs hash the same input. "radius" in
// front keeps it apart from any other producer's ids.
func sessionID(nas string, acctSessionID []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "radius;%d:%s;%d:", len(nas), nas, len(acctSessionID))
	h.Write(acctSessionID)
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

// nasOpaqueID is the opaque_id of every session of a NAS: what
// Accounting-On/Off selects the NAS's sessions by.
func nasOpaqueID(nas string) string { return "radius-nas:" + nas }

// deviceID classifies a Calling-Station-Id: a MAC address becomes
// mac:aa:bb:cc:dd:ee:ff, a phone number msisdn:<digits>, anything else
// csid:<value>.
func deviceID(v string) string {
	if m, ok := normalMAC(v); ok {
		return "mac:" + m
	}
	if d, ok := msisdnDigits(v); ok {
		return "msisdn:" + d
	}
	return "csid:" + v
}

// normalMAC accepts the usual spellings of a 48-bit MAC address:
// aa:bb:cc:dd:ee:ff, aa-bb-cc-dd-ee-ff, aabb.ccdd.eeff, and 12 bare hex
// digits when at least one is a letter (12 decimal digits are read as a
// phone number).
func normalMAC(v string) (string, bool) {
	var hexd []byte
	letters := false
	seps := 0
	var sep byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
			hexd = append(hexd, c)
		case c >= 'a' && c <= 'f':
			hexd = append(hexd, c)
			letters = true
		case c >= 'A' && c <= 'F':
			hexd = append(hexd, c+'a'-'A')
			letters = true
		case c == ':' || c == '-' || c == '.':
			if seps > 0 && c != sep {
				return "", false
			}
			sep = c
			seps++
		default:
			return "", false
		}
	}
	if len(hexd) != 12 {
		return "", false
	}
	switch {
	case seps == 0 && !letters:
		return "", false
	case seps == 0:
	case seps == 5 && (sep == ':' || sep == '-'):
		for i := 2; i < len(v); i += 3 {
			if v[i] != sep {
				return "", false
			}
		}
	case seps == 2 && sep == '.':
		if v[4] != '.' || v[9] != '.' {
			return "", false
		}
	default:
		return "", false
	}
	var b strings.Builder
	for i := 0; i < 12; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.Write(hexd[i : i+2])
	}
	return b.String(), true
}

// msisdnDigits accepts a phone number: an optional leading '+', then 5 to
// 15 digits (E.164's maximum) with spaces, '-', '.', '(' and ')' between
// them, which are dropped.
func msisdnDigits(v string) (string, bool) {
	v = strings.TrimPrefix(v, "+")
	var d []byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
			d = append(d, c)
		case c == ' ' || c == '-' || c == '.' || c == '(' || c == ')':
		default:
			return "", false
		}
	}
	if len(d) < 5 || len(d) > 15 {
		return "", false
	}
	return string(d), true
}

func hasAttr(p *radius.Packet, t radius.Type) bool {
	_, ok := p.Lookup(t)
	return ok
}
