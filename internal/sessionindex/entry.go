package sessionindex

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"time"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

// entry is the compact form of one session: 128 bytes with no pointers,
// so that a chunk of them is allocated noscan and the garbage collector
// marks it without reading it (a forced cycle with a million sessions: 38
// → 8 ms of GC CPU, docs/subscriber-index.md). The id, username and device
// id are inline (the resolver's hot path reads them with the entry, without
// another cache miss); the trace and opaque ids, when present, are one
// record in the bytes beside the entry's chunk (chunkSide.rest), and when
// the three do not fit inline, all five strings are. Org and location are
// ids in the index's intern table (a million sessions share a few
// thousand names), times are Unix nanoseconds, and the first allocation is
// stored as its routing key; the allocations after it (a dual-stack
// subscriber's) follow the strings in the record, allocLen bytes each.
// Whatever does not fit that shape (a time that is not a plain UTC
// instant, an unusual first allocation, long strings, hundreds of
// allocations) goes to an extra record beside the chunk (chunkSide.ext),
// which has pointers; the usual session has none. The encoding is
// lossless: Entry.Session returns a session equal (reflect.DeepEqual) to
// the one stored.
//
// Entries live in the chunks of a slots array and are never modified once
// a snapshot that can see them is published, nor are the bytes of their
// records; that is what makes the strings viewed in buf and in the records
// (unsafe.String) immutable, as Go strings must be. The fields the
// resolver reads come first.
type entry struct {
	org   uint32   // intern id; 0 only in a free slot
	loc   uint32   // intern id; 0 when the session has no location
	ends  [3]uint8 // ends of id, username, deviceid in buf
	pfx   uint8    // pfxNone, pfxUnroutable, or the routing key's code
	flag  uint8
	more  uint8           // allocations after the first in the record, after its strings
	trace uint16          // end of trace_id in the record
	buf   [inlineLen]byte // id | username | deviceid; with flagRestAll, the four ends in the record
	rev   int64           // Revision; in a free slot, the next free slot + 1
	upd   int64           // UpdatedAt in Unix ns, unless flagUpdZero or flagUpdExt
	exp   int64           // ExpiresAt in Unix ns, if flagExp and not flagExpExt
	hi    uint64          // the first allocation's routing key (pkey.hi, lo; pfx)
	lo    uint64
	rest  uint32 // offset of the record in chunkSide.rest
	ext   uint8  // chunkSide.ext index + 1; 0 for none (a side holds at most maxSideExt)
	prod  uint8  // producer code: 0 for "", prodExt for ext.producer, else names.prods
	rlen  uint16 // length of the record: trace_id | opaque_id, or with flagRestAll all five strings; then more allocations
}

// The producer costs no byte: entry.ext indexes a chunk side's extra
// records, of which there are at most maxSideExt (a chunk has 64 entries;
// slots.go's compact sizes the list), so its high byte was always zero and
// is the producer's code now. Producers are services, not data: a handful
// per index. The index's table of them (names.prods, append-only like the
// intern table) gives codes 1 to prodExt-1; the empty producer (the
// orgmanager's sessions, the common case) is code 0, and a producer past
// the table's 254 codes goes, whole, to the extra record (code prodExt),
// so that the encoding stays lossless whatever is stored.
const (
	prodExt    = 0xff
	maxSideExt = chunkLen + 2
)

// inlineLen makes an entry 128 bytes (a chunk of 64 is 8 KiB, one size
// class): a 32-character session id and 32 characters of username and
// device id fit.
const inlineLen = 64

// extra holds what the entry and its record cannot. It is never changed
// once made, so chunk sides copied for a new edit share it.
type extra struct {
	first  netip.Prefix   // flagFirstExt: the first allocation as given
	allocs []netip.Prefix // allocations after the first, as given, when not in the record
	upd    time.Time      // flagUpdExt
	exp    time.Time      // flagExpExt
	strs   [5]string      // flagBigStr: id, username, deviceid, trace_id, opaque_id
	prod   string         // the producer when entry.prod is prodExt
}

