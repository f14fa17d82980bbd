package cache

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// ways is the associativity: a key can live in one of the 8 slots of its
// bucket. Eight tags share one cache line, so a lookup reads one line of
// tags and then at most one entry.
const ways = 8

// MaxFingerprintLen bounds the policy fingerprint in a key; the settings
// package's is 16 hex digits.
const MaxFingerprintLen = 64

// entryOverhead approximates what an entry costs beyond its bytes (the
// entry struct, its slot, allocation rounding), so that max_bytes bounds
// memory rather than payload.
const entryOverhead = 128

// KeyFlags are the bits of a query besides its question that change the
// answer, and so belong in the key.
type KeyFlags uint8

const (
	// KeyDO: the client asked for DNSSEC records (RFC 3225).
	KeyDO KeyFlags = 1 << iota
	// KeyCD: the client disabled validation (RFC 4035 §3.2.2); a bogus
	// answer may be served to it and must not be served to others.
	KeyCD
	// KeyEDNS: the query had an OPT record. Not in the brief's list but
	// required: a reply to a query without EDNS must not carry an OPT
	// (RFC 6891 §7), and one to a query with EDNS should.
	KeyEDNS
	// KeyAD: the client set AD without DO. An answer's AD bit goes only
	// to clients asking with DO or AD (RFC 6840 section 5.7), so a
	// DO-less query with AD has an answer of its own; with DO the bit
	// changes nothing and is left out.
	KeyAD
)

// PacketKey is the packet-cache key of one query: flags, type, class, the
// policy class's fingerprint and the lower-cased name, laid out in a fixed
// array so that building and hashing it allocates nothing. The caller keeps
// one per socket worker (or on the stack). The zero value is an unset key:
// Get misses and Put refuses it.
type PacketKey struct {
	n   int
	buf [keyHeaderLen + MaxFingerprintLen + dnswire.MaxNameLen]byte
}

// Key layout: flags(1) qtype(2) qclass(2) len(fingerprint)(1) fingerprint name.
// The name goes last so that Flush finds it without decoding the rest.
const keyHeaderLen = 6

// Set builds the key. name must be the lower-cased wire name
// (dnswire.Query.Name); fingerprint is the policy decision's hash of the
// effective settings, never a subscriber id, so that every subscriber of a
// policy class shares the entry. It reports false, leaving the key unset,
// for an empty or over-long name or fingerprint.
func (k *PacketKey) Set(name []byte, qtype, qclass uint16, flags KeyFlags, fingerprint string) bool {
	k.n = 0
	if len(name) == 0 || len(name) > dnswire.MaxNameLen || len(fingerprint) > MaxFingerprintLen {
		return false
	}
	k.buf[0] = byte(flags)
	binary.BigEndian.PutUint16(k.buf[1:], qtype)
	binary.BigEndian.PutUint16(k.buf[3:], qclass)
	k.buf[5] = byte(len(fingerprint))
	n := keyHeaderLen + copy(k.buf[keyHeaderLen:], fingerprint)
	k.n = n + copy(k.buf[n:], name)
	return true
}

// SetQuery builds the key of a parsed query: its name, type and class, and
// the EDNS, DO, CD and AD bits (AD only without DO).
func (k *PacketKey) SetQuery(q *dnswire.Query, fingerprint string) bool {
	var f KeyFlags
	if q.EDNS.Present {
		f |= KeyEDNS
		if q.EDNS.DO {
			f |= KeyDO
		}
	}
	if q.Flags.Has(dnswire.FlagCD) {
		f |= KeyCD
	}
	if q.Flags.Has(dnswire.FlagAD) && f&KeyDO == 0 {
		f |= KeyAD
	}
	return k.Set(q.Name(), q.QType, q.QClass, f, fingerprint)
}

func (k *PacketKey) bytes() []byte { return k.buf[:k.n] }

// Reset unsets the key (without clearing its array).
func (k *PacketKey) Reset() { k.n = 0 }

