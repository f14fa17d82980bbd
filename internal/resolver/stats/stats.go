// Package stats holds the resolver's statistics: every name the
// PowerDNS-compatible statistics API lists, with the meaning PowerDNS
// Recursor 4.8 gives it.
//
// Place in the data flow: the resolver's query pipeline counts into a
// Shard of Counters (atomic adds on cache lines no other core writes);
// the statistics API (package resolver/api) reads them through Snapshot and
// Lookup, and Prometheus reads them through the collector New registers,
// under PowerDNS's /metrics names (pdns_recursor_<name>). Nothing here
// knows about DNS messages: the pipeline says what happened.
package stats

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// Config configures Counters. Every field is optional.
type Config struct {
	// Shards is how many independent sets of counters there are (rounded up
	// to a power of two, at most MaxShards); default GOMAXPROCS rounded up.
	// Each DNS worker takes its own (Counters.Shard) so that concurrent
	// queries never write the same cache line.
	Shards int
	// LatencyStatisticSize is how many answers qa-latency is averaged over,
	// PowerDNS's latency-statistic-size (default 10000).
	LatencyStatisticSize int
	// NetworkTimeout caps one latency sample for qa-latency, as PowerDNS
	// caps it at network-timeout (default 1500ms): a query that waited
	// minutes must not dominate the average.
	NetworkTimeout time.Duration
	// CacheEntries, NegCacheEntries and PacketCacheEntries report the sizes
	// of the resolver's caches when a statistic is read; nil reads 0. They
	// must be safe for concurrent use and cheap (an atomic load, a len).
	CacheEntries       func() uint64
	NegCacheEntries    func() uint64
	PacketCacheEntries func() uint64
	// Recursive reads a statistic the recursor keeps, by its PowerDNS
	// name (dnssec-validations, dnssec-result-*, nsspeeds-entries,
	// throttle-entries, failed-host-entries, throttled-out,
	// throttled-outqueries, nsset-invalidations); nil (forward mode)
	// reads 0. Same rules as
	// CacheEntries.
	Recursive func(name string) uint64
	// Registerer, when set, gets the Prometheus collector.
	Registerer prometheus.Registerer
	// Version labels pdns_recursor_info, as PowerDNS's /metrics does.
	Version string
	// Now is the clock uptime is measured with (default time.Now).
	Now func() time.Time
}

// MaxShards bounds Config.Shards.
const MaxShards = 4096

const (
	defaultLatencyStatisticSize = 10000
	defaultNetworkTimeout       = 1500 * time.Millisecond
	// cacheLine is the padding unit between shards: two 64-byte lines,
	// because x86's adjacent-line prefetcher pulls lines in pairs.
	cacheLine = 128
)

// Item is one statistic as the statistics API reports it: the value as a
// decimal string.
type Item struct {
	Name  string
	Value string
}

// Counters is the resolver's statistics. Writes go through a Shard; reads
// (Snapshot, Lookup, Sum, the collector) add the shards up.
type Counters struct {
	shards []Shard
	mask   uint

	start time.Time
	now   func() time.Time

	cacheEntries, negCacheEntries, packetCacheEntries func() uint64
	recursive                                         func(string) uint64

	// qa combines the shards' latency averages on read; see qaLatency.
	qa struct {
		sync.Mutex
		samples []uint64 // per shard, at the last read
		value   float64
	}
}

// Shard is one set of counters. Its methods are atomic adds (and, for
// qa-latency, one compare-and-swap) on the shard's own cache lines; a
// Shard is safe for concurrent use, and cheapest when one goroutine (a DNS
// worker) owns it.
type Shard struct {
	_ [cacheLine]byte // nothing of the previous shard on our lines

	v [numCounters]atomic.Uint64
	// decisions counts svcpf_resolver_decisions_total by verdict and
	// reason (Verdicts, Reasons: index v*len(Reasons)+r).
	decisions [numDecisions]atomic.Uint64
	// ewma is this shard's exponentially weighted average latency in µs
	// (float64 bits), PowerDNS's avgLatencyUsec.
	ewma atomic.Uint64

	// Read-only after New; on the same lines as the counters because the
	// same core reads them on every answer.
	alpha   float64
	capUsec int64

	_ [cacheLine - (int(numCounters)*8+numDecisions*8+8+8+8)%cacheLine]byte
}

