package activity

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"log/slog"
	"math"
	"math/bits"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// The node's side, first half: the Recorder is the resolver's observer.
// For every answered query with a decision it either counts it (a plain
// allow) or encodes it as an event (everything else, and a sample of the
// plain allows) into memory of its own; the Publisher (publish.go) takes
// both from there into batches for the ACTIVITY stream. The resolver calls
// Answered on the goroutine that answered, so it must cost little and
// never wait: the Recorder's state is split into shards (a plain allow's
// by its subscriber's handle, or by its count key when it has none or its
// handle's place is taken; an event's by the client's address), each
// behind its own mutex that only the publisher's short swaps ever contend
// for; nothing in Answered does I/O, and a plain allow whose key was seen
// before in its interval allocates nothing.

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	// Config is the activity section (Validate is called).
	Config Config
	// Node is the node's name, written in every event and batch; required.
	Node string
	// Clock is the publisher's time, and the time of events and counts
	// from an Answered without its time (At zero; the resolver always
	// sets it, so that a query costs one reading of the clock, the
	// resolver's); default time.Now.
	Clock func() time.Time
	// Registerer gets the svcpf_activity_* metrics; nil: none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Shards splits the state; default 4 × GOMAXPROCS, rounded up to a
	// power of two.
	Shards int
}

// flushEvents is how many queued events wake the publisher before its
// next tick.
const flushEvents = 1000

// maxCountKeys bounds the distinct (subscriber, reason, category) keys
// counted in one interval, all shards together: beyond, a plain allow of
// a new key is not counted (svcpf_activity_uncounted_total{stage="limit"}).
// Four million keys hold a million subscribers with a few categories each.
const maxCountKeys = 4 << 20

// maxDenseHandles bounds the handles (sessions of the index) whose first
// key is counted in the dense arrays: 16 bytes each per interval, 128 MiB
// at most; a session in a slot past it is counted in the table.
const maxDenseHandles = 8 << 20

// maxHashCache bounds a shard's memo of client hashes (the HMAC costs
// about a microsecond; a busy client's is computed once a day).
const maxHashCache = 4096

// Recorder records answered queries (resolver.Observer).
type Recorder struct {
	node     string
	now      func() time.Time
	log      *slog.Logger
	iv       int64  // CountInterval in ns
	sample   uint32 // SampleAllowed
	clientIP string
	queueCap int64
	maxKeys  int // per shard
	maxDense int // handle indexes per shard counted in the dense array
	boot     uint64
	cfg      Config

	shards    []recShard
	mask      uint32
	shardBits uint8 // log2(len(shards))

	seed1, seed2 maphash.Seed

	// queued is the events in the shards' buffers, the queue Config.Queue
	// bounds (one counter for all shards: events are the minority of
	// queries, and the bound is one number).
	queued atomic.Int64
	// wake tells the publisher that flushEvents more events are queued.
	wake chan struct{}

	keyMu  sync.Mutex
	keyDay int64
	key    [32]byte

	// What the publisher counts, kept here so that every metric is
	// defined in one place (metrics.go's register).
	pub pubCounters
}

// pubCounters are the publisher's counters.
type pubCounters struct {
	bufferDropped   atomic.Uint64 // events evicted from the buffer
	bufferUncounted atomic.Uint64 // plain allows whose counts were evicted
	publishedEvents atomic.Uint64
	publishedCounts atomic.Uint64 // plain allows
	batches         atomic.Uint64
	publishErrors   atomic.Uint64
	bufferBytes     atomic.Int64
	bufferBatches   atomic.Int64
}

// recShard is one shard of a Recorder's state.
type recShard struct {
	_  [128]byte // nothing of the previous shard on our lines
	mu sync.Mutex

	// events holds the queued events, encoded (AppendEvent), ends the
	// offset after each.
	events []byte
	ends   []uint32

	sampleN uint32 // plain allows since the last sample

	// slots are the counts of two intervals: the current one's and the
	// previous one's, by the parity of the interval's index, so that the
	// publisher takes an interval that ended while the next is counted.
	slots [2]*countMap
	// stale are intervals whose slot came round again before the
	// publisher took them; it takes them next.
	stale []*countMap
	spare []*countMap // emptied maps the publisher gave back
	keys  int         // distinct keys in both slots and stale

	macDay   int64
	mac      hash.Hash
	macIn    [16]byte
	macOut   [sha256.Size]byte
	macCache map[netip.Addr][8]byte

	// Metrics, summed on scrape.
	kept, queueDropped, counted, limitUncounted, lateUncounted atomic.Uint64
}

