package sessionindex

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

func roundTripCases() []*session.Session {
	utc := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	exp := utc.Add(time.Hour)
	ptr := func(t time.Time) *time.Time { return &t }
	pfx := netip.MustParsePrefix
	full := &session.Session{
		ID: "0123456789abcdef0123456789abcdef", Org: "acme", Revision: 42,
		Allocations: []netip.Prefix{pfx("10.0.0.0/24"), pfx("2001:db8::/64")},
		Attributes:  identity.Attributes{Username: "alice", DeviceID: "mac:aa", Location: "hq"}, TraceID: "trace-1", OpaqueID: "ref-9",
		Producer: session.ProducerRADIUS, UpdatedAt: utc, ExpiresAt: &exp,
	}
	many := make([]netip.Prefix, 40) // 20 distinct, each twice
	for i := range many {
		many[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 9, byte(i % 20), 0}), 24)
	}
	long := strings.Repeat("x", 70_000)
	hundreds := make([]netip.Prefix, 300) // more than a record holds
	for i := range hundreds {
		hundreds[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 8, byte(i >> 8), byte(i)}), 32)
	}
	return []*session.Session{
		full,
		{ID: "bare", Org: "o"}, // nil allocations, zero time, no expiry
		{ID: "empty-allocs", Org: "o", Allocations: []netip.Prefix{}},
		{ID: "", Org: "", Revision: -1},
		{ID: "odd-prefixes", Org: "o", Allocations: []netip.Prefix{
			{}, // the zero prefix
			netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 99),      // invalid length
			netip.PrefixFrom(netip.MustParseAddr("2001:db8::1"), -1),   // invalid length
			pfx("::ffff:192.0.2.0/120"),                                // IPv4-mapped, kept as given
			netip.PrefixFrom(netip.MustParseAddr("198.51.100.77"), 24), // host bits
			pfx("0.0.0.0/0"), pfx("::/0"), pfx("2001:db8::1/128"), pfx("192.0.2.1/32"),
		}},
		{ID: "odd-first", Org: "o", Allocations: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("::ffff:1.2.3.4"), 128)}},
		{ID: "invalid-first", Org: "o", Allocations: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 40)}},
		{ID: "many", Org: "o", Allocations: many},
		{ID: "zoned-time", Org: "o", UpdatedAt: utc.In(time.FixedZone("CEST", 7200)), ExpiresAt: ptr(utc.In(time.FixedZone("", -3600)))},
		{ID: "local-time", Org: "o", UpdatedAt: utc.Local(), ExpiresAt: ptr(time.Time{})},
		{ID: "monotonic", Org: "o", UpdatedAt: time.Now(), ExpiresAt: ptr(time.Now().Add(time.Minute))},
		{ID: "far", Org: "o", UpdatedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), ExpiresAt: ptr(time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC))},
		{ID: "epoch", Org: "o", UpdatedAt: time.Unix(0, 0).UTC(), ExpiresAt: ptr(time.Unix(0, -1).UTC())},
		{ID: "long", Org: "o", Attributes: identity.Attributes{Username: long, DeviceID: "d"}, TraceID: "t", OpaqueID: long[:100]},
		{ID: "0123456789abcdef0123456789abcdec", Org: "o", Attributes: identity.Attributes{Username: "alice@customers.example-isp.net", DeviceID: "aa:bb:cc:dd:ee:ff"}}, // not inline
		{ID: "0123456789abcdef0123456789abcdee", Org: "o", Attributes: identity.Attributes{Username: "carol@customers.example-isp.net", DeviceID: "aa:bb:cc:dd:ee:ff"}, TraceID: "t", OpaqueID: "o"},
		{ID: "0123456789abcdef0123456789abcded", Org: "o", Attributes: identity.Attributes{Username: "bob", DeviceID: strings.Repeat("d", 29)}}, // exactly inline
		{ID: "x", Org: "o", TraceID: long[:0xffff]},                // rest at its limit
		{ID: "y", Org: "o", TraceID: long[:0xffff], OpaqueID: "o"}, // over it
		{ID: "hundreds", Org: "o", Allocations: hundreds, TraceID: "t"},
		{ID: "strings-and-allocations-over-the-limit", Org: "o", TraceID: long[:0xffff-20], Allocations: []netip.Prefix{pfx("10.7.0.0/16"), pfx("10.8.0.0/16"), pfx("2001:db8:7::/48")}},
		{ID: "radius-v4", Org: "o", Allocations: []netip.Prefix{pfx("100.64.0.1/32")}, Attributes: identity.Attributes{Username: "u1", DeviceID: "msisdn:447900000001"}, Producer: session.ProducerRADIUS},
		{ID: "radius-v6", Org: "o", Allocations: []netip.Prefix{pfx("2001:db8:1:2::/64")}, Producer: "radius"},
		{ID: "other-producer", Org: "o", Producer: "lab-sync"},
		{ID: "odd-producer", Org: "o", Producer: "Not\x00Valid/but stored " + long[:300]}, // the index does not validate
		{ID: "unicode-ünï", Org: "örg", Attributes: identity.Attributes{Username: "ü", DeviceID: "\x00\xff", Location: "📍"}, TraceID: "\u200b", OpaqueID: "\t"},
	}
}