// Len is the length of the key's bytes, 0 for an unset key.
func (k *PacketKey) Len() int { return k.n }

// Append appends the key's bytes (nothing for an unset key) to b. A key is
// a fixed ~330-byte array: a caller that hands one to another goroutine
// keeps these few bytes, next to data it copies anyway, rather than a
// copy of the whole array on the heap, and rebuilds the key with SetBytes.
func (k *PacketKey) Append(b []byte) []byte { return append(b, k.bytes()...) }

// SetBytes sets k from bytes Append wrote. It reports false, leaving the
// key unset, for anything Set would not have built (empty or over-long
// name or fingerprint, a fingerprint longer than the bytes).
func (k *PacketKey) SetBytes(b []byte) bool {
	k.n = 0
	if len(b) <= keyHeaderLen || len(b) > len(k.buf) {
		return false
	}
	fp := int(b[5])
	if fp > MaxFingerprintLen {
		return false
	}
	name := len(b) - keyHeaderLen - fp
	if name <= 0 || name > dnswire.MaxNameLen {
		return false
	}
	k.n = copy(k.buf[:], b)
	return true
}

func keyName(key []byte) []byte    { return key[keyHeaderLen+int(key[5]):] }
func keyFlags(key []byte) KeyFlags { return KeyFlags(key[0]) }
func keyType(key []byte) uint16    { return binary.BigEndian.Uint16(key[1:]) }
func keyClass(key []byte) uint16   { return binary.BigEndian.Uint16(key[3:]) }

// Packet is the packet cache: whole answers as wire bytes, keyed by question
// and policy class. See the package documentation for its place in the data
// flow and README.md for the design.
//
// Reads take no lock and, through a PacketReader, write no shared memory: a
// bucket holds atomic pointers to immutable entries, which writers replace
// under their shard's mutex. A reader that loads a pointer keeps a consistent
// entry for as long as it needs it; the garbage collector frees it later.
type Packet struct {
	seed            maphash.Seed
	buckets         []packetBucket
	shards          []packetShard
	shardShift      uint   // a hash's top bits pick the shard
	bucketsPerShard uint64 // a shard owns a contiguous run of buckets
	shardBytes      int64  // 0: no byte bound

	maxTTL, negativeTTL, servfailTTL uint32
	prefetch                         uint32 // PacketConfig.Prefetch; 0: off

	readersMu sync.Mutex
	readers   []*readerCounters
}

type packetBucket struct {
	// tags hold 32 bits of each slot's hash: a lookup compares them
	// before touching an entry. A tag is only a hint (it is written after
	// the slot), the entry's full hash and key decide.
	tags  [ways]atomic.Uint32
	slots [ways]atomic.Pointer[packetEntry]
}

type packetShard struct {
	mu        sync.Mutex
	rotor     uint32 // where second-chance eviction starts in a bucket
	hand      int    // the byte bound's CLOCK hand over the shard's slots
	_         [64]byte
	hits      atomic.Uint64 // Packet.Get's; a PacketReader counts its own
	misses    atomic.Uint64
	_         [64]byte
	entries   atomic.Int64
	bytes     atomic.Int64
	inserts   atomic.Uint64
	evictions atomic.Uint64
}

// packetEntry is never modified after it is published, except ref. It is
// 64 bytes at most, one cache line, and its bytes are one more allocation: a cold
// hit touches the bucket, the entry and the data. Times are Unix
// nanoseconds of the caller's clock, wall time as in PowerDNS and Unbound: a
// step of the system clock ages entries early or late by the step.
type packetEntry struct {
	hash   uint64
	born   int64         // Unix nanoseconds
	life   int64         // nanoseconds
	ref    atomic.Uint32 // CLOCK's referenced bit, set by hits
	keyLen uint16
	ansLen uint16
	offLen uint16
	// warm counts the hits in the last tenth of the entry's life, for
	// prefetch (prefetch.go). It sits in what was padding: the entry is
	// still 64 bytes.
	warm atomic.Uint32
	// data is the key, the answer with TTLs clamped, the offsets of the
	// answer's TTLs as big-endian uint16s, and the caller's note.
	data []byte
}