// countMap counts one interval's plain allows by subscriber, reason and
// category. Nothing in it is a pointer the garbage collector must follow
// (a million subscribers' keys would be scanned at every cycle): keys are
// hashes, and the subscriber's and reason's strings are copied once per
// interval into arena.
//
// A subscriber's first key of the interval is counted in dense, by its
// handle (resolver.Subscriber.Handle: the session's slot in the index):
// one 16-byte place per subscriber of the shard, a compact array rather
// than a table of a million keys, so that the count of a subscriber seen
// before is an increment where the caches have a better chance, without
// the table's probe and second hash. The place keeps the key's 64-bit
// hash: another key of the same handle (another reason or category, or
// another session after the slot was reused) goes to idx.
type countMap struct {
	start int64        // the interval's start, Unix ns
	idx   countTable   // the counts of the keys not in dense
	dense []denseSlot  // by handle's index in the shard
	ents  []countEntry // each key's strings, in the order first seen
	arena []byte
}

// denseSlot is a handle's first key: its hash and count (0: none yet).
type denseSlot struct {
	h uint64
	n uint64
}

// empty says whether m counted nothing.
func (m *countMap) empty() bool { return len(m.ents) == 0 }

// n is e's count.
func (m *countMap) n(e *countEntry) uint64 {
	if e.dense != 0 {
		return m.dense[e.dense-1].n
	}
	return m.idx.get(e.h)
}

// countTable maps a count's key hash to its count: open addressing with
// linear probing, the count beside its key in one 24-byte slot, so that a
// plain allow of a key seen before costs one cache miss (a Go map's
// control word and slot are two) when a million subscribers' keys are far
// more than the caches hold. A slot whose count is 0 is empty (a key is
// stored with its first count). Half full at most.
type countTable struct {
	slots []countSlot
	n     int // keys
}

type countSlot struct {
	h countHash
	n uint64
}

const countTableMin = 1024

// find is the slot of h, or the empty slot where it goes.
func (t *countTable) find(h countHash) *countSlot {
	mask := uint64(len(t.slots) - 1)
	for i := h[1] & mask; ; i = (i + 1) & mask {
		if sl := &t.slots[i]; sl.n == 0 || sl.h == h {
			return sl
		}
	}
}

// get is h's count (0: none).
func (t *countTable) get(h countHash) uint64 {
	if sl := t.lookup(h); sl != nil {
		return sl.n
	}
	return 0
}

// lookup is the slot of h, nil when h is not there.
func (t *countTable) lookup(h countHash) *countSlot {
	if t.n == 0 {
		return nil
	}
	if sl := t.find(h); sl.n != 0 {
		return sl
	}
	return nil
}

// slot is the slot of h, made room for when h is new (its n is then 0:
// the caller stores the first count).
func (t *countTable) slot(h countHash) *countSlot {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	return t.find(h)
}

func (t *countTable) grow() {
	old := t.slots
	t.slots = make([]countSlot, max(2*len(old), countTableMin))
	for i := range old {
		if old[i].n != 0 {
			*t.find(old[i].h) = old[i]
		}
	}
}

// reset empties t, keeping its room for the next interval.
func (t *countTable) reset() {
	clear(t.slots)
	t.n = 0
}

// countHash names a count's key (subscriber, reason, category).
type countHash [2]uint64

// countEntry is one key: its strings are arena[off:], the subscriber's
// five then the reason, lens long; its count is in dense[dense-1], or in
// idx under h when dense is 0.
type countEntry struct {
	h     countHash
	off   uint32
	dense uint32
	lens  [6]uint16
	cat   uint16
}

func newCountMap() *countMap { return &countMap{} }

