package sessionindex

import (
	"encoding/binary"
	"net/netip"
	"time"
	"unique"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

// entry is the compact form of one session: 152 bytes, with the id,
// username and device id inline (the resolver's hot path reads them with the
// entry, without another cache miss) and the trace and opaque ids, when
// present, in one more string. When the three do not fit inline, all five
// strings go to that string. Org and location are interned (a million
// sessions share a few thousand), times are Unix nanoseconds, and the
// first allocation is stored as its routing key. Whatever does not fit that
// shape (more allocations, a time that is not a plain UTC instant, long
// strings) goes to ext, which is nil for the usual session. The encoding is
// lossless: Entry.Session returns a session equal (reflect.DeepEqual) to
// the one stored.
//
// Entries live in the chunks of a slots array and are never modified once
// a snapshot that can see them is published; that is what makes the
// strings viewed in buf (unsafe.String) immutable, as Go strings must be.
// The fields the resolver reads come first.
type entry struct {
	org   unique.Handle[string] // zero only in a free slot
	loc   unique.Handle[string] // zero when the session has no location
	ends  [3]uint8              // ends of id, username, deviceid in buf
	pfx   uint8                 // pfxNone, pfxUnroutable, or the routing key's code
	flag  uint8
	trace uint16          // end of trace_id in rest
	buf   [inlineLen]byte // id | username | deviceid; with flagRestAll, the four ends in rest
	rest  string          // trace_id | opaque_id; with flagRestAll, all five strings
	ext   *extra
	rev   int64  // Revision; in a free slot, the next free slot + 1
	upd   int64  // UpdatedAt in Unix ns, unless flagUpdZero or flagUpdExt
	exp   int64  // ExpiresAt in Unix ns, if flagExp and not flagExpExt
	hi    uint64 // the first allocation's routing key (pkey.hi, lo; pfx)
	lo    uint64
}

// inlineLen makes an entry 152 bytes (a chunk of 64 fills a size class):
// a 32-character session id and 32 characters of username and device id
// fit.
const inlineLen = 64

// extra holds what the inline fields cannot.
type extra struct {
	first  netip.Prefix   // flagFirstExt: the first allocation as given
	allocs []netip.Prefix // allocations after the first, as given
	upd    time.Time      // flagUpdExt
	exp    time.Time      // flagExpExt
	strs   [5]string      // flagBigStr: id, username, deviceid, trace_id, opaque_id
}

const (
	flagAllocsNil = 1 << iota // Allocations was nil (not just empty)
	flagUpdZero               // UpdatedAt is the zero time.Time
	flagUpdExt                // UpdatedAt is in ext
	flagExp                   // ExpiresAt is set
	flagExpExt                // ExpiresAt is in ext
	flagRestAll               // all five strings are in rest, their ends in buf
	flagBigStr                // the strings are in ext.strs (over 64 KiB)
	// flagFirstExt: the first allocation is not the canonical form of its
	// routing key (host bits set, IPv4-mapped, invalid): ext.first has it.
	flagFirstExt
)

// entry.pfx, beside routing key codes.
const (
	pfxNone       = 0 // no allocations
	pfxUnroutable = 1 // the first allocation is invalid (ext.first)
)

func makeEntry(s *session.Session) entry {
	e := entry{org: unique.Make(s.Org), rev: s.Revision}
	if s.Location != "" {
		e.loc = unique.Make(s.Location)
	}
	strs := [5]string{s.ID, s.Username, s.DeviceID, s.TraceID, s.OpaqueID}
	inline := len(s.ID) + len(s.Username) + len(s.DeviceID)
	all := inline + len(s.TraceID) + len(s.OpaqueID)
	switch {
	case inline <= inlineLen && all-inline <= 0xffff:
		n := 0
		for i, str := range strs[:3] {
			n += copy(e.buf[n:], str)
			e.ends[i] = uint8(n)
		}
		if s.TraceID != "" || s.OpaqueID != "" {
			e.rest, e.trace = s.TraceID+s.OpaqueID, uint16(len(s.TraceID))
		}
	case all <= 0xffff:
		e.rest = s.ID + s.Username + s.DeviceID + s.TraceID + s.OpaqueID
		n := 0
		for i, str := range strs[:4] {
			n += len(str)
			binary.LittleEndian.PutUint16(e.buf[2*i:], uint16(n))
		}
		e.flag |= flagRestAll
	default:
		e.ensureExt().strs = strs
		e.flag |= flagBigStr
	}
	switch {
	case s.UpdatedAt == time.Time{}:
		e.flag |= flagUpdZero
	default:
		if ns, ok := compactTime(s.UpdatedAt); ok {
			e.upd = ns
		} else {
			e.ensureExt().upd = s.UpdatedAt
			e.flag |= flagUpdExt
		}
	}
	if s.ExpiresAt != nil {
		e.flag |= flagExp
		if ns, ok := compactTime(*s.ExpiresAt); ok {
			e.exp = ns
		} else {
			e.ensureExt().exp = *s.ExpiresAt
			e.flag |= flagExpExt
		}
	}
	switch {
	case s.Allocations == nil:
		e.flag |= flagAllocsNil
	case len(s.Allocations) > 0:
		first := s.Allocations[0]
		if k, ok := normKey(first); ok {
			e.hi, e.lo, e.pfx = k.hi, k.lo, k.code
			if k.prefix() != first {
				e.ensureExt().first = first
				e.flag |= flagFirstExt
			}
		} else {
			e.pfx = pfxUnroutable
			e.ensureExt().first = first
			e.flag |= flagFirstExt
		}
		if len(s.Allocations) > 1 {
			e.ensureExt().allocs = append([]netip.Prefix(nil), s.Allocations[1:]...)
		}
	}
	return e
}

func (e *entry) ensureExt() *extra {
	if e.ext == nil {
		e.ext = new(extra)
	}
	return e.ext
}

// compactTime returns t as Unix nanoseconds when that loses nothing: t is a
// UTC time without a monotonic reading, within the int64 nanosecond range,
// which is what a JSON-decoded "…Z" time and Time.UTC() produce.
func compactTime(t time.Time) (int64, bool) {
	ns := t.UnixNano()
	return ns, time.Unix(0, ns).UTC() == t
}

// pkey is an allocation as the routing table sees it: masked, and an
// IPv4-mapped IPv6 prefix of /96 or longer turned into the IPv4 prefix it
// maps. An IPv4 address is in lo. code says the family and the length.
type pkey struct {
	hi, lo uint64
	code   uint8
}

// Routing key codes: keyV4+bits for IPv4 (2..34), keyV6+bits for IPv6
// (35..163).
const (
	keyV4 = 2
	keyV6 = keyV4 + 33
)

func (k pkey) v6() bool { return k.code >= keyV6 }
func (k pkey) bits() int {
	if k.v6() {
		return int(k.code) - keyV6
	}
	return int(k.code) - keyV4
}

// normKey returns the routing key of p, or false for an invalid prefix.
func normKey(p netip.Prefix) (pkey, bool) {
	if !p.IsValid() {
		return pkey{}, false
	}
	a, bits := p.Addr(), p.Bits()
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	if a.Is4() {
		b := a.As4()
		return pkey{lo: uint64(binary.BigEndian.Uint32(b[:])) & mask4(bits), code: uint8(keyV4 + bits)}, true
	}
	b := a.As16()
	mh, ml := mask6(bits)
	return pkey{hi: binary.BigEndian.Uint64(b[:8]) & mh, lo: binary.BigEndian.Uint64(b[8:]) & ml, code: uint8(keyV6 + bits)}, true
}

// prefix is the canonical prefix of k.
func (k pkey) prefix() netip.Prefix {
	if !k.v6() {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(k.lo))
		return netip.PrefixFrom(netip.AddrFrom4(b), k.bits())
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.PrefixFrom(netip.AddrFrom16(b), k.bits())
}

func mask4(bits int) uint64 { return uint64(^uint32(0)) << (32 - bits) & 0xffffffff }

func mask6(bits int) (hi, lo uint64) {
	switch {
	case bits >= 128:
		return ^uint64(0), ^uint64(0)
	case bits > 64:
		return ^uint64(0), ^uint64(0) << (128 - bits)
	case bits == 0:
		return 0, 0
	}
	return ^uint64(0) << (64 - bits), 0
}

// firstKey is the routing key of the inline allocation.
func (e *entry) firstKey() (pkey, bool) {
	return pkey{hi: e.hi, lo: e.lo, code: e.pfx}, e.pfx >= keyV4
}

// keys appends the distinct routing keys of e's valid allocations.
func (e *entry) keys(dst []pkey) []pkey {
	if k, ok := e.firstKey(); ok {
		dst = append(dst, k)
	}
	if e.ext == nil {
		return dst
	}
	ks := newKeySet(dst)
	for _, p := range e.ext.allocs {
		if k, ok := normKey(p); ok && !ks.has(k) {
			dst = append(dst, k)
			ks.add(dst, k)
		}
	}
	return dst
}

// keySet answers membership in a slice of keys: a scan while it is short, a
// map once it is long, so a session with thousands of allocations costs
// O(n), not O(n²).
type keySet struct {
	list []pkey
	m    map[pkey]struct{}
}

const keySetScan = 16

func newKeySet(ks []pkey) *keySet {
	s := &keySet{list: ks}
	if len(ks) > keySetScan {
		s.m = make(map[pkey]struct{}, len(ks))
		for _, k := range ks {
			s.m[k] = struct{}{}
		}
	}
	return s
}

func (s *keySet) has(k pkey) bool {
	if s.m != nil {
		_, ok := s.m[k]
		return ok
	}
	return containsKey(s.list, k)
}

// add records k, which was just appended to list (now the slice given).
func (s *keySet) add(list []pkey, k pkey) {
	s.list = list
	switch {
	case s.m != nil:
		s.m[k] = struct{}{}
	case len(list) > keySetScan:
		s.m = make(map[pkey]struct{}, 2*len(list))
		for _, x := range list {
			s.m[x] = struct{}{}
		}
	}
}

func containsKey(ks []pkey, k pkey) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func (e *entry) strAt(i int) string {
	switch {
	case e.flag&flagBigStr != 0:
		return e.ext.strs[i]
	case e.flag&flagRestAll != 0:
		lo, hi := 0, len(e.rest)
		if i > 0 {
			lo = int(binary.LittleEndian.Uint16(e.buf[2*i-2:]))
		}
		if i < 4 {
			hi = int(binary.LittleEndian.Uint16(e.buf[2*i:]))
		}
		return e.rest[lo:hi]
	case i == 3:
		return e.rest[:e.trace]
	case i == 4:
		return e.rest[e.trace:]
	}
	lo, hi := 0, int(e.ends[i])
	if i > 0 {
		lo = int(e.ends[i-1])
	}
	if lo == hi {
		return ""
	}
	return unsafe.String(&e.buf[lo], hi-lo)
}

func (e *entry) id() string       { return e.strAt(0) }
func (e *entry) username() string { return e.strAt(1) }
func (e *entry) deviceID() string { return e.strAt(2) }
func (e *entry) orgName() string  { return e.org.Value() }

// Entry is a read-only view of one session in an Index snapshot. It is a
// pointer-sized value: copy it freely. Its accessors do not allocate, except
// Allocations and Session, which build new values. An Entry stays valid and
// unchanged as long as it is referenced, whatever is applied later. The
// zero Entry stands for no session: its accessors return zero values.
//
// The id, username and device id returned are views into the index's
// memory: like the Entry, each keeps its chunk of 64 entries (9.5 KiB) alive
// while it is held. Keep them for the time of a query; clone them
// (strings.Clone) to keep them longer, or use Session.
type Entry struct{ e *entry }

// ID is the session id.
func (v Entry) ID() string {
	if v.e == nil {
		return ""
	}
	return v.e.id()
}

// Org is the session's organisation.
func (v Entry) Org() string {
	if v.e == nil {
		return ""
	}
	return v.e.org.Value()
}

// OrgHandle is Org interned: equal handles are equal organisations, and
// comparing or hashing one reads a pointer, not the name (a per-query
// cache keyed by organisation, as the resolver's policy memo). The zero
// Entry's is the zero handle.
func (v Entry) OrgHandle() unique.Handle[string] {
	if v.e == nil {
		return unique.Handle[string]{}
	}
	return v.e.org
}

// Revision is the producer's deploy revision.
func (v Entry) Revision() int64 {
	if v.e == nil {
		return 0
	}
	return v.e.rev
}

// Username is the subscriber's username, or "".
func (v Entry) Username() string {
	if v.e == nil {
		return ""
	}
	return v.e.username()
}

// DeviceID is the subscriber's device id, or "".
func (v Entry) DeviceID() string {
	if v.e == nil {
		return ""
	}
	return v.e.deviceID()
}

// Location is the tiered-filtering location, or "".
func (v Entry) Location() string {
	if v.e == nil || v.e.loc == (unique.Handle[string]{}) {
		return ""
	}
	return v.e.loc.Value()
}

// Identity is the subscriber the session names, as Session().Identity()
// would give it, without building the session. Its username and device id
// are views into the index's memory, like those Username and DeviceID
// return.
func (v Entry) Identity() identity.Identity {
	return identity.Identity{Org: v.Org(), Attributes: identity.Attributes{Username: v.Username(), DeviceID: v.DeviceID(), Location: v.Location()}}
}

// TraceID is the observational trace id, or "".
func (v Entry) TraceID() string {
	if v.e == nil {
		return ""
	}
	return v.e.strAt(3)
}

// OpaqueID is the producer's reference, or "".
func (v Entry) OpaqueID() string {
	if v.e == nil {
		return ""
	}
	return v.e.strAt(4)
}

// UpdatedAt is when the session last changed.
func (v Entry) UpdatedAt() time.Time {
	e := v.e
	switch {
	case e == nil || e.flag&flagUpdZero != 0:
		return time.Time{}
	case e.flag&flagUpdExt != 0:
		return e.ext.upd
	}
	return time.Unix(0, e.upd).UTC()
}

// ExpiresAt is when the session expires; ok is false when it does not.
func (v Entry) ExpiresAt() (t time.Time, ok bool) {
	e := v.e
	switch {
	case e == nil || e.flag&flagExp == 0:
		return time.Time{}, false
	case e.flag&flagExpExt != 0:
		return e.ext.exp, true
	}
	return time.Unix(0, e.exp).UTC(), true
}

// Allocations returns a new slice of the session's allocations, exactly as
// stored (nil if they were nil).
func (v Entry) Allocations() []netip.Prefix {
	e := v.e
	if e == nil || e.flag&flagAllocsNil != 0 {
		return nil
	}
	if e.pfx == pfxNone {
		return []netip.Prefix{}
	}
	n := 1
	if e.ext != nil {
		n += len(e.ext.allocs)
	}
	out := make([]netip.Prefix, 1, n)
	if e.flag&flagFirstExt != 0 {
		out[0] = e.ext.first
	} else {
		k, _ := e.firstKey()
		out[0] = k.prefix()
	}
	if e.ext != nil {
		out = append(out, e.ext.allocs...)
	}
	return out
}

// Session returns a new session equal to the one stored
// (reflect.DeepEqual), or nil for the zero Entry. It is the caller's: its
// strings are copies or immutable strings shared with the index, and it
// keeps none of the index's entry arrays alive.
func (v Entry) Session() *session.Session {
	if v.e == nil {
		return nil
	}
	id, user, dev := v.ID(), v.Username(), v.DeviceID()
	if e := v.e; e.flag&(flagBigStr|flagRestAll) == 0 {
		// One allocation for the three inline strings.
		all := string(e.buf[:e.ends[2]])
		id, user, dev = all[:e.ends[0]], all[e.ends[0]:e.ends[1]], all[e.ends[1]:]
	}
	s := &session.Session{
		ID:          id,
		Org:         v.Org(),
		Revision:    v.e.rev,
		Allocations: v.Allocations(),
		Attributes:  identity.Attributes{Username: user, DeviceID: dev, Location: v.Location()},

		TraceID:   v.TraceID(),
		OpaqueID:  v.OpaqueID(),
		UpdatedAt: v.UpdatedAt(),
	}
	if t, ok := v.ExpiresAt(); ok {
		s.ExpiresAt = &t
	}
	return s
}