func (e *packetEntry) key() []byte    { return e.data[:e.keyLen] }
func (e *packetEntry) answer() []byte { return e.data[e.keyLen : int(e.keyLen)+int(e.ansLen)] }
func (e *packetEntry) offs() []byte {
	return e.data[int(e.keyLen)+int(e.ansLen) : int(e.keyLen)+int(e.ansLen)+int(e.offLen)]
}
func (e *packetEntry) note() []byte { return e.data[int(e.keyLen)+int(e.ansLen)+int(e.offLen):] }
func (e *packetEntry) cost() int64  { return int64(len(e.data)) + entryOverhead }
func (e *packetEntry) expired(now int64) bool {
	return now-e.born >= e.life
}

// ageTTLs subtracts elapsed seconds from every TTL at offs (the entry's
// TTL offsets, two big-endian bytes each, as Put stores them), stopping at
// 0: a hit reports how much longer each record may be cached, as a
// recursor that had asked upstream at the time of the hit would. A TTL
// can reach 0 before its entry expires: a SERVFAIL lives servfail_ttl
// whatever the TTLs of the records it carries.
func ageTTLs(msg, offs []byte, elapsed uint32) {
	for i := 0; i+2 <= len(offs); i += 2 {
		o := int(binary.BigEndian.Uint16(offs[i:]))
		p := msg[o : o+4 : o+4]
		ttl := binary.BigEndian.Uint32(p)
		binary.BigEndian.PutUint32(p, ttl-min(ttl, elapsed))
	}
}

// NewPacket builds a packet cache; the whole bucket array is allocated
// here, so memory for the entry bound's slots is known at start-up.
func NewPacket(cfg PacketConfig) (*Packet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	shards := cfg.Shards
	if shards == 0 {
		shards = 8 * runtime.GOMAXPROCS(0)
	}
	shards = 1 << bits.Len(uint(shards-1)) // round up to a power of two
	sets := (cfg.Entries + ways - 1) / ways
	// Small caches get fewer shards rather than a bound far above the one
	// configured, and each shard's byte budget stays above a few of the
	// largest answers.
	for shards > 1 && (shards > sets || (cfg.MaxBytes > 0 && cfg.MaxBytes/int64(shards) < 1<<20)) {
		shards /= 2
	}
	perShard := (sets + shards - 1) / shards
	c := &Packet{
		seed:            maphash.MakeSeed(),
		buckets:         make([]packetBucket, perShard*shards),
		shards:          make([]packetShard, shards),
		shardShift:      uint(64 - bits.TrailingZeros(uint(shards))),
		bucketsPerShard: uint64(perShard),
		maxTTL:          seconds(cfg.MaxTTL),
		negativeTTL:     seconds(cfg.NegativeTTL),
		servfailTTL:     seconds(cfg.ServfailTTL),
		prefetch:        uint32(cfg.Prefetch),
	}
	if cfg.Prefetch < 0 || cfg.Prefetch > MaxPrefetch {
		return nil, fmt.Errorf("record_cache.prefetch: must be 0 (off) to %d hits, got %d", MaxPrefetch, cfg.Prefetch)
	}
	if cfg.MaxBytes > 0 {
		c.shardBytes = cfg.MaxBytes / int64(shards)
	}
	return c, nil
}

// Capacity is the entry bound after rounding.
func (c *Packet) Capacity() int { return len(c.buckets) * ways }