// strs are e's strings, views of m's arena.
func (m *countMap) strs(e *countEntry) (out [6]string) {
	off := int(e.off)
	for i, n := range e.lens {
		if n > 0 {
			out[i] = unsafe.String(&m.arena[off], int(n))
		}
		off += int(n)
	}
	return out
}

// NewRecorder validates cfg and registers the metrics.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if err := cfg.Config.Validate(); err != nil {
		return nil, err
	}
	if cfg.Node == "" || len(cfg.Node) > MaxStringLen {
		return nil, errors.New("activity: Node is required (at most 1024 bytes)")
	}
	if cfg.Shards < 0 || cfg.Shards > 1<<12 {
		return nil, fmt.Errorf("activity: Shards %d out of range 0..4096", cfg.Shards)
	}
	n := cfg.Shards
	if n == 0 {
		n = 4 * runtime.GOMAXPROCS(0)
	}
	n = 1 << bits.Len(uint(n-1))
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var boot [8]byte
	_, _ = rand.Read(boot[:]) // crypto/rand never fails on a supported system
	r := &Recorder{
		node: cfg.Node, now: cfg.Clock, log: cfg.Logger, iv: int64(cfg.Config.CountInterval),
		sample: uint32(min(cfg.Config.SampleAllowed, math.MaxUint32)), clientIP: cfg.Config.ClientIP,
		queueCap: int64(cfg.Config.Queue), maxKeys: max(maxCountKeys/n, 1024), maxDense: max(maxDenseHandles/n, 1024), cfg: cfg.Config,
		boot:   uint64(boot[0]) | uint64(boot[1])<<8 | uint64(boot[2])<<16 | uint64(boot[3])<<24 | uint64(boot[4])<<32 | uint64(boot[5])<<40 | uint64(boot[6])<<48 | uint64(boot[7])<<56,
		shards: make([]recShard, n), mask: uint32(n - 1), shardBits: uint8(bits.Len(uint(n - 1))), wake: make(chan struct{}, 1), keyDay: math.MinInt64,
		seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(),
	}
	for i := range r.shards {
		s := &r.shards[i]
		s.slots = [2]*countMap{newCountMap(), newCountMap()}
		s.macDay = math.MinInt64
	}
	if cfg.Registerer != nil {
		if err := r.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Config is the configuration the Recorder runs with.
func (r *Recorder) Config() Config { return r.cfg }

// Node is the node's name.
func (r *Recorder) Node() string { return r.node }

// shard is the shard of client's address: one client's queries, and so
// (mostly) one subscriber's counts, stay in one shard.
func (r *Recorder) shard(client netip.Addr) *recShard {
	var h uint64
	if client.Is4() || client.Is4In6() {
		b := client.As4()
		h = uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	} else {
		b := client.As16()
		for _, x := range b {
			h = h<<5 ^ h>>59 ^ uint64(x)
		}
	}
	h *= 0x9E3779B97F4A7C15
	return &r.shards[uint32(h>>32)&r.mask]
}

// plainAllow says whether a decision is counted rather than kept: an
// allow by anything but an allowlist or filtering turned off.
func plainAllow(d *resolver.Summary) bool {
	return d.Verdict == policy.VerdictAllow && d.Reason != policy.ReasonAllowlist && d.Reason != policy.ReasonFilteringOff
}

// Answered records a (resolver.Observer). A query without a decision (a
// FORMERR, a refusal for capacity…) is not recorded.
func (r *Recorder) Answered(a *resolver.Answered) {
	d := &a.Decision
	if d.Verdict == "" {
		return
	}
	now := a.At
	if now.IsZero() {
		now = r.now()
	}
	if !plainAllow(d) {
		s := r.shard(a.Client.Addr())
		s.mu.Lock()
		r.keep(s, a, now, false)
		s.mu.Unlock()
		return
	}
	// A plain allow goes to its handle's shard, where its subscriber's
	// first key of the interval is counted in the dense array; any other
	// key, and a key without a handle, to its count key's shard, so that
	// one key is counted in one shard only (but when its session moved to
	// another slot within the interval) and the publisher need not add
	// shards up.
	var k countKey
	k.fields = [6]string{a.Subscriber.Org, a.Subscriber.SessionID, a.Subscriber.Username, a.Subscriber.DeviceID,
		a.Subscriber.Location, string(d.Reason)}
	for i := range k.fields {
		k.fields[i] = k.fields[i][:min(len(k.fields[i]), MaxStringLen)]
	}
	if len(d.Categories) > 0 {
		k.cat = d.Categories[0]
	}
	var buf [256]byte
	kb := k.bytes(&buf)
	h0 := r.hash(&k, kb, r.seed1)
	var s *recShard
	if hd := a.Subscriber.Handle; hd != 0 {
		s = &r.shards[(hd-1)&r.mask]
		s.mu.Lock()
		if !r.countDense(s, &k, (hd-1)>>r.shardBits, h0, now) {
			s.mu.Unlock()
			s = nil
		}
	}
	if s == nil {
		h := countHash{h0, r.hash(&k, kb, r.seed2)}
		s = &r.shards[uint32(h[0]>>32)&r.mask]
		s.mu.Lock()
		r.count(s, &k, h, now)
	}
	if r.sample == 0 {
		s.mu.Unlock()
		return
	}
	if s.sampleN++; s.sampleN < r.sample {
		s.mu.Unlock()
		return
	}
	s.sampleN = 0
	r.keep(s, a, now, true)
	s.mu.Unlock()
}

// countKey is what a plain allow is counted under: the subscriber's five
// strings and the reason, and the first category.
type countKey struct {
	fields [6]string
	cat    uint16
}

// interval is the count map of now's interval in s, nil when its slot
// holds a later interval (counted late); s.mu is held.
func (r *Recorder) interval(s *recShard, now time.Time) *countMap {
	ns := now.UnixNano()
	start := ns - ns%r.iv
	if ns < 0 && ns%r.iv != 0 {
		start -= r.iv
	}
	m := s.slots[(start/r.iv)&1]
	if m.start != start {
		if m.start > start && !m.empty() {
			// The slot holds a later interval: this query's clock read is
			// older than an interval (a query that waited a long time for
			// the lock, a clock stepped back).
			s.lateUncounted.Add(1)
			return nil
		}
		if !m.empty() {
			// The publisher has not taken it yet (it takes an interval
			// within a quarter of the next): keep it for the publisher.
			s.stale = append(s.stale, m)
			m = s.newMap()
			s.slots[(start/r.iv)&1] = m
		}
		m.start = start
	}
	return m
}

// full says whether m can take no new key.
func (r *Recorder) full(s *recShard, m *countMap) bool {
	return s.keys >= r.maxKeys || len(m.arena) > math.MaxUint32-6*MaxStringLen
}

// countDense counts a plain allow of handle index i (in s) whose key
// hashes to h in the dense array, and says whether it did: false when the
// handle's place holds another key, which then goes to the table. s.mu is
// held.
func (r *Recorder) countDense(s *recShard, k *countKey, i uint32, h uint64, now time.Time) bool {
	m := r.interval(s, now)
	if m == nil {
		return true // counted late
	}
	if int(i) >= len(m.dense) {
		if int(i) >= r.maxDense || r.full(s, m) {
			return false // the table counts it if it holds the key, or counts it uncounted
		}
		m.growDense(i)
	}
	d := &m.dense[i]
	if d.n != 0 {
		if d.h != h {
			return false
		}
		// One increment for a subscriber's key seen before in the interval.
		d.n++
		s.counted.Add(1)
		return true
	}
	if r.full(s, m) {
		return false
	}
	d.h, d.n = h, 1
	s.counted.Add(1)
	m.add(k, countHash{h}, i+1)
	s.keys++
	return true
}

// growDense makes room in m.dense for index i.
func (m *countMap) growDense(i uint32) {
	n := max(2*len(m.dense), int(i)+1, 1024)
	if n <= cap(m.dense) {
		m.dense = m.dense[:n] // cleared when given back
		return
	}
	d := make([]denseSlot, n)
	copy(d, m.dense)
	m.dense = d
}

// add records a new key's strings (the resolver's views, copied once).
func (m *countMap) add(k *countKey, h countHash, dense uint32) {
	e := countEntry{h: h, off: uint32(len(m.arena)), cat: k.cat, dense: dense}
	for i, f := range k.fields {
		e.lens[i] = uint16(len(f))
		m.arena = append(m.arena, f...)
	}
	m.ents = append(m.ents, e)
}

// count counts a plain allow in the table; s.mu is held.
func (r *Recorder) count(s *recShard, k *countKey, h countHash, now time.Time) {
	m := r.interval(s, now)
	if m == nil {
		return
	}
	full := r.full(s, m)
	var sl *countSlot
	if full {
		if sl = m.idx.lookup(h); sl == nil {
			s.limitUncounted.Add(1)
			return
		}
	} else {
		sl = m.idx.slot(h)
	}
	// One table probe for a key seen before in the interval.
	sl.n++
	s.counted.Add(1)
	if sl.n > 1 {
		return
	}
	sl.h = h
	m.idx.n++
	m.add(k, h, 0)
	s.keys++
}

// bytes is the key's bytes (each string after its length, then the
// category) in buf, nil when they do not fit.
func (k *countKey) bytes(buf *[256]byte) []byte {
	n := 2
	for _, f := range k.fields {
		n += 2 + len(f)
	}
	if n > len(buf) {
		return nil
	}
	b := buf[:0]
	for _, f := range k.fields {
		b = append(b, byte(len(f)), byte(len(f)>>8))
		b = append(b, f...)
	}
	return append(b, byte(k.cat), byte(k.cat>>8))
}

// hash is the 64-bit hash of a count's key with seed: of kb, its bytes,
// when they fit a buffer (one call), else of the strings in turn. A
// table's key is the hashes with both seeds (128 bits); a dense place
// compares the first only, with the few keys of one handle.
func (r *Recorder) hash(k *countKey, kb []byte, seed maphash.Seed) uint64 {
	if kb != nil {
		return maphash.Bytes(seed, kb)
	}
	var h maphash.Hash
	h.SetSeed(seed)
	for _, f := range k.fields {
		_ = h.WriteByte(byte(len(f)))
		_ = h.WriteByte(byte(len(f) >> 8))
		_, _ = h.WriteString(f)
	}
	_ = h.WriteByte(byte(k.cat))
	_ = h.WriteByte(byte(k.cat >> 8))
	return h.Sum64()
}

// newMap is an emptied count map, reused when the publisher gave one back.
func (s *recShard) newMap() *countMap {
	if n := len(s.spare); n > 0 {
		m := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return m
	}
	return newCountMap()
}

// keep encodes a as an event into the shard's queue, or drops it when the
// queue is full; s.mu is held.
func (r *Recorder) keep(s *recShard, a *resolver.Answered, now time.Time, sampled bool) {
	q := r.queued.Add(1)
	if q > r.queueCap {
		r.queued.Add(-1)
		s.queueDropped.Add(1)
		return
	}
	if q%flushEvents == 0 {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	var cbuf [64]byte
	d := &a.Decision
	us := a.Took.Microseconds()
	e := Event{Time: now, Node: r.node, Org: a.Subscriber.Org, SessionID: a.Subscriber.SessionID,
		Username: a.Subscriber.Username, DeviceID: a.Subscriber.DeviceID, Location: a.Subscriber.Location,
		Client: r.client(s, cbuf[:0], a.Client.Addr(), now), QName: a.Name, QType: a.Type, Transport: a.Transport.String(),
		Verdict: string(d.Verdict), Action: string(d.Action), Reason: string(d.Reason), Rule: d.Rule, Categories: d.Categories,
		Rcode: a.Rcode, Cached: a.Cached.String(), LatencyUS: uint32(min(max(us, 0), math.MaxUint32)), Policy: d.Policy,
		Sampled: sampled}
	s.events = AppendEvent(s.events, &e)
	s.ends = append(s.ends, uint32(len(s.events)))
	s.kept.Add(1)
}

// client is the client's address as Config.ClientIP keeps it, appended to
// buf and returned as a view of it (AppendEvent copies it).
func (r *Recorder) client(s *recShard, buf []byte, addr netip.Addr, now time.Time) string {
	addr = addr.Unmap()
	switch r.clientIP {
	case ClientFull:
		buf = addr.AppendTo(buf)
	case ClientTruncate:
		bits := 48
		if addr.Is4() {
			bits = 24
		}
		p, _ := addr.Prefix(bits)
		buf = p.AppendTo(buf)
	case ClientHash:
		sum := s.hash(r, addr, now)
		buf = append(buf, "h:"...)
		buf = hex.AppendEncode(buf, sum[:])
	default:
		return ""
	}
	if len(buf) == 0 {
		return ""
	}
	return unsafe.String(&buf[0], len(buf))
}

// hash is the first 8 bytes of HMAC-SHA-256(the day's key, addr's 16
// bytes); s.mu is held.
func (s *recShard) hash(r *Recorder, addr netip.Addr, now time.Time) [8]byte {
	day := now.UTC().Unix() / 86400
	if now.Unix() < 0 {
		day = (now.Unix() - 86399) / 86400
	}
	if day != s.macDay {
		var key [32]byte
		key, day = r.dayKey(day)
		s.mac, s.macDay = hmac.New(sha256.New, key[:]), day
		clear(key[:])
		if s.macCache == nil {
			s.macCache = make(map[netip.Addr][8]byte)
		}
		clear(s.macCache)
	}
	if v, ok := s.macCache[addr]; ok {
		return v
	}
	s.macIn = addr.As16()
	s.mac.Reset()
	s.mac.Write(s.macIn[:])
	sum := s.mac.Sum(s.macOut[:0])
	var v [8]byte
	copy(v[:], sum)
	if len(s.macCache) >= maxHashCache {
		clear(s.macCache)
	}
	s.macCache[addr] = v
	return v
}

// dayKey is the hash key of day (or of a later day whose key was drawn
// already: a shard late across midnight does not bring yesterday's back),
// drawn from crypto/rand when the day's first event asks; only the
// current day's key is kept, in memory only.
func (r *Recorder) dayKey(day int64) ([32]byte, int64) {
	r.keyMu.Lock()
	defer r.keyMu.Unlock()
	if day > r.keyDay {
		_, _ = rand.Read(r.key[:])
		r.keyDay = day
	}
	return r.key, r.keyDay
}

// taken is what the publisher took from the shards: encoded events and
// their ends, and intervals of counts.
type taken struct {
	events []byte
	ends   []uint32
	counts []*countMap
}

// takeEvents moves every shard's queued events into t (whose buffers are
// given to the shards for their next events).
func (r *Recorder) takeEvents(t *taken) {
	t.events, t.ends = t.events[:0], t.ends[:0]
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if len(s.ends) == 0 {
			s.mu.Unlock()
			continue
		}
		base := uint32(len(t.events))
		t.events = append(t.events, s.events...)
		for _, e := range s.ends {
			t.ends = append(t.ends, base+e)
		}
		n := len(s.ends)
		s.events, s.ends = s.events[:0], s.ends[:0]
		s.mu.Unlock()
		r.queued.Add(-int64(n))
	}
}

// takeCounts moves into t the count maps of intervals that ended before
// until (Unix ns; all of them when all is set).
func (r *Recorder) takeCounts(t *taken, until int64, all bool) {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		for _, m := range s.stale {
			t.counts = append(t.counts, m)
			s.keys -= len(m.ents)
		}
		s.stale = s.stale[:0]
		for j, m := range s.slots {
			if !m.empty() && (all || m.start+r.iv <= until) {
				t.counts = append(t.counts, m)
				s.keys -= len(m.ents)
				s.slots[j] = s.newMap()
			}
		}
		s.mu.Unlock()
	}
}

// giveBack empties count maps the publisher is done with and returns them
// to their shards' spares (any shard: they are all alike).
func (r *Recorder) giveBack(ms []*countMap) {
	for i, m := range ms {
		m.idx.reset()
		clear(m.dense)
		m.ents, m.arena, m.start, m.dense = m.ents[:0], m.arena[:0], 0, m.dense[:0]
		s := &r.shards[uint32(i)&r.mask]
		s.mu.Lock()
		if len(s.spare) < 4 {
			s.spare = append(s.spare, m)
		}
		s.mu.Unlock()
	}
}
