package cache

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// RecordKey names what the record cache holds: the answer to one question
// as the bits of the query that change it asked for it. Name is a fully
// qualified name in any letter case; the cache lower-cases it.
type RecordKey struct {
	Name  string
	Type  uint16
	Class uint16
	// DO: with DNSSEC records (RFC 3225).
	DO bool
	// CD: checking disabled (RFC 4035 section 3.2.2): a validating
	// source may give such a query data it refuses to others (bogus
	// data), which must not reach a client that did not set CD.
	CD bool
	// AD: the query set AD. An answer's AD bit goes only to a client
	// asking with DO or AD (RFC 6840 section 5.7), and a validating
	// source may validate only for those (PowerDNS's process mode): a
	// DO-less query with AD and one without are answers of their own.
	// With DO the bit changes nothing, and the cache ignores it.
	AD bool
}

// recordFlags are a RecordKey's bits as the cache keys on them.
type recordFlags uint8

const (
	flagDO recordFlags = 1 << iota
	flagCD
	flagAD
)

func (k RecordKey) flags() recordFlags {
	var f recordFlags
	if k.DO {
		f |= flagDO
	} else if k.AD {
		f |= flagAD
	}
	if k.CD {
		f |= flagCD
	}
	return f
}

// RecordAnswer is a record-cache hit: the upstream's answer and authority
// sections as they were stored, new records for the caller (unpacked from
// the entry) with TTLs aged.
type RecordAnswer struct {
	// Rcode is dns.RcodeSuccess or dns.RcodeNameError.
	Rcode int
	// AuthenticatedData is the upstream's AD bit.
	AuthenticatedData bool
	// Negative is true for NXDOMAIN and NODATA; Ns then holds the SOA the
	// reply carries in its authority section (RFC 2308 §3).
	Negative bool
	Answer   []dns.RR
	Ns       []dns.RR
	// TTL is how many seconds the entry has left; StaleTTL for a stale
	// answer.
	TTL uint32
	// Refresh: this hit made the entry due for a prefetch (Get; see
	// RecordConfig.Prefetch). It is reported once per entry: the caller
	// asks the forwarders in the background and stores what they say.
	Refresh bool
	// Stale: the entry has expired and is served under serve_stale
	// (GetStale); every TTL is StaleTTL.
	Stale bool
	// Failing: a refresh of the stale entry failed less than StaleRecheck
	// ago (MarkFailed): serve it at once rather than ask the forwarders
	// again.
	Failing bool
}

// Record is the record cache and the negative cache: what the upstream said
// for a question, kept once for every policy class, so that a query from a
// subscriber of another class is answered by running the policy over it
// without asking upstream again. See the package documentation.
//
// It sits on the miss path, behind the packet cache, and returns copies, so
// it is a plain map per shard under an RWMutex.
type Record struct {
	seed     maphash.Seed
	shards   []recordShard
	mask     uint64
	perShard int

	minTTL, maxTTL, negativeTTL uint32
	serveStale                  time.Duration
	prefetch                    uint32

	// packBufs are Put's packing scratch (*packScratch): the records are
	// packed there, then copied once, at their length, into the entry.
	packBufs sync.Pool
}

type recordShard struct {
	mu sync.RWMutex
	m  map[recordKey]*recordEntry
	// nxNames counts the name-wide NXDOMAIN entries in m (written under
	// mu, read under its read lock): a Get whose question missed looks
	// for the name's NXDOMAIN only when the shard holds one. Each lookup
	// in a large map is a cache miss or two; a stream of new names (the
	// miss path's load) paid two per query.
	nxNames int

	hits, misses        atomic.Uint64
	inserts, evictions  atomic.Uint64
	entries, negEntries atomic.Int64
	_                   [64]byte
}

type recordKey struct {
	name   string
	qtype  uint16
	qclass uint16
	flags  recordFlags
}

// typeNXDomain is the type of a name-wide NXDOMAIN entry: type 0 is reserved
// (RFC 6895) and never asked for, and an NXDOMAIN holds for every type.
const typeNXDomain = 0