// locate maps a hash to its shard and bucket: the top bits choose the shard,
// the low 32 bits the bucket inside it (Lemire's multiply-shift instead of a
// modulo), bits 32–63 are the tag.
func (c *Packet) locate(h uint64) (shard int, bucket int) {
	s := h >> c.shardShift // a shift by 64 yields 0: one shard
	b := s*c.bucketsPerShard + (uint64(uint32(h))*c.bucketsPerShard)>>32
	return int(s), int(b)
}

func tagOf(h uint64) uint32 { return uint32(h >> 32) }

// Get copies the answer stored under k into dst (reusing its capacity; give
// it 64 KiB, or the largest answer you cache, to never allocate), with every
// TTL lowered by the whole seconds elapsed since it was stored and the
// question written in clientName's letter case (the query's RawName: 0x20).
// The id and RD are left for the caller (dnswire.PatchHeader), as is the
// check that the answer fits the client's UDP payload size.
//
// An entry whose lifetime has passed is a miss. now is the caller's clock,
// read once per batch of packets.
//
// A hit also returns the note Put stored with the answer: the entry's own
// bytes, never modified, which the caller must not modify either.
//
// Get counts hits and misses in counters shared by every core that looks up
// keys of the same shard; the UDP workers use a PacketReader each instead.
func (c *Packet) Get(k *PacketKey, clientName []byte, now time.Time, dst []byte) (answer, note []byte, hit bool) {
	dst, note, hit, _, si := c.lookup(k, clientName, now, dst)
	if hit {
		c.shards[si].hits.Add(1)
	} else {
		c.shards[si].misses.Add(1)
	}
	return dst, note, hit
}

// lookup is Get without the counting; it also returns the shard, and
// whether the hit made the entry due for a prefetch (GetRefresh).
func (c *Packet) lookup(k *PacketKey, clientName []byte, now time.Time, dst []byte) ([]byte, []byte, bool, bool, int) {
	key := k.bytes()
	h := maphash.Bytes(c.seed, key)
	si, bi := c.locate(h)
	b := &c.buckets[bi]
	tag := tagOf(h)
	nowNano := now.UnixNano()
	for i := range ways {
		if b.tags[i].Load() != tag {
			continue
		}
		e := b.slots[i].Load()
		if e == nil || e.hash != h || string(e.key()) != string(key) {
			continue
		}
		age := max(nowNano-e.born, 0) // a clock behind the insertion: not aged
		if age >= e.life {
			break
		}
		if e.ref.Load() == 0 { // write only when it changes: the line stays shared
			e.ref.Store(1)
		}
		refresh := false
		if c.prefetch > 0 && inLastTenth(age, e.life) {
			refresh = warmHit(&e.warm, c.prefetch) // not inlined: the hit path stays as small as it was
		}
		dst = append(dst[:0], e.answer()...)
		if age >= int64(time.Second) {
			ageTTLs(dst, e.offs(), uint32(age/int64(time.Second)))
		}
		dnswire.CopyQuestionCase(dst, clientName)
		return dst, e.note(), true, refresh, si
	}
	return dst[:0], nil, false, false, si
}

// PacketReader is one socket worker's handle on the cache: Get as
// Packet.Get, counting into counters only this reader writes. A popular
// name makes every core hit the same shard, and a shared counter's cache
// line would then bounce between the cores on every query; with a reader
// per worker the hit path writes no memory another core reads, except the
// entry's referenced bit when an eviction pass has cleared it.
//
// A reader is for one goroutine at a time (its counters are not atomic
// read-modify-writes). Readers live as long as the cache: make one per
// worker at start-up, not one per query.
type PacketReader struct {
	c        *Packet
	counters *readerCounters
	warm     warmScratch // Warm's, reused batch after batch
}

// warmScratch holds what one stage of Warm hands the next, per key.
type warmScratch struct {
	hash    []uint64
	bucket  []*packetBucket // nil: an unset key
	entries []*packetEntry  // nil: no slot's tag matched
}

// readerCounters sit alone on their cache lines.
type readerCounters struct {
	_            [64]byte
	hits, misses atomic.Uint64
	_            [64]byte
}