// Verdicts and Reasons are the labels of svcpf_resolver_decisions_total,
// by the index Decided takes ("" at 0: no decision). The resolver keeps a
// decision beside a packet-cache entry by these indices too, so that a
// hit is counted without comparing strings.
var (
	Verdicts = [...]policy.Verdict{"", policy.VerdictAllow, policy.VerdictBlock, policy.VerdictRedirect}
	Reasons  = [...]policy.Reason{"", policy.ReasonFilteringOff, policy.ReasonAllowlist, policy.ReasonRPZ,
		policy.ReasonBlocklist, policy.ReasonPaused, policy.ReasonSafeSearch, policy.ReasonCategory,
		policy.ReasonNetwork, policy.ReasonDefault}
)

const numDecisions = len(Verdicts) * len(Reasons)

// Decided counts a decision (svcpf_resolver_decisions_total) by its
// verdict's and reason's index in Verdicts and Reasons; an index out of
// them, or 0 (none), is not counted.
func (s *Shard) Decided(verdict, reason uint8) {
	if verdict == 0 || reason == 0 || int(verdict) >= len(Verdicts) || int(reason) >= len(Reasons) {
		return
	}
	s.decisions[int(verdict)*len(Reasons)+int(reason)].Add(1)
}

// Decisions is svcpf_resolver_decisions_total for one verdict and reason,
// summed over the shards.
func (c *Counters) Decisions(verdict policy.Verdict, reason policy.Reason) uint64 {
	for v := range Verdicts {
		for r := range Reasons {
			if Verdicts[v] == verdict && Reasons[r] == reason {
				var n uint64
				for i := range c.shards {
					n += c.shards[i].decisions[v*len(Reasons)+r].Load()
				}
				return n
			}
		}
	}
	return 0
}

// New returns zeroed Counters and registers their collector on
// cfg.Registerer when set.
func New(cfg Config) (*Counters, error) {
	if cfg.Shards < 0 || cfg.Shards > MaxShards {
		return nil, fmt.Errorf("stats: Shards %d out of range 0..%d", cfg.Shards, MaxShards)
	}
	if cfg.LatencyStatisticSize < 0 {
		return nil, fmt.Errorf("stats: LatencyStatisticSize %d is negative", cfg.LatencyStatisticSize)
	}
	if cfg.NetworkTimeout < 0 {
		return nil, fmt.Errorf("stats: NetworkTimeout %v is negative", cfg.NetworkTimeout)
	}
	n := cfg.Shards
	if n == 0 {
		n = min(runtime.GOMAXPROCS(0), MaxShards)
	}
	n = 1 << bits.Len(uint(n-1)) // next power of two, so a hint is masked, not divided
	size := cfg.LatencyStatisticSize
	if size == 0 {
		size = defaultLatencyStatisticSize
	}
	timeout := cfg.NetworkTimeout
	if timeout == 0 {
		timeout = defaultNetworkTimeout
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	c := &Counters{
		shards: make([]Shard, n), mask: uint(n - 1),
		start: now(), now: now,
		cacheEntries: cfg.CacheEntries, negCacheEntries: cfg.NegCacheEntries, packetCacheEntries: cfg.PacketCacheEntries,
		recursive: cfg.Recursive,
	}
	for i := range c.shards {
		c.shards[i].alpha = 1 / float64(size)
		c.shards[i].capUsec = timeout.Microseconds()
	}
	c.qa.samples = make([]uint64, n)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newCollector(c, cfg.Version)); err != nil {
			return nil, fmt.Errorf("stats: register collector: %w", err)
		}
	}
	return c, nil
}

// Shard returns the shard for hint. Give each DNS worker its own index
// (resolved once, at the worker's start); a goroutine per query can pass
// anything that spreads concurrent queries, such as the query id.
func (c *Counters) Shard(hint uint) *Shard { return &c.shards[hint&c.mask] }

// Shards is the number of shards.
func (c *Counters) Shards() int { return len(c.shards) }

// Inc adds 1 to ctr.
func (s *Shard) Inc(ctr Counter) { s.v[ctr].Add(1) }

// Add adds n to ctr.
func (s *Shard) Add(ctr Counter, n uint64) { s.v[ctr].Add(n) }

// Dec takes 1 from an up-down counter (ConcurrentQueries, TCPClients).
// The shard may be another than the one Inc went to: only the sum counts.
func (s *Shard) Dec(ctr Counter) { s.v[ctr].Add(math.MaxUint64) }

