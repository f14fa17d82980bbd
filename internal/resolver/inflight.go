package resolver

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
)

// clientKey is whom a query in flight is counted against: its source
// address today. A client id (DNS-over-HTTPS path, TLS SNI) can join it as
// another field when those transports arrive; the limiter needs only a
// comparable key and its shard.
type clientKey struct {
	addr netip.Addr
}

// shard spreads keys over the limiter's locks (Fibonacci hashing: the
// product's top bits depend on every bit of the address). An attacker
// choosing addresses that share a shard costs only lock contention among
// them: each shard's map is the runtime's, with its own random seed.
func (k clientKey) shard() uint {
	b := k.addr.As16()
	h := (binary.BigEndian.Uint64(b[:8]) ^ binary.BigEndian.Uint64(b[8:])) * 0x9e3779b97f4a7c15
	return uint(h >> (64 - inFlightShardBits))
}

// inFlightShards is the number of locks over the per-client counters:
// enough that the slow path's goroutines, ending on every core, rarely
// meet on one.
const (
	inFlightShardBits = 5
	inFlightShards    = 1 << inFlightShardBits
)

// maxSlowInFlight bounds the queries on the slow path at once; more are
// refused and counted (over-capacity-drops), as PowerDNS does past
// max-mthreads, so that a flood of misses cannot exhaust memory.
const maxSlowInFlight = 8192

// inFlight bounds the queries on the slow path (a UDP packet-cache miss
// from the moment the reader hands it on, and every TCP query once read
// and parsed, until its reply is written): at most maxTotal in all, as
// PowerDNS's max-mthreads bounds its own, and at most perClient for one
// client, so that a client whose queries the forwarders never answer
// holds perClient slots and no more, instead of the slots (and the
// forwarder client's in-flight queries) everyone else needs. A packet-cache
// hit never comes here.
//
// Memory is bounded: a client's counter exists while it has a query in
// flight and is deleted when its last one ends, so the maps together hold
// at most maxTotal entries.
type inFlight struct {
	maxTotal, perClient int64
	total               atomic.Int64
	shards              [inFlightShards]inFlightShard
}

type inFlightShard struct {
	mu sync.Mutex
	n  map[clientKey]int64
	// Padding to the next shard: a shard's lock and map header are
	// written by every query of its clients, on whatever core it ends.
	_ [128 - 16]byte
}

func newInFlight(maxTotal, perClient int) *inFlight {
	l := &inFlight{maxTotal: int64(maxTotal), perClient: int64(perClient)}
	for i := range l.shards {
		l.shards[i].n = make(map[clientKey]int64)
	}
	return l
}

// acquire takes a slot for k; false when the slow path is full or k holds
// perClient slots already. A true must be followed by one release(k).
func (l *inFlight) acquire(k clientKey) bool {
	if l.total.Add(1) > l.maxTotal {
		l.total.Add(-1)
		return false
	}
	s := &l.shards[k.shard()]
	s.mu.Lock()
	n := s.n[k]
	if n >= l.perClient {
		s.mu.Unlock()
		l.total.Add(-1)
		return false
	}
	s.n[k] = n + 1
	s.mu.Unlock()
	return true
}

// release gives back a slot acquire gave k.
func (l *inFlight) release(k clientKey) {
	s := &l.shards[k.shard()]
	s.mu.Lock()
	if n := s.n[k]; n > 1 {
		s.n[k] = n - 1
	} else {
		delete(s.n, k)
	}
	s.mu.Unlock()
	l.total.Add(-1)
}