// TestRoundTrip checks that every field comes back exactly as stored, through
// Apply and through a Builder, by Get and by every other lookup, and that
// the index keeps no reference to the sessions it was given.
func TestRoundTrip(t *testing.T) {
	in := roundTripCases()
	b := NewBuilder(len(in))
	for _, s := range in {
		b.Put(s)
	}
	for name, ix := range map[string]*Index{"apply": Empty().Apply(in, nil), "builder": b.Index()} {
		if ix.Len() != len(in) {
			t.Fatalf("%s: Len = %d", name, ix.Len())
		}
		for _, want := range in {
			e, ok := ix.Get(want.ID)
			if !ok {
				t.Fatalf("%s: Get(%q) missed", name, want.ID)
			}
			got := e.Session()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: round trip changed the session:\n got %#v\nwant %#v", name, got, want)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			if string(gj) != string(wj) {
				t.Errorf("%s: JSON differs:\n got %s\nwant %s", name, gj, wj)
			}
			for _, p := range want.Allocations {
				k, ok := normKey(p)
				if !ok {
					continue
				}
				if _, ok := ix.LookupIP(k.prefix().Addr()); !ok {
					t.Errorf("%s: LookupIP(%s) of %q missed", name, p, want.ID)
				}
			}
			if want.Username != "" && len(ix.ByUsername(want.Username)) != 1 {
				t.Errorf("%s: ByUsername(%q) = %d sessions", name, want.Username[:min(len(want.Username), 10)], len(ix.ByUsername(want.Username)))
			}
		}
		var ids []string
		for _, s := range in {
			ids = append(ids, s.ID)
		}
		if empty := ix.Apply(nil, ids); empty.Len() != 0 || routeCount(empty) != 0 {
			t.Errorf("%s: after deleting all: %d sessions, %d routes", name, empty.Len(), routeCount(empty))
		}
	}

	// Changing a session after handing it over changes nothing stored.
	sess, want := roundTripCases()[0], roundTripCases()[0]
	ix := Empty().Apply([]*session.Session{sess}, nil)
	sess.Username, sess.Allocations[0], *sess.ExpiresAt = "mallory", netip.MustParsePrefix("1.1.1.1/32"), time.Time{}
	if e, _ := ix.Get(want.ID); !reflect.DeepEqual(e.Session(), want) {
		t.Errorf("stored session follows changes to the input: %+v", e.Session())
	}
}

// TestEntrySize pins the layout the figures in docs/subscriber-index.md
// rest on: a chunk of 64 entries fills one allocation size class (8 KiB).
func TestEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 128 {
		t.Fatalf("entry is %d bytes, want 128", got)
	}
}

// TestProducers checks the producer table: codes are per lineage and
// append-only (a snapshot taken before a producer appeared still reads its
// own), a producer past the table's codes goes to the extra record, and
// every session comes back with its producer through Apply, a Builder and
// replacements that change it.
func TestProducers(t *testing.T) {
	mk := func(i int, prod string) *session.Session {
		return &session.Session{ID: fmt.Sprintf("s%d", i), Org: "o", Producer: prod,
			Allocations: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 32)}}
	}
	var in []*session.Session
	for i := range 600 { // 300 producers: more than the codes
		prod := ""
		if i%2 == 1 {
			prod = fmt.Sprintf("p%d", i/2)
		}
		in = append(in, mk(i, prod))
	}
	// Odd first allocations need the extra record too: the producer shares it.
	in[599].Allocations = []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.9.9.9"), 24)}
	b := NewBuilder(0)
	for _, s := range in {
		b.Put(s)
	}
	applied := Empty()
	for _, s := range in {
		applied = applied.Apply([]*session.Session{s}, nil)
	}
	first := Empty().Apply(in[:3], nil)
	later := first.Apply(in[3:], nil)
	check := func(name string, ix *Index, want []*session.Session) {
		t.Helper()
		for _, s := range want {
			e, ok := ix.Get(s.ID)
			if !ok || e.Producer() != s.Producer || !reflect.DeepEqual(e.Session(), s) {
				t.Fatalf("%s: %s: producer %q, session %+v; want %q", name, s.ID, e.Producer(), e.Session(), s.Producer)
			}
		}
	}
	check("builder", b.Index(), in)
	check("apply one by one", applied, in)
	check("later", later, in)
	check("first, after later was derived", first, in[:3])
	if n := len(later.names.prods); n != prodExt {
		t.Errorf("producer table holds %d codes, want %d", n, prodExt)
	}

	// Replacing a session with another producer's, and back.
	ix := later
	for round, prod := range []string{"radius", "", "p1", "p300", ""} {
		var ups []*session.Session
		for _, s := range in {
			c := *s
			c.Producer = prod
			ups = append(ups, &c)
		}
		ix = ix.Apply(ups, nil)
		check(fmt.Sprintf("round %d", round), ix, ups)
	}
}