// NewReader registers a reader whose counts Stats includes.
func (c *Packet) NewReader() *PacketReader {
	rc := new(readerCounters)
	c.readersMu.Lock()
	c.readers = append(c.readers, rc)
	c.readersMu.Unlock()
	return &PacketReader{c: c, counters: rc}
}

// Get is Packet.Get with the reader's own counters.
func (r *PacketReader) Get(k *PacketKey, clientName []byte, now time.Time, dst []byte) (answer, note []byte, hit bool) {
	answer, note, hit, _ = r.GetRefresh(k, clientName, now, dst)
	return answer, note, hit
}

// GetRefresh is Get, also reporting whether this hit made the entry due
// for a prefetch: with PacketConfig.Prefetch set, the hit that brings the
// entry's hits in the last tenth of its life to that many, once per entry.
// The caller then refreshes the question's record in the background; the
// entry itself is replaced when it expires and the next miss finds the
// refreshed record.
func (r *PacketReader) GetRefresh(k *PacketKey, clientName []byte, now time.Time, dst []byte) (answer, note []byte, hit, refresh bool) {
	dst, note, hit, refresh, _ = r.c.lookup(k, clientName, now, dst)
	// One writer: a load and a store, no locked instruction; atomic only so
	// that Stats may read concurrently.
	if hit {
		r.counters.hits.Store(r.counters.hits.Load() + 1)
	} else {
		r.counters.misses.Store(r.counters.misses.Load() + 1)
	}
	return dst, note, hit, refresh
}

// Warm reads, for every set key of a batch, the memory a Get of it
// will read — the bucket's tags, the slot whose tag matches, that
// entry, and the start of its bytes — one step for every key before the
// next, and returns something computed from what it read (so that no
// read can be left out; the caller ignores it). With the cache much
// larger than the processor's caches (a hit from one of a million
// subscribers, each with a policy of its own, finds a cold bucket) each
// Get waits for three or four loads from memory one after the other;
// here the loads of different keys do not depend on each other, so the
// processor has many of them under way at once, and the Gets that follow
// find their lines in the caches. It changes nothing and counts nothing;
// a key not in the cache costs its Get nothing more.
func (r *PacketReader) Warm(keys []PacketKey) uint64 {
	c, w := r.c, &r.warm
	if cap(w.hash) < len(keys) {
		w.hash = make([]uint64, len(keys))
		w.bucket = make([]*packetBucket, len(keys))
		w.entries = make([]*packetEntry, len(keys))
	}
	w.hash, w.bucket, w.entries = w.hash[:len(keys)], w.bucket[:len(keys)], w.entries[:len(keys)]
	var sink uint64
	for i := range keys { // the tags' line
		w.bucket[i], w.entries[i] = nil, nil
		if keys[i].n == 0 {
			continue
		}
		h := maphash.Bytes(c.seed, keys[i].bytes())
		_, bi := c.locate(h)
		w.hash[i], w.bucket[i] = h, &c.buckets[bi]
		sink += uint64(w.bucket[i].tags[0].Load())
	}
	for i, b := range w.bucket { // the matching slot
		if b == nil {
			continue
		}
		tag := tagOf(w.hash[i])
		for j := range ways {
			if b.tags[j].Load() == tag {
				w.entries[i] = b.slots[j].Load()
				break
			}
		}
	}
	for _, e := range w.entries { // the entry
		if e != nil {
			sink += e.hash + uint64(len(e.data))
		}
	}
	for _, e := range w.entries { // its bytes: the key, then the answer
		if e != nil && len(e.data) > 0 {
			sink += uint64(e.data[0])
		}
	}
	return sink
}

// NotCached says why Put did not store an answer. Most reasons are normal
// (a SERVFAIL, a zero TTL); Malformed and Mismatch point at a bug in the
// code that built the answer.
type NotCached uint8