const (
	flagAllocsNil = 1 << iota // Allocations was nil (not just empty)
	flagUpdZero               // UpdatedAt is the zero time.Time
	flagUpdExt                // UpdatedAt is in ext
	flagExp                   // ExpiresAt is set
	flagExpExt                // ExpiresAt is in ext
	flagRestAll               // all five strings are in the record, their ends in buf
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

// outOfLine is what makeEntry leaves for the chunk's side: the strings of
// the entry's record, in order, the allocations that follow them, and its
// extra record.
type outOfLine struct {
	strs   [5]string
	n      int            // strings in strs
	allocs []netip.Prefix // the caller's: read, never kept
	x      *extra
}

// more is the allocations after the first.
func (o *outOfLine) more() []netip.Prefix {
	if o.x != nil && o.x.allocs != nil {
		return o.x.allocs
	}
	return o.allocs
}

// allocLen is the size of an allocation in a record: its family (0 for
// the zero Addr, 4 or 6), its length + 1 (0 when invalid) and its address
// as 16 bytes. That is all a netip.Prefix holds: a prefix has no zone, and
// netip.PrefixFrom rebuilds the same value.
const allocLen = 18

func appendPrefix(b []byte, p netip.Prefix) []byte {
	a := p.Addr()
	fam := byte(0)
	switch {
	case a.Is4():
		fam = 4
	case a.Is6():
		fam = 6
	}
	a16 := a.As16()
	b = append(b, fam, byte(p.Bits()+1))
	return append(b, a16[:]...)
}

func decodePrefix(b []byte) netip.Prefix {
	var a netip.Addr
	switch b[0] {
	case 4:
		a = netip.AddrFrom4([4]byte(b[14:18]))
	case 6:
		a = netip.AddrFrom16([16]byte(b[2:18]))
	}
	return netip.PrefixFrom(a, int(b[1])-1)
}

// makeEntry encodes s; intern gives the ids of its org and location,
// producer the code of its producer (prodExt when the table is full). The
// entry's rest and ext are set when out is stored (mutation.store).
func makeEntry(s *session.Session, intern func(string) uint32, producer func(string) uint8) (entry, outOfLine) {
	var out outOfLine
	e := entry{org: intern(s.Org), rev: s.Revision}
	if s.Location != "" {
		e.loc = intern(s.Location)
	}
	if s.Producer != "" {
		if e.prod = producer(s.Producer); e.prod == prodExt {
			out.ensureExt().prod = s.Producer
		}
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
			out.strs[0], out.strs[1], out.n = s.TraceID, s.OpaqueID, 2
			e.trace, e.rlen = uint16(len(s.TraceID)), uint16(all-inline)
		}
	case all <= 0xffff:
		out.strs, out.n = strs, 5
		n := 0
		for i, str := range strs[:4] {
			n += len(str)
			binary.LittleEndian.PutUint16(e.buf[2*i:], uint16(n))
		}
		e.rlen = uint16(all)
		e.flag |= flagRestAll
	default:
		out.ensureExt().strs = strs
		e.flag |= flagBigStr
	}
	switch {
	case s.UpdatedAt == time.Time{}:
		e.flag |= flagUpdZero
	default:
		if ns, ok := compactTime(s.UpdatedAt); ok {
			e.upd = ns
		} else {
			out.ensureExt().upd = s.UpdatedAt
			e.flag |= flagUpdExt
		}
	}
	if s.ExpiresAt != nil {
		e.flag |= flagExp
		if ns, ok := compactTime(*s.ExpiresAt); ok {
			e.exp = ns
		} else {
			out.ensureExt().exp = *s.ExpiresAt
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
				out.ensureExt().first = first
				e.flag |= flagFirstExt
			}
		} else {
			e.pfx = pfxUnroutable
			out.ensureExt().first = first
			e.flag |= flagFirstExt
		}
		if more := s.Allocations[1:]; len(more) > 0xff || int(e.rlen)+len(more)*allocLen > 0xffff {
			out.ensureExt().allocs = append([]netip.Prefix(nil), more...)
		} else if len(more) > 0 {
			out.allocs, e.more = more, uint8(len(more))
			e.rlen += uint16(len(more) * allocLen)
		}
	}
	return e, out
}