// TestSideExtFits checks that a chunk side's extra records stay within
// entry.ext's byte however often one edit replaces entries that have one.
func TestSideExtFits(t *testing.T) {
	b := NewBuilder(0)
	odd := func(i, round int) *session.Session {
		return &session.Session{ID: fmt.Sprintf("s%d", i), Org: "o", Revision: int64(round),
			Allocations: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 24)}} // host bits: extra record
	}
	for round := range 20 {
		for i := range chunkLen {
			b.Put(odd(i, round))
		}
	}
	ix := b.Index()
	for i := range chunkLen {
		if e, ok := ix.Get(fmt.Sprintf("s%d", i)); !ok || !reflect.DeepEqual(e.Session(), odd(i, 19)) {
			t.Fatalf("s%d: %+v", i, e.Session())
		}
	}
	for _, d := range ix.slots.dirs {
		for _, x := range d.sides {
			if x != nil && cap(x.ext) > maxSideExt {
				t.Fatalf("a side has room for %d extra records, more than %d", cap(x.ext), maxSideExt)
			}
		}
	}
}

func TestZeroEntry(t *testing.T) {
	var e Entry
	if e.ID() != "" || e.Org() != "" || e.Producer() != "" || e.Username() != "" || e.DeviceID() != "" || e.Location() != "" ||
		e.TraceID() != "" || e.OpaqueID() != "" || e.Revision() != 0 || !e.UpdatedAt().IsZero() ||
		e.Allocations() != nil || e.Session() != nil {
		t.Fatal("zero Entry is not empty")
	}
	if _, ok := e.ExpiresAt(); ok {
		t.Fatal("zero Entry expires")
	}
}

// TestEntryIdentity checks Identity against the session stored, for every
// shape of entry (inline, rest, big strings, no location), and that it does
// not allocate.
func TestEntryIdentity(t *testing.T) {
	cases := roundTripCases()
	ix := Empty().Apply(cases, nil)
	for _, s := range cases {
		e, ok := ix.Get(s.ID)
		if !ok {
			t.Fatalf("Get(%q) missed", s.ID)
		}
		if got, want := e.Identity(), s.Identity(); got != want {
			t.Errorf("%q: Identity() = %+v, want %+v", s.ID, got, want)
		}
		if got, want := e.Identity(), e.Session().Identity(); got != want {
			t.Errorf("%q: Identity() = %+v, Session().Identity() = %+v", s.ID, got, want)
		}
		if n := testing.AllocsPerRun(10, func() { _ = e.Identity() }); n != 0 {
			t.Errorf("%q: Identity: %v allocations", s.ID, n)
		}
	}
	if got := (Entry{}).Identity(); got != (identity.Identity{}) {
		t.Errorf("zero Entry: Identity() = %+v", got)
	}
}

// TestEntryOrgID: two entries' OrgIDs are equal exactly when their
// organisations are, in one snapshot and across the snapshots Apply
// derives from it (the resolver keys a memo by it), and never across
// lineages; the zero Entry's is the zero OrgID.
func TestEntryOrgID(t *testing.T) {
	cases := roundTripCases()
	ix := Empty().Apply(cases, nil)
	later := ix.Apply([]*session.Session{{ID: "new", Org: "new-org"}, {ID: "bare", Org: "acme"}}, []string{"many"})
	var entries []Entry
	for _, s := range cases {
		e, ok := ix.Get(s.ID)
		if !ok {
			t.Fatalf("Get(%q) missed", s.ID)
		}
		entries = append(entries, e)
	}
	for _, id := range []string{"new", "bare", "odd-first"} {
		e, _ := later.Get(id)
		entries = append(entries, e)
	}
	for _, a := range entries {
		for _, b := range entries {
			if (a.OrgID() == b.OrgID()) != (a.Org() == b.Org()) {
				t.Errorf("%q and %q: OrgIDs equal %v, orgs %q and %q", a.ID(), b.ID(), a.OrgID() == b.OrgID(), a.Org(), b.Org())
			}
		}
		if a.OrgID() == (OrgID{}) {
			t.Errorf("%q: zero OrgID", a.ID())
		}
	}
	other, _ := Empty().Apply(cases, nil).Get(cases[0].ID)
	if other.OrgID() == entries[0].OrgID() {
		t.Error("two lineages share an OrgID")
	}
	if (Entry{}).OrgID() != (OrgID{}) {
		t.Error("zero Entry: OrgID is not the zero OrgID")
	}
}