const (
	NotCachedKey       NotCached = iota + 1 // key unset, or its name not lower-cased
	NotCachedMalformed                      // dnswire.ScanAnswer refused the answer
	NotCachedMismatch                       // not a response to the key's question, or an OPT the key's query did not ask for
	NotCachedTruncated                      // TC set: the full answer was not there
	NotCachedRcode                          // SERVFAIL with servfail_ttl 0, REFUSED, FORMERR, NOTIMP, …
	NotCachedNoSOA                          // NXDOMAIN/NODATA without an SOA (RFC 2308 §5)
	NotCachedZeroTTL                        // lifetime 0: a zero TTL, or negative_ttl 0
	NotCachedTooLarge                       // larger than a shard's share of max_bytes
)

func (r NotCached) Error() string {
	switch r {
	case NotCachedKey:
		return "cache: key unset or not lower-case"
	case NotCachedMalformed:
		return "cache: malformed answer"
	case NotCachedMismatch:
		return "cache: answer does not match the key"
	case NotCachedTruncated:
		return "cache: truncated answer"
	case NotCachedRcode:
		return "cache: rcode not cached"
	case NotCachedNoSOA:
		return "cache: negative answer without SOA"
	case NotCachedZeroTTL:
		return "cache: zero lifetime"
	case NotCachedTooLarge:
		return "cache: answer too large"
	}
	return "cache: not cached"
}

// Put stores the answer the pipeline sent for the query keyed by k, and
// returns its lifetime in seconds, or a NotCached error. The answer is
// copied. Its lifetime:
//
//   - NOERROR with records in the answer section: the smallest TTL of all
//     records (OPT aside), at most max_ttl; every TTL above max_ttl is
//     lowered to it in the stored copy.
//   - NXDOMAIN, or NOERROR with an empty answer section (NODATA): RFC 2308's
//     negative TTL, the smaller of the authority SOA's TTL and MINIMUM
//     (and of any other record's TTL), at most negative_ttl; every TTL in the
//     stored copy is lowered to that lifetime, so the SOA's TTL tells the
//     client what we assumed. Without an SOA: not stored.
//   - SERVFAIL: servfail_ttl, 0 by default (not stored).
//   - any other rcode, a truncated answer: not stored.
//
// The answer must start with the question, uncompressed, and carry no
// client-specific EDNS option (a cookie, padding): it is replayed to every
// client of the policy class.
//
// note is the caller's, stored beside the answer and handed back by every
// hit (the resolver's summary of the decision behind the answer, for its
// observer); nil stores none. It counts in the entry's bytes.
func (c *Packet) Put(k *PacketKey, answer, note []byte, now time.Time) (uint32, error) {
	key := k.bytes()
	if len(key) == 0 || !dnswire.IsLowerName(keyName(key)) {
		return 0, NotCachedKey
	}
	var offBuf [32]uint16
	info, offs, err := dnswire.ScanAnswer(answer, offBuf[:0])
	if err != nil {
		return 0, NotCachedMalformed
	}
	name := keyName(key)
	qEnd := dnswire.HeaderLen + len(name)
	if !info.Flags.Has(dnswire.FlagQR) || info.Flags.Opcode() != dnswire.OpcodeQuery ||
		info.QDCount != 1 || info.QuestionEnd != qEnd+4 ||
		!dnswire.EqualFoldName(answer[dnswire.HeaderLen:qEnd], name) ||
		binary.BigEndian.Uint16(answer[qEnd:]) != keyType(key) ||
		binary.BigEndian.Uint16(answer[qEnd+2:]) != keyClass(key) ||
		(info.HasOPT && keyFlags(key)&KeyEDNS == 0) {
		return 0, NotCachedMismatch
	}
	if info.Flags.Has(dnswire.FlagTC) {
		return 0, NotCachedTruncated
	}
	life, ttlCap, why := c.lifetime(&info)
	if why != 0 {
		return 0, why
	}

	e := &packetEntry{
		born:   now.UnixNano(),
		life:   int64(life) * int64(time.Second),
		keyLen: uint16(len(key)),
		ansLen: uint16(len(answer)),
		offLen: uint16(2 * len(offs)),
		data:   make([]byte, len(key)+len(answer)+2*len(offs)+len(note)),
	}
	copy(e.data, key)
	copy(e.data[len(key):], answer)
	copy(e.note(), note)
	dnswire.ClampTTLs(e.answer(), offs, ttlCap)
	for i, o := range offs {
		binary.BigEndian.PutUint16(e.offs()[2*i:], o)
	}
	if c.shardBytes > 0 && e.cost() > c.shardBytes {
		return 0, NotCachedTooLarge
	}
	e.hash = maphash.Bytes(c.seed, key)
	c.insert(e, now.UnixNano())
	return life, nil
}