// recordEntry is immutable once stored, except lastUsed.
//
// The records are kept in wire form (records): the answer section's, then
// the authority section's, each packed uncompressed with its TTL already
// clamped, counted by nAnswer and nNs. One pointer-free slice per entry
// rather than an RR per record with its name, its rdata slices and the
// slices holding them: a miss used to copy every record into the cache (a
// few objects each), and a full cache held millions of pointers that every
// garbage-collection cycle traced. A Get unpacks (it copied every record
// before, too).
type recordEntry struct {
	rcode    int
	ad       bool
	negative bool
	nAnswer  uint16
	nNs      uint16
	records  []byte
	born     time.Time
	life     time.Duration
	lastUsed atomic.Int64 // Unix nanoseconds, for sampled LRU
	// warm counts the hits in the last tenth of the entry's life
	// (prefetch.go); failedAt is when a refresh of the expired entry last
	// failed (Unix nanoseconds; 0: never), for StaleRecheck.
	warm     atomic.Uint32
	failedAt atomic.Int64
}

func (e *recordEntry) expired(now time.Time) bool { return now.Sub(e.born) >= e.life }

// gone: expired more than serve_stale ago, never served again.
func (e *recordEntry) gone(now time.Time, serveStale time.Duration) bool {
	return now.Sub(e.born) >= e.life+serveStale
}

// NewRecord builds a record cache.
func NewRecord(cfg RecordConfig) (*Record, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	shards := cfg.Shards
	if shards == 0 {
		shards = 8 * runtime.GOMAXPROCS(0)
	}
	shards = 1 << bits.Len(uint(shards-1))
	for shards > 1 && shards > cfg.Entries {
		shards /= 2
	}
	c := &Record{
		seed:        maphash.MakeSeed(),
		shards:      make([]recordShard, shards),
		mask:        uint64(shards - 1),
		perShard:    (cfg.Entries + shards - 1) / shards,
		minTTL:      seconds(cfg.MinTTL),
		maxTTL:      seconds(cfg.MaxTTL),
		negativeTTL: seconds(cfg.NegativeTTL),
		serveStale:  cfg.ServeStale,
		prefetch:    uint32(cfg.Prefetch),
	}
	for i := range c.shards {
		c.shards[i].m = make(map[recordKey]*recordEntry)
	}
	c.packBufs.New = func() any { return &packScratch{buf: make([]byte, 2048)} }
	return c, nil
}

// shard is chosen by name alone, so that the exact lookup and the
// name-wide NXDOMAIN lookup of one Get share a lock.
func (c *Record) shard(name string) *recordShard {
	return &c.shards[maphash.String(c.seed, name)&c.mask]
}

// Get returns the cached answer for k: the entry for the question, else an
// NXDOMAIN entry for the name (which holds for every type). The records are
// new ones, unpacked from the entry, with every TTL lowered by the whole
// seconds since they were stored.
func (c *Record) Get(k RecordKey, now time.Time) (RecordAnswer, bool) {
	name := dns.CanonicalName(k.Name) // allocates only when k.Name is not already canonical
	sh := c.shard(name)
	key := recordKey{name, k.Type, k.Class, k.flags()}
	sh.mu.RLock()
	e := sh.m[key]
	if (e == nil || e.expired(now)) && sh.nxNames > 0 {
		key.qtype = typeNXDomain
		e = sh.m[key]
	}
	sh.mu.RUnlock()
	if e == nil || e.expired(now) {
		sh.misses.Add(1)
		return RecordAnswer{}, false
	}
	age := max(now.Sub(e.born), 0)
	elapsed := uint32(age / time.Second)
	answer, ns, ok := e.unpack(elapsed)
	if !ok {
		// Put packed these bytes with miekg/dns, which unpacks what it
		// packs; should a record type not round-trip, the entry is a
		// miss and the question goes upstream again.
		sh.misses.Add(1)
		return RecordAnswer{}, false
	}
	sh.hits.Add(1)
	if last := e.lastUsed.Load(); now.UnixNano()-last > int64(time.Second) {
		e.lastUsed.Store(now.UnixNano()) // at most once a second: hot entries stay read-shared
	}
	return RecordAnswer{
		Rcode:             e.rcode,
		AuthenticatedData: e.ad,
		Negative:          e.negative,
		Answer:            answer,
		Ns:                ns,
		TTL:               uint32(e.life/time.Second) - elapsed, // ≥ 1: not expired
		Refresh:           c.prefetch > 0 && inLastTenth(int64(age), int64(e.life)) && warmHit(&e.warm, c.prefetch),
	}, true
}