// Question counts a query received from a client over t: questions, and
// tcp-questions (DNS over a TCP stream: TCP, DoT) or (over UDP from an
// IPv6 address) ipv6-questions, as PowerDNS counts them. A packet that
// fails to parse is not a question (ClientParseErrors), nor is a query
// refused by allow_from (UnauthorizedUDP, UnauthorizedTCP).
func (s *Shard) Question(t policy.Transport, ipv6 bool) {
	s.v[Questions].Add(1)
	switch {
	case t == policy.TransportTCP || t == policy.TransportDoT:
		s.v[TCPQuestions].Add(1)
	case t == policy.TransportUDP && ipv6:
		s.v[IPv6Questions].Add(1)
	}
}

// Replied counts a reply the resolver built (anything but a packet cache
// hit: record cache, forwarder, policy): its latency bucket (answers0-1 …
// answers-slow, PowerDNS's bounds, each inclusive), its rcode
// (noerror/nxdomain/servfail-answers) and a sample of qa-latency. took is
// from the query's arrival to the reply.
//
// PowerDNS's identity holds when the pipeline counts each question once
// as one of: Replied, PacketCacheHit, OverCapacityDrops, PolicyDrops —
// questions = answers* + packetcache-hits + over-capacity-drops + policy-drops.
func (s *Shard) Replied(rcode int, took time.Duration) {
	us := max(took.Microseconds(), 0)
	s.v[Answers0To1+bucket(us)].Add(1)
	s.rcode(rcode)
	s.latency(min(us, s.capUsec))
}

// PacketCacheHit counts a reply served from the packet cache:
// packetcache-hits and its rcode, and a zero-latency qa-latency sample,
// as PowerDNS does; the answers* buckets leave packet cache hits out.
func (s *Shard) PacketCacheHit(rcode int) {
	s.v[PacketCacheHits].Add(1)
	s.rcode(rcode)
	s.latency(0)
}

// The methods below are what the forwarder client counts; their names and
// parameters are those of upstream.Metrics, so a *Shard serves as one.

// OutQuery counts a query sent to a forwarder: all-outqueries, and
// tcp-outqueries or (over UDP to an IPv6 address) ipv6-outqueries, as
// PowerDNS counts them.
func (s *Shard) OutQuery(ipv6, tcp bool) {
	s.v[AllOutqueries].Add(1)
	if tcp {
		s.v[TCPOutqueries].Add(1)
	} else if ipv6 {
		s.v[IPv6Outqueries].Add(1)
	}
}

// Answer counts the round trip of a forwarder's answer in the auth4-* or
// auth6-* buckets by the forwarder's address family.
func (s *Shard) Answer(ipv6 bool, rtt time.Duration) {
	b := bucket(max(rtt.Microseconds(), 0))
	if ipv6 {
		s.v[Auth6Answers0To1+b].Add(1)
	} else {
		s.v[Auth4Answers0To1+b].Add(1)
	}
}

// Timeout counts an outgoing query that timed out: outgoing-timeouts and
// outgoing4- or outgoing6-timeouts.
func (s *Shard) Timeout(ipv6 bool) {
	s.v[OutgoingTimeouts].Add(1)
	if ipv6 {
		s.v[Outgoing6Timeouts].Add(1)
	} else {
		s.v[Outgoing4Timeouts].Add(1)
	}
}

// Unreachable counts unreachables.
func (s *Shard) Unreachable() { s.v[Unreachables].Add(1) }

// ResourceLimit counts resource-limits.
func (s *Shard) ResourceLimit() { s.v[ResourceLimits].Add(1) }

// UnexpectedPacket counts unexpected-packets.
func (s *Shard) UnexpectedPacket() { s.v[UnexpectedPackets].Add(1) }

// ServerParseError counts server-parse-errors.
func (s *Shard) ServerParseError() { s.v[ServerParseErrors].Add(1) }

// SpoofPrevent counts spoof-prevents.
func (s *Shard) SpoofPrevent() { s.v[SpoofPrevents].Add(1) }

// CaseMismatch counts case-mismatches.
func (s *Shard) CaseMismatch() { s.v[CaseMismatches].Add(1) }

// bucket is the offset of a latency in µs among the five answers
// buckets: PowerDNS's histogram puts x in the first bound ≥ x.
func bucket(us int64) Counter {
	switch {
	case us <= 1_000:
		return 0
	case us <= 10_000:
		return 1
	case us <= 100_000:
		return 2
	case us <= 1_000_000:
		return 3
	}
	return 4
}