// lifetime applies the rules listed on Put: how long the entry lives, and
// the cap on every TTL in the stored copy.
func (c *Packet) lifetime(a *dnswire.AnswerInfo) (life, ttlCap uint32, why NotCached) {
	switch {
	case a.Rcode == dnswire.RcodeServerFailure:
		if c.servfailTTL == 0 {
			return 0, 0, NotCachedRcode
		}
		return c.servfailTTL, c.servfailTTL, 0
	case a.Rcode == dnswire.RcodeNameError || (a.Rcode == dnswire.RcodeSuccess && a.ANCount == 0):
		if !a.HasSOA {
			return 0, 0, NotCachedNoSOA
		}
		life = min(a.NegativeTTL(), a.MinTTL, c.negativeTTL)
		ttlCap = life
	case a.Rcode == dnswire.RcodeSuccess:
		life, ttlCap = min(a.MinTTL, c.maxTTL), c.maxTTL
	default:
		return 0, 0, NotCachedRcode
	}
	if life == 0 {
		return 0, 0, NotCachedZeroTTL
	}
	return life, ttlCap, 0
}

// insert places e in its bucket under the shard's lock. The victim, in
// order: the entry with the same key, an empty slot, an expired entry, and
// else CLOCK's second chance among the eight ways (a way hit since the last
// pass keeps its place once). Then, if the shard is over its byte budget, a
// CLOCK hand over all the shard's slots evicts until it is not.
func (c *Packet) insert(e *packetEntry, now int64) {
	si, bi := c.locate(e.hash)
	sh, b := &c.shards[si], &c.buckets[bi]
	sh.mu.Lock()
	defer sh.mu.Unlock()

	victim, evict := -1, false
	for i := range ways {
		old := b.slots[i].Load()
		if old != nil && old.hash == e.hash && string(old.key()) == string(e.key()) {
			victim = i
			break
		}
	}
	for i := 0; i < ways && victim < 0; i++ {
		if b.slots[i].Load() == nil {
			victim = i
		}
	}
	for i := 0; i < ways && victim < 0; i++ {
		if b.slots[i].Load().expired(now) {
			victim = i
		}
	}
	if victim < 0 {
		victim, evict = secondChance(b, &sh.rotor), true
	}
	if old := b.slots[victim].Load(); old != nil {
		c.remove(sh, b, victim, old, evict)
	}
	cost := e.cost()
	for c.shardBytes > 0 && sh.bytes.Load()+cost > c.shardBytes && c.evictForBytes(si) {
	}
	b.slots[victim].Store(e)
	b.tags[victim].Store(tagOf(e.hash))
	sh.entries.Add(1)
	sh.bytes.Add(cost)
	sh.inserts.Add(1)
}

// secondChance picks a victim among a full bucket's ways: the first whose
// referenced bit is clear, clearing the bits it passes. Starting from a
// rotating way keeps the low ways from always going first.
func secondChance(b *packetBucket, rotor *uint32) int {
	start := int(*rotor % ways)
	*rotor++
	for range 2 {
		for j := range ways {
			i := (start + j) % ways
			e := b.slots[i].Load()
			if e.ref.Load() == 0 {
				return i
			}
			e.ref.Store(0)
		}
	}
	return start // unreachable: the first pass cleared every bit
}