// Holds reports whether a fresh entry answers k (its own, or the name's
// NXDOMAIN), without counting a hit or unpacking it.
func (c *Record) Holds(k RecordKey, now time.Time) bool {
	name := dns.CanonicalName(k.Name)
	sh := c.shard(name)
	key := recordKey{name, k.Type, k.Class, k.flags()}
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if e := sh.m[key]; e != nil && !e.expired(now) {
		return true
	}
	if sh.nxNames > 0 {
		key.qtype = typeNXDomain
		if e := sh.m[key]; e != nil && !e.expired(now) {
			return true
		}
	}
	return false
}

// GetStale returns the entry for k (or the name's NXDOMAIN) that has
// expired less than serve_stale ago, every TTL StaleTTL (RFC 8767): what
// the resolver answers when the forwarders cannot. A fresh entry, one past
// serve_stale, or serve_stale 0: false. Stale hits are not counted as
// cache hits (the caller counts its stale answers).
func (c *Record) GetStale(k RecordKey, now time.Time) (RecordAnswer, bool) {
	if c.serveStale <= 0 {
		return RecordAnswer{}, false
	}
	e := c.staleEntry(k, now)
	if e == nil {
		return RecordAnswer{}, false
	}
	answer, ns, ok := e.unpack(0)
	if !ok {
		return RecordAnswer{}, false
	}
	for _, rrs := range [...][]dns.RR{answer, ns} {
		for _, rr := range rrs {
			rr.Header().Ttl = StaleTTL
		}
	}
	failed := e.failedAt.Load()
	return RecordAnswer{
		Rcode:             e.rcode,
		AuthenticatedData: e.ad,
		Negative:          e.negative,
		Answer:            answer,
		Ns:                ns,
		TTL:               StaleTTL,
		Stale:             true,
		Failing:           failed != 0 && now.UnixNano()-failed < int64(StaleRecheck),
	}, true
}

// staleEntry is the expired entry GetStale serves for k, or nil: the
// question's own, else the name's NXDOMAIN.
func (c *Record) staleEntry(k RecordKey, now time.Time) *recordEntry {
	name := dns.CanonicalName(k.Name)
	sh := c.shard(name)
	key := recordKey{name, k.Type, k.Class, k.flags()}
	usable := func(e *recordEntry) bool { return e != nil && e.expired(now) && !e.gone(now, c.serveStale) }
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if e := sh.m[key]; usable(e) {
		return e
	} else if e != nil && !e.expired(now) {
		return nil // fresh: Get's
	}
	if sh.nxNames > 0 {
		key.qtype = typeNXDomain
		if e := sh.m[key]; usable(e) {
			return e
		}
	}
	return nil
}

// MarkFailed records that the forwarders failed to refresh k's expired
// entry at now: for StaleRecheck, GetStale reports it Failing, and the
// resolver serves the stale data without asking them again (RFC 8767's
// failure recheck timer). A Put of a new answer clears it.
func (c *Record) MarkFailed(k RecordKey, now time.Time) {
	if e := c.staleEntry(k, now); e != nil {
		e.failedAt.Store(now.UnixNano())
	}
}

// unpack returns new records for the entry's answer and authority
// sections, every TTL lowered by elapsed.
func (e *recordEntry) unpack(elapsed uint32) (answer, ns []dns.RR, ok bool) {
	n := int(e.nAnswer) + int(e.nNs)
	if n == 0 {
		return nil, nil, true
	}
	all := make([]dns.RR, n)
	off := 0
	for i := range all {
		rr, next, err := dns.UnpackRR(e.records, off)
		if err != nil || rr == nil {
			return nil, nil, false
		}
		h := rr.Header()
		h.Ttl -= min(h.Ttl, elapsed)
		all[i], off = rr, next
	}
	EscapeOctets(all)
	answer, ns = all[:e.nAnswer:e.nAnswer], all[e.nAnswer:]
	if len(answer) == 0 {
		answer = nil
	}
	if len(ns) == 0 {
		ns = nil
	}
	return answer, ns, true
}