func (o *outOfLine) ensureExt() *extra {
	if o.x == nil {
		o.x = new(extra)
	}
	return o.x
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

// keys appends the distinct routing keys of the valid allocations of e,
// the first and more.
func keys(dst []pkey, e *entry, more []netip.Prefix) []pkey {
	if k, ok := e.firstKey(); ok {
		dst = append(dst, k)
	}
	if len(more) == 0 {
		return dst
	}
	ks := newKeySet(dst)
	for _, p := range more {
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

// Entry is a read-only view of one session in an Index snapshot: the entry
// and what it needs beside it (its chunk's side, the snapshot's intern
// table), three words. Copy it freely; two Entries of one snapshot for one
// session are equal (==). Its accessors do not allocate, except
// Allocations and Session, which build new values. An Entry stays valid and
// unchanged as long as it is referenced, whatever is applied later. The
// zero Entry stands for no session: its accessors return zero values.
//
// The strings it returns (id, username, device id, trace id, opaque id)
// are views into the index's memory: like the Entry, each keeps its chunk
// of 64 entries (8 KiB) or the chunk's out-of-line records alive while it
// is held. Keep them for the time of a query; clone them (strings.Clone) to
// keep them longer, or use Session.
type Entry struct {
	e    *entry
	xs   **chunkSide // the place of the side of e's chunk in its directory (published: never changes)
	n    *names      // the snapshot's intern table
	slot uint32
}

// Slot is the entry's slot number in the index: small and dense (below
// the most sessions the index has held), the same for a session from one
// snapshot to the next while it lives, and reused for another session
// once it is deleted. It lets a consumer keep per-session state in an
// array instead of a table keyed by strings, as long as it tells a reused
// slot from the session it saw (by the strings, or a hash of them). The
// zero Entry's is 0, as is the first session's: the lookup's ok says
// which.
func (v Entry) Slot() uint32 { return v.slot }

// side is the side of e's chunk: read only by the accessors that need it,
// so that the others do not pay for it.
func (v Entry) side() *chunkSide { return *v.xs }

// extra is e's extra record, or nil.
func (v Entry) extra() *extra {
	if v.e.ext == 0 {
		return nil
	}
	return v.side().ext[v.e.ext-1]
}

// strLen is the length of the strings in e's record.
func (e *entry) strLen() int { return int(e.rlen) - int(e.more)*allocLen }

// moreAllocs appends the allocations after the first to dst.
func (v Entry) moreAllocs(dst []netip.Prefix) []netip.Prefix {
	if e := v.e; e.more != 0 {
		rec := v.side().rest[int(e.rest)+e.strLen() : int(e.rest)+int(e.rlen)]
		for i := 0; i < len(rec); i += allocLen {
			dst = append(dst, decodePrefix(rec[i:]))
		}
	}
	if x := v.extra(); x != nil {
		dst = append(dst, x.allocs...)
	}
	return dst
}

// record is e's out-of-line record, bytes lo to hi, viewed as a string.
func (v Entry) record(lo, hi int) string {
	if lo == hi {
		return ""
	}
	return unsafe.String(&v.side().rest[int(v.e.rest)+lo], hi-lo)
}

func (v Entry) strAt(i int) string {
	e := v.e
	switch {
	case e.flag&flagBigStr != 0:
		return v.extra().strs[i]
	case e.flag&flagRestAll != 0:
		lo, hi := 0, e.strLen()
		if i > 0 {
			lo = int(binary.LittleEndian.Uint16(e.buf[2*i-2:]))
		}
		if i < 4 {
			hi = int(binary.LittleEndian.Uint16(e.buf[2*i:]))
		}
		return v.record(lo, hi)
	case i == 3:
		return v.record(0, int(e.trace))
	case i == 4:
		return v.record(int(e.trace), e.strLen())
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

// ID is the session id.
func (v Entry) ID() string {
	if v.e == nil {
		return ""
	}
	return v.strAt(0)
}

// Org is the session's organisation.
func (v Entry) Org() string {
	if v.e == nil {
		return ""
	}
	return v.n.name(v.e.org)
}

// OrgID identifies an organisation within one index lineage: the
// snapshots derived, by Apply, from one Empty() or one Builder. Within a
// lineage, two OrgIDs are equal exactly when the organisations are, in any
// snapshots; OrgIDs from different lineages (an index rebuilt from
// scratch) are never equal. Comparing or hashing one reads no string (a
// per-query cache keyed by organisation, as the resolver's policy memo,
// can outlive many snapshots). The zero OrgID is the zero Entry's.
type OrgID struct {
	lin *lineage
	id  uint32
}

// OrgID is the identity of the session's organisation.
func (v Entry) OrgID() OrgID {
	if v.e == nil {
		return OrgID{}
	}
	return OrgID{v.n.lin, v.e.org}
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
	return v.strAt(1)
}

// DeviceID is the subscriber's device id, or "".
func (v Entry) DeviceID() string {
	if v.e == nil {
		return ""
	}
	return v.strAt(2)
}

// Location is the tiered-filtering location, or "".
func (v Entry) Location() string {
	if v.e == nil {
		return ""
	}
	return v.n.name(v.e.loc) // id 0 names ""
}

// Identity is the subscriber the session names, as Session().Identity()
// would give it, without building the session. Its username and device id
// are views into the index's memory, like those Username and DeviceID
// return.
func (v Entry) Identity() identity.Identity {
	return identity.Identity{Org: v.Org(), Attributes: identity.Attributes{Username: v.Username(), DeviceID: v.DeviceID(), Location: v.Location()}}
}

// Producer names the session's writer: "" for the orgmanager's sessions,
// session.ProducerRADIUS for RADIUS accounting's.
func (v Entry) Producer() string {
	switch {
	case v.e == nil || v.e.prod == 0:
		return ""
	case v.e.prod == prodExt:
		return v.extra().prod
	}
	return v.n.prods[v.e.prod]
}

// TraceID is the observational trace id, or "".
func (v Entry) TraceID() string {
	if v.e == nil {
		return ""
	}
	return v.strAt(3)
}

// OpaqueID is the producer's reference, or "".
func (v Entry) OpaqueID() string {
	if v.e == nil {
		return ""
	}
	return v.strAt(4)
}

// UpdatedAt is when the session last changed.
func (v Entry) UpdatedAt() time.Time {
	e := v.e
	switch {
	case e == nil || e.flag&flagUpdZero != 0:
		return time.Time{}
	case e.flag&flagUpdExt != 0:
		return v.extra().upd
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
		return v.extra().exp, true
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
	x := v.extra()
	n := 1 + int(e.more)
	if x != nil {
		n += len(x.allocs)
	}
	out := make([]netip.Prefix, 1, n)
	if e.flag&flagFirstExt != 0 {
		out[0] = x.first
	} else {
		k, _ := e.firstKey()
		out[0] = k.prefix()
	}
	return v.moreAllocs(out)
}

// Session returns a new session equal to the one stored
// (reflect.DeepEqual), or nil for the zero Entry. It is the caller's: its
// strings are copies or immutable strings shared with the index, and it
// keeps none of the index's entry arrays or records alive.
func (v Entry) Session() *session.Session {
	e := v.e
	if e == nil {
		return nil
	}
	var strs [5]string
	switch {
	case e.flag&flagBigStr != 0:
		strs = v.extra().strs // strings of their own, shared with the index
	case e.flag&flagRestAll != 0:
		// One allocation for the five strings.
		all := strings.Clone(v.record(0, e.strLen()))
		lo := 0
		for i := range strs {
			hi := len(all)
			if i < 4 {
				hi = int(binary.LittleEndian.Uint16(e.buf[2*i:]))
			}
			strs[i], lo = all[lo:hi], hi
		}
	default:
		// One allocation for the three inline strings, one for the record.
		all := string(e.buf[:e.ends[2]])
		strs[0], strs[1], strs[2] = all[:e.ends[0]], all[e.ends[0]:e.ends[1]], all[e.ends[1]:]
		rec := strings.Clone(v.record(0, e.strLen()))
		strs[3], strs[4] = rec[:e.trace], rec[e.trace:]
	}
	s := &session.Session{
		ID:          strs[0],
		Org:         v.Org(),
		Revision:    e.rev,
		Allocations: v.Allocations(),
		Attributes:  identity.Attributes{Username: strs[1], DeviceID: strs[2], Location: v.Location()},

		TraceID:   strs[3],
		OpaqueID:  strs[4],
		Producer:  v.Producer(),
		UpdatedAt: v.UpdatedAt(),
	}
	if t, ok := v.ExpiresAt(); ok {
		s.ExpiresAt = &t
	}
	return s
}