// evictForBytes advances the shard's CLOCK hand to the next entry not hit
// since the hand last passed, and evicts it. False when the shard is empty.
func (c *Packet) evictForBytes(si int) bool {
	sh := &c.shards[si]
	first := si * int(c.bucketsPerShard)
	slots := int(c.bucketsPerShard) * ways
	for range 2 * slots {
		pos := sh.hand
		sh.hand = (sh.hand + 1) % slots
		b := &c.buckets[first+pos/ways]
		e := b.slots[pos%ways].Load()
		if e == nil {
			continue
		}
		if e.ref.Load() != 0 {
			e.ref.Store(0)
			continue
		}
		c.remove(sh, b, pos%ways, e, true)
		return true
	}
	return false
}

// remove empties a slot; the caller holds the shard's lock.
func (c *Packet) remove(sh *packetShard, b *packetBucket, i int, e *packetEntry, eviction bool) {
	b.slots[i].Store(nil)
	sh.entries.Add(-1)
	sh.bytes.Add(-e.cost())
	if eviction {
		sh.evictions.Add(1)
	}
}

// removeIf walks every slot, shard by shard under its lock, and removes the
// entries drop selects. Admin and housekeeping paths only.
func (c *Packet) removeIf(drop func(*packetEntry) bool) int {
	n := 0
	for si := range c.shards {
		sh := &c.shards[si]
		sh.mu.Lock()
		first := si * int(c.bucketsPerShard)
		for bi := first; bi < first+int(c.bucketsPerShard); bi++ {
			b := &c.buckets[bi]
			for i := range ways {
				if e := b.slots[i].Load(); e != nil && drop(e) {
					c.remove(sh, b, i, e, false)
					n++
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Sweep removes expired entries and returns how many. Expired entries are
// never served and are reused first by inserts into their bucket, so a sweep
// only returns their memory sooner and makes Entries exact; a server runs
// it every minute or so.
func (c *Packet) Sweep(now time.Time) int {
	nowNano := now.UnixNano()
	return c.removeIf(func(e *packetEntry) bool { return e.expired(nowNano) })
}

// Flush removes the answers for a name (lower-cased wire form), or with
// subtree for the name and every name under it, whatever their type and
// policy class; it returns how many (PowerDNS's wipe-cache).
func (c *Packet) Flush(name []byte, subtree bool) int {
	return c.removeIf(func(e *packetEntry) bool {
		n := keyName(e.key())
		if subtree {
			return dnswire.InZone(n, name)
		}
		return string(n) == string(name)
	})
}

// PacketStats are the packet cache's counters, cumulative since NewPacket
// except Entries and Bytes. Hits, Misses and Entries are PowerDNS's
// packetcache-hits, packetcache-misses and packetcache-entries.
type PacketStats struct {
	Hits, Misses       uint64
	Entries, Bytes     int64
	Inserts, Evictions uint64 // evictions make room; replacing an expired or same-key entry is not one
}

// Stats sums the shards' and the readers' counters; the sum is not a
// snapshot of one instant.
func (c *Packet) Stats() PacketStats {
	var s PacketStats
	c.readersMu.Lock()
	for _, rc := range c.readers {
		s.Hits += rc.hits.Load()
		s.Misses += rc.misses.Load()
	}
	c.readersMu.Unlock()
	for i := range c.shards {
		sh := &c.shards[i]
		s.Hits += sh.hits.Load()
		s.Misses += sh.misses.Load()
		s.Entries += sh.entries.Load()
		s.Bytes += sh.bytes.Load()
		s.Inserts += sh.inserts.Load()
		s.Evictions += sh.evictions.Load()
	}
	return s
}