// Put stores the upstream response m to the question k and returns the
// entry's lifetime in seconds, or a NotCached error. m is not retained.
//
//   - NOERROR with answers: the answer and authority sections, every TTL
//     raised to min_ttl and lowered to max_ttl; the entry lives as long as
//     the smallest of them.
//   - NODATA (NOERROR, no answers) and NXDOMAIN: the RFC 2308 §5 lifetime,
//     the smaller of the authority SOA's TTL and MINIMUM (and of the TTLs
//     of a CNAME chain in the answer), at most negative_ttl, every TTL
//     lowered to it. An NXDOMAIN with an empty answer section is stored for
//     the name and holds for every type; one reached through a CNAME is
//     stored for the question only, because the name asked for exists.
//     Without an SOA a negative answer is not stored (RFC 2308 §5).
//   - SERVFAIL, any other rcode, or TC: not stored.
func (c *Record) Put(k RecordKey, m *dns.Msg, now time.Time) (uint32, error) {
	if k.Name == "" {
		return 0, NotCachedKey
	}
	name := dns.CanonicalName(k.Name)
	if m == nil || !m.Response || m.Opcode != dns.OpcodeQuery || len(m.Question) != 1 ||
		!strings.EqualFold(m.Question[0].Name, name) ||
		m.Question[0].Qtype != k.Type || m.Question[0].Qclass != k.Class {
		return 0, NotCachedMismatch
	}
	if m.Truncated {
		return 0, NotCachedTruncated
	}
	key := recordKey{name, k.Type, k.Class, k.flags()}
	e := &recordEntry{rcode: m.Rcode, ad: m.AuthenticatedData, born: now}
	lo, hi, negative, err := c.ttlBounds(m)
	if err != nil {
		return 0, err
	}
	var life uint32
	if negative {
		life, e.negative = hi, true
		if m.Rcode == dns.RcodeNameError && len(m.Answer) == 0 {
			key.qtype = typeNXDomain
		}
	}
	sc := c.packBufs.Get().(*packScratch)
	defer c.packBufs.Put(sc)
	wire, nAnswer, nNs, least, ok := sc.packClamped(m.Answer, m.Ns, lo, hi)
	if !ok {
		return 0, NotCachedMalformed // a record miekg/dns cannot pack
	}
	if !e.negative {
		if nAnswer == 0 { // nothing but an OPT where the answers should be
			return 0, NotCachedMalformed
		}
		life = least
	}
	if life == 0 {
		return 0, NotCachedZeroTTL
	}
	e.nAnswer, e.nNs = nAnswer, nNs
	if len(wire) > 0 {
		e.records = append(make([]byte, 0, len(wire)), wire...)
	}
	e.life = time.Duration(life) * time.Second
	e.lastUsed.Store(now.UnixNano())
	c.insert(c.shard(name), key, e, now)
	return life, nil
}

// ttlBounds is the range Put brings every TTL of the upstream response m
// into: [min_ttl, max_ttl] for NOERROR with answers; [0, the negative
// lifetime] for NXDOMAIN and NODATA, the lifetime being the smaller of the
// authority SOA's TTL and MINIMUM (and of the TTLs of a CNAME chain in the
// answer), at most negative_ttl. A negative answer without an SOA, or
// another rcode, is not stored (err).
func (c *Record) ttlBounds(m *dns.Msg) (lo, hi uint32, negative bool, err error) {
	switch {
	case m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0:
		return c.minTTL, c.maxTTL, false, nil
	case m.Rcode == dns.RcodeSuccess || m.Rcode == dns.RcodeNameError:
		soa := firstSOA(m.Ns)
		if soa == nil {
			return 0, 0, true, NotCachedNoSOA
		}
		return 0, min(ttl2181(soa.Hdr.Ttl), ttl2181(soa.Minttl), minTTL(m.Answer), c.negativeTTL), true, nil
	}
	return 0, 0, false, NotCachedRcode
}

// ClampTTLs writes into the upstream response m, in place, the TTLs a
// record-cache hit of it would carry when just stored: every record's TTL
// (OPT aside: its TTL field is EDNS flags) read as RFC 2181 §8 says and
// brought into Put's bounds (ttlBounds), so that a client gets the same
// TTLs from a cache miss as from a hit. A response Put would not keep (a
// negative answer without an SOA or with a zero lifetime, another rcode)
// gets [0, max_ttl]. The additional section, which Put does not keep, is
// clamped as the answer section.
func (c *Record) ClampTTLs(m *dns.Msg) {
	lo, hi, _, err := c.ttlBounds(m)
	if err != nil || hi == 0 {
		lo, hi = 0, c.maxTTL
	}
	for _, rrs := range [...][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range rrs {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl = clampTTL(h.Ttl, lo, hi)
			}
		}
	}
}