func (s *Shard) rcode(rcode int) {
	switch rcode {
	case 0:
		s.v[NoErrorAnswers].Add(1)
	case 2:
		s.v[ServFailAnswers].Add(1)
	case 3:
		s.v[NXDomainAnswers].Add(1)
	}
}

// latency feeds one sample into the shard's average:
// avg = (1-α)·avg + α·x, α = 1/latency-statistic-size, as PowerDNS does.
// A CAS loop rather than PowerDNS's racy store, so no sample is lost; it
// does not loop when one worker owns the shard.
func (s *Shard) latency(us int64) {
	x := float64(us)
	for {
		old := s.ewma.Load()
		avg := math.Float64frombits(old)
		if s.ewma.CompareAndSwap(old, math.Float64bits(avg+s.alpha*(x-avg))) {
			return
		}
	}
}

// samples is how many latency samples the shard has taken.
func (s *Shard) samples() uint64 {
	n := s.v[PacketCacheHits].Load()
	for b := Answers0To1; b <= AnswersSlow; b++ {
		n += s.v[b].Load()
	}
	return n
}

// qaLatency combines the shards' averages, each weighted by the samples
// it took since the previous read: one shared average would put a write
// to one cache line from every core on every answer. For traffic spread
// over the shards this is PowerDNS's figure; a shard that went idle stops
// counting. With no sample since the previous read it answers that read's
// value. Reads are serialised by a mutex; the query path never takes it.
func (c *Counters) qaLatency(*reading) uint64 {
	c.qa.Lock()
	defer c.qa.Unlock()
	var total, sum float64
	for i := range c.shards {
		n := c.shards[i].samples()
		d := n - c.qa.samples[i]
		c.qa.samples[i] = n
		if d == 0 {
			continue
		}
		total += float64(d)
		sum += float64(d) * math.Float64frombits(c.shards[i].ewma.Load())
	}
	if total > 0 {
		c.qa.value = sum / total
	}
	return uint64(math.Round(c.qa.value))
}

// Sum is ctr added up over the shards; an up-down counter that is
// momentarily negative (a Dec read before its Inc) reads 0.
func (c *Counters) Sum(ctr Counter) uint64 {
	var n uint64
	for i := range c.shards {
		n += c.shards[i].v[ctr].Load()
	}
	if ctr == ConcurrentQueries || ctr == TCPClients {
		if int64(n) < 0 {
			return 0
		}
	}
	return n
}

// uptime is whole seconds since New, as PowerDNS's time(0) - startupTime.
func (c *Counters) uptime() uint64 {
	d := c.now().Sub(c.start)
	if d < 0 {
		return 0
	}
	return uint64(d / time.Second)
}

// reading caches, for one Snapshot, the process figures several
// statistics share, so that one read of /proc serves them all.
type reading struct {
	ru     *rusage
	udpErr *udpErrors
}

func (r *reading) rusage() rusage {
	if r.ru == nil {
		ru := readRusage()
		r.ru = &ru
	}
	return *r.ru
}

func (r *reading) snmp() udpErrors {
	if r.udpErr == nil {
		u := readUDPErrors()
		r.udpErr = &u
	}
	return *r.udpErr
}

func (c *Counters) value(d *def, r *reading) uint64 {
	switch d.kind {
	case kindCounter, kindUpDown:
		return c.Sum(d.counter)
	case kindRead:
		return d.read(c, r)
	}
	return 0
}

// values reads every statistic, in the API's order.
func (c *Counters) values() []uint64 {
	var r reading
	out := make([]uint64, len(defs))
	for i := range defs {
		out[i] = c.value(&defs[i], &r)
	}
	return out
}

// Snapshot returns every statistic of the API, in its order.
func (c *Counters) Snapshot() []Item {
	vals := c.values()
	out := make([]Item, len(defs))
	for i := range defs {
		out[i] = Item{Name: defs[i].name, Value: strconv.FormatUint(vals[i], 10)}
	}
	return out
}

// Lookup returns the statistic called name (exactly, as PowerDNS matches
// it), reading only what that statistic needs.
func (c *Counters) Lookup(name string) (Item, bool) {
	i := sort.Search(len(defs), func(i int) bool { return defs[i].name >= name })
	if i == len(defs) || defs[i].name != name {
		return Item{}, false
	}
	var r reading
	return Item{Name: name, Value: strconv.FormatUint(c.value(&defs[i], &r), 10)}, true
}