// TestLookupDoesNotAllocate pins the resolver's hot path: LookupIP and the
// accessors it reads.
func TestLookupDoesNotAllocate(t *testing.T) {
	ix := Empty().Apply(roundTripCases(), nil)
	v4, v6 := netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("2001:db8::7")
	n := testing.AllocsPerRun(100, func() {
		for _, a := range []netip.Addr{v4, v6} {
			e, ok := ix.LookupIP(a)
			if !ok || e.ID() == "" || e.Org() == "" || e.Username() == "" || e.DeviceID() == "" || e.Location() == "" {
				panic("lookup")
			}
		}
	})
	if n != 0 {
		t.Fatalf("LookupIP and accessors: %v allocations", n)
	}
}

// FuzzEntryRoundTrip stores arbitrary sessions and checks they come back
// unchanged and are found by id and by each valid allocation.
func FuzzEntryRoundTrip(f *testing.F) {
	f.Add("id", "org", "user", "dev", "loc", "trace", "opaque", "", int64(7), int64(1_700_000_000_000_000_000), int64(-5), true, []byte{4, 33, 10, 0, 0, 1})
	f.Add("", "", "", "", "", "", "", "radius", int64(0), int64(0), int64(0), false, []byte{})
	f.Add("x", "o", "", "", "", "", "", "p", int64(-1), int64(1), int64(1), true, []byte{6, 129, 0x20, 1, 13, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, id, org, user, dev, loc, trace, opaque, producer string, rev, upd, exp int64, hasExp bool, raw []byte) {
		s := &session.Session{ID: id, Org: org, Revision: rev, Attributes: identity.Attributes{Username: user, DeviceID: dev, Location: loc},
			TraceID: trace, OpaqueID: opaque, Producer: producer, UpdatedAt: time.Unix(0, upd).UTC()}
		if hasExp {
			e := time.Unix(0, exp).In(time.FixedZone("", int(exp%50000)))
			s.ExpiresAt = &e
		}
		// raw: records of kind (4, 6 or other = zero prefix), bits, address bytes.
		for len(raw) >= 2 {
			kind, bits := raw[0], int(int8(raw[1]))
			raw = raw[2:]
			var p netip.Prefix
			switch kind {
			case 4:
				var a [4]byte
				raw = raw[copy(a[:], raw):]
				p = netip.PrefixFrom(netip.AddrFrom4(a), bits)
			case 6:
				var a [16]byte
				raw = raw[copy(a[:], raw):]
				p = netip.PrefixFrom(netip.AddrFrom16(a), bits)
			}
			s.Allocations = append(s.Allocations, p)
		}
		for _, ix := range []*Index{Empty().Apply([]*session.Session{s}, nil), buildOne(s)} {
			e, ok := ix.Get(id)
			if !ok || !reflect.DeepEqual(e.Session(), s) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", e.Session(), s)
			}
			for _, p := range s.Allocations {
				k, ok := normKey(p)
				if !ok {
					continue
				}
				a := k.prefix().Addr()
				if k.bits() < 32 && !k.v6() || k.bits() < 128 && k.v6() {
					a = lastOf(k)
				}
				if a.Is4In6() {
					continue // looked up as IPv4, so an IPv6 key cannot match it
				}
				if got, ok := ix.LookupIP(a); !ok || got != e {
					t.Fatalf("LookupIP(%s) for %s missed", a, p)
				}
			}
			if ix2 := ix.Apply(nil, []string{id}); ix2.Len() != 0 || routeCount(ix2) != 0 {
				t.Fatalf("after delete: %d sessions, %d routes", ix2.Len(), routeCount(ix2))
			}
		}
	})
}

func buildOne(s *session.Session) *Index {
	b := NewBuilder(1)
	b.Put(s)
	return b.Index()
}

// lastOf is the last address of k's prefix.
func lastOf(k pkey) netip.Addr {
	if !k.v6() {
		v := uint32(k.lo) | ^uint32(mask4(k.bits()))
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	}
	mh, ml := mask6(k.bits())
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi|^mh)
	binary.BigEndian.PutUint64(b[8:], k.lo|^ml)
	return netip.AddrFrom16(b)
}

// routeCount is the number of prefixes in the routing tables.
func routeCount(ix *Index) int {
	r := &ix.routes
	n := 0
	if r.host4 != nil {
		n += r.host4.len()
	}
	if r.net64 != nil {
		n += r.net64.len()
	}
	if r.host6 != nil {
		n += r.host6.len()
	}
	if r.lpm != nil {
		n += r.lpm.Size()
	}
	return n
}