// clampTTL is the TTL the record cache keeps and serves for one the
// upstream gave: dnswire.CapTTL's reading (RFC 2181 §8, at most hi), at
// least lo.
func clampTTL(ttl, lo, hi uint32) uint32 { return max(dnswire.CapTTL(ttl, hi), min(lo, hi)) }

func firstSOA(rrs []dns.RR) *dns.SOA {
	for _, rr := range rrs {
		if soa, ok := rr.(*dns.SOA); ok {
			return soa
		}
	}
	return nil
}

// minTTL is the smallest TTL of rrs, a TTL with the top bit set counting as
// 0 (RFC 2181 §8); the largest TTL for none, so that it drops out of a min.
func minTTL(rrs []dns.RR) uint32 {
	m := ^uint32(0)
	for _, rr := range rrs {
		m = min(m, ttl2181(rr.Header().Ttl))
	}
	return m
}

// ttl2181 reads a TTL as RFC 2181 §8 says: one with the top bit set is 0.
func ttl2181(t uint32) uint32 { return dnswire.CapTTL(t, math.MaxUint32) }

// maxPackBuf is the largest packing buffer kept for reuse: a DNS message's
// records fit in 64 KiB.
const maxPackBuf = 1 << 16

// packScratch is Put's packing buffer and the message it packs the
// records through.
type packScratch struct {
	buf []byte
	m   dns.Msg
}

// packClamped packs the records of answer, then of ns, into sc.buf
// (grown when too short), uncompressed, and returns the bytes after the
// message header, every TTL brought into [lo, hi] in the bytes, OPT
// records left out (they are per message). least is the smallest TTL
// written (^0 for none); ok is false when miekg/dns cannot pack a record.
//
// The records go through a dns.Msg's PackBuffer, not dns.PackRR: PackRR
// writes each record's Rdlength back into it, and the caller's records
// must stay untouched (another goroutine may be reading or storing the
// same message).
func (sc *packScratch) packClamped(answer, ns []dns.RR, lo, hi uint32) (wire []byte, nAnswer, nNs uint16, least uint32, ok bool) {
	sc.m = dns.Msg{Answer: withoutOPT(answer), Ns: withoutOPT(ns)}
	nAnswer, nNs = uint16(len(sc.m.Answer)), uint16(len(sc.m.Ns))
	out, err := sc.m.PackBuffer(sc.buf)
	sc.m = dns.Msg{} // the pool keeps no record
	if err != nil || len(out) < dnsHeaderLen {
		return nil, 0, 0, 0, false
	}
	if len(out) > len(sc.buf) && len(out) <= maxPackBuf {
		sc.buf = out[:cap(out)] // keep a buffer that had to grow
	}
	least = ^uint32(0)
	off := dnsHeaderLen
	for range int(nAnswer) + int(nNs) {
		// Uncompressed: the owner name's labels up to the root, then
		// type, class, TTL, RDLENGTH and the data.
		for off < len(out) && out[off] != 0 {
			if out[off]&0xC0 != 0 {
				return nil, 0, 0, 0, false
			}
			off += int(out[off]) + 1
		}
		if off+11 > len(out) {
			return nil, 0, 0, 0, false
		}
		ttl := clampTTL(binary.BigEndian.Uint32(out[off+5:]), lo, hi)
		binary.BigEndian.PutUint32(out[off+5:], ttl)
		least = min(least, ttl)
		off += 11 + int(binary.BigEndian.Uint16(out[off+9:]))
	}
	if off != len(out) {
		return nil, 0, 0, 0, false
	}
	return out[dnsHeaderLen:], nAnswer, nNs, least, true
}

// dnsHeaderLen is a DNS message header's length (RFC 1035 §4.1.1).
const dnsHeaderLen = 12

// EscapeOctets rewrites, in place, the URI targets and CAA values of the
// sections' records so that miekg/dns packs them to the bytes they were
// unpacked from. It unpacks these strings as the raw bytes but packs them
// reading backslash escapes, so a raw backslash must be written `\\`:
// unescaped, a target holding one would change on the way through the
// resolver (FuzzRecordRoundTrip found it). The resolver applies it to
// every forwarder answer, so the client gets the forwarder's bytes; Get
// applies it to what it unpacks, so a cached answer packs as the uncached
// one did. No other type reads escapes it did not write. miekg/dns packs
// at most 1025 bytes of such a string, escapes counted: a longer one fails
// to pack (the reply is SERVFAIL, counted server-parse-errors) rather than
// going out changed.
func EscapeOctets(sections ...[]dns.RR) {
	for _, rrs := range sections {
		for _, rr := range rrs {
			switch r := rr.(type) {
			case *dns.URI:
				r.Target = escapeBackslashes(r.Target)
			case *dns.CAA:
				r.Value = escapeBackslashes(r.Value)
			}
		}
	}
}

func escapeBackslashes(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	return strings.ReplaceAll(s, `\`, `\\`)
}

// withoutOPT is rrs without OPT records and nils: rrs itself when it has
// none (the usual case: the OPT is in the additional section), else a
// copy of the slice.
func withoutOPT(rrs []dns.RR) []dns.RR {
	for i, rr := range rrs {
		if rr == nil || rr.Header().Rrtype == dns.TypeOPT {
			out := append(make([]dns.RR, 0, len(rrs)-1), rrs[:i]...)
			for _, rr := range rrs[i+1:] {
				if rr != nil && rr.Header().Rrtype != dns.TypeOPT {
					out = append(out, rr)
				}
			}
			return out
		}
	}
	return rrs
}

// insert stores e, evicting when the shard is full: among up to eight
// entries sampled from the map (Go starts each range at a random place) an
// expired one, else the least recently used — Redis's approximated LRU,
// which needs no list to maintain on every hit.
func (c *Record) insert(sh *recordShard, key recordKey, e *recordEntry, now time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[key]; ok {
		sh.count(key, old, -1)
	} else if len(sh.m) >= c.perShard {
		var victim recordKey
		var oldest int64
		found, n := false, 0
		for k, v := range sh.m {
			if v.expired(now) {
				victim, found = k, true
				break
			}
			if last := v.lastUsed.Load(); !found || last < oldest {
				victim, oldest, found = k, last, true
			}
			if n++; n == 8 {
				break
			}
		}
		if found {
			sh.count(victim, sh.m[victim], -1)
			delete(sh.m, victim)
			sh.evictions.Add(1)
		}
	}
	sh.m[key] = e
	sh.count(key, e, 1)
	sh.inserts.Add(1)
}

func (sh *recordShard) count(k recordKey, e *recordEntry, d int64) {
	if k.qtype == typeNXDomain {
		sh.nxNames += int(d)
	}
	if e.negative {
		sh.negEntries.Add(d)
	} else {
		sh.entries.Add(d)
	}
}

func (c *Record) removeIf(drop func(recordKey, *recordEntry) bool) int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if drop(k, e) {
				sh.count(k, e, -1)
				delete(sh.m, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Sweep removes the entries expired more than serve_stale ago (all the
// expired ones with serve_stale 0) and returns how many; a server runs it
// every minute or so to return their memory and keep the entry counts
// exact.
func (c *Record) Sweep(now time.Time) int {
	return c.removeIf(func(_ recordKey, e *recordEntry) bool { return e.gone(now, c.serveStale) })
}

// Flush removes the entries for a name (any case), or with subtree for the
// name and every name under it, and returns how many.
func (c *Record) Flush(name string, subtree bool) int {
	name = dns.CanonicalName(name)
	return c.removeIf(func(k recordKey, _ *recordEntry) bool {
		if subtree {
			return dns.IsSubDomain(name, k.name)
		}
		return k.name == name
	})
}

// RecordStats are the record cache's counters: Hits, Misses, Entries and
// NegEntries are PowerDNS's cache-hits, cache-misses, cache-entries and
// negcache-entries.
type RecordStats struct {
	Hits, Misses        uint64
	Entries, NegEntries int64
	Inserts, Evictions  uint64
}

// Stats sums the shards' counters.
func (c *Record) Stats() RecordStats {
	var s RecordStats
	for i := range c.shards {
		sh := &c.shards[i]
		s.Hits += sh.hits.Load()
		s.Misses += sh.misses.Load()
		s.Entries += sh.entries.Load()
		s.NegEntries += sh.negEntries.Load()
		s.Inserts += sh.inserts.Load()
		s.Evictions += sh.evictions.Load()
	}
	return s
}
