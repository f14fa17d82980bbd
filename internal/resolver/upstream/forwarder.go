package upstream

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Forwarder selection keeps, per forwarder, a smoothed RTT (an exponentially
// weighted moving average, as PowerDNS keeps its "NS speeds") and a rest
// period after failures. Each Exchange tries the healthy forwarders first —
// fastest first (StrategyFastest) or in the configured order
// (StrategyOrdered) — then the failing ones, soonest back first. A failing
// forwarder is not handed to a client query as a probe: a background probe
// (set.go) brings it back. So a dead forwarder costs client queries one
// timeout when it starts failing, not one now and then, and a query is
// never refused for want of a forwarder.
const (
	// srttHalfLife makes an unused forwarder's RTT estimate shrink, halving
	// every 10 s, so that a slower forwarder is measured again now and then
	// instead of being judged once forever.
	srttHalfLife = 10 * time.Second
	// firstRest and maxRest bound the rest after consecutive failures:
	// 1 s, doubling per failure, at most 30 s.
	firstRest = time.Second
	maxRest   = 30 * time.Second
)

// forwarder is one configured upstream: its address, its health and its
// idle connections.
type forwarder struct {
	addr netip.AddrPort
	ipv6 bool
	c    *Client // for its probes; nil in unit tests of order

	mu         sync.Mutex
	srtt       time.Duration // smoothed RTT as of updated; zero until measured
	updated    time.Time
	fails      int       // consecutive failed attempts (probes included); > 0: down
	restUntil  time.Time // when the next probe goes out
	probing    bool      // a probe is armed or in flight
	probeTimer *time.Timer
	retired    bool // left out by SetForwarders, or the client closed

	answers, failures, timeouts, probes atomic.Uint64 // ForwarderStatus

	udp connPool
	tcp connPool
}

// decayedSRTT is the RTT estimate at now: srtt halved per srttHalfLife
// since it was last updated. f.mu must be held.
func (f *forwarder) decayedSRTT(now time.Time) time.Duration {
	if f.srtt == 0 {
		return 0
	}
	elapsed := now.Sub(f.updated)
	if elapsed <= 0 {
		return f.srtt
	}
	return time.Duration(float64(f.srtt) * math.Exp2(-float64(elapsed)/float64(srttHalfLife)))
}

// answered records a reply received rtt after the query was sent.
func (f *forwarder) answered(now time.Time, rtt time.Duration) {
	f.answers.Add(1)
	f.revive(now, rtt)
}

// revive records an answer (a query's or a probe's): the forwarder is up.
func (f *forwarder) revive(now time.Time, rtt time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srtt == 0 || f.fails > 0 {
		// The first measure, or the first since a failure penalised the
		// estimate: the penalty said nothing about this forwarder's speed.
		f.srtt = rtt
	} else {
		f.srtt = (f.decayedSRTT(now)*7 + rtt) / 8
	}
	f.updated = now
	f.fails = 0
	f.restUntil = time.Time{}
}

// failed records a failed attempt and sets the forwarder to rest, longer
// after each failure in a row. After a timeout or a network error the
// estimate becomes at least penalty (the attempt timeout, as PowerDNS
// charges a second); after a failure rcode (SERVFAIL, REFUSED…) penalty is
// zero: the forwarder answered, as fast as ever, and is tried first again
// once its rest is over.
func (f *forwarder) failed(now time.Time, penalty time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.srtt = max(f.decayedSRTT(now), penalty)
	f.updated = now
	f.fails++
	rest := firstRest << min(f.fails-1, 5)
	f.restUntil = now.Add(min(rest, maxRest))
	f.scheduleProbe(now)
}

// order fills dst with the forwarders in the order an Exchange starting at
// now tries them: the healthy ones first, by the strategy (fastest: the
// smallest smoothed RTT first; ordered: as configured; ties in the
// configured order), then the failing ones, soonest back first (their
// probes decide when they are healthy again).
func order(now time.Time, fwds []*forwarder, s Strategy, dst []*forwarder) []*forwarder {
	type candidate struct {
		f    *forwarder
		down bool
		pos  int           // place in the configured order
		key  time.Duration // healthy: srtt (fastest) or 0 (ordered); down: time until back
	}
	var stack [8]candidate
	cands := stack[:0]
	for i, f := range fwds {
		f.mu.Lock()
		c := candidate{f: f, pos: i}
		switch {
		case f.fails > 0 || now.Before(f.restUntil):
			c.down, c.key = true, max(f.restUntil.Sub(now), 0)
		case s == StrategyFastest:
			c.key = f.decayedSRTT(now)
		}
		f.mu.Unlock()
		cands = append(cands, c)
	}
	less := func(a, b candidate) bool {
		if a.down != b.down {
			return !a.down
		}
		if a.key != b.key {
			return a.key < b.key
		}
		return a.pos < b.pos
	}
	// Insertion sort: a handful of forwarders, and no allocation.
	for i := 1; i < len(cands); i++ {
		for j := i; j > 0 && less(cands[j], cands[j-1]); j-- {
			cands[j], cands[j-1] = cands[j-1], cands[j]
		}
	}
	for _, c := range cands {
		dst = append(dst, c.f)
	}
	return dst
}

// pooledConn is a connection to one forwarder, used by one query at a time.
type pooledConn struct {
	net.Conn
	uses      int
	idleSince time.Time
	raw       rawIO // UDP: the datagram system calls (rawio_*.go)
}

// connPool holds one forwarder's idle connections of one transport. It is
// a stack: the most recently used connection goes out first (warm, least
// likely closed by the other end), and the oldest idle ones, at the bottom,
// are closed once idle too long.
type connPool struct {
	mu     sync.Mutex
	idle   []*pooledConn
	closed bool
}

// get returns an idle connection used within idleTimeout, or nil.
func (p *connPool) get(now time.Time, idleTimeout time.Duration) *pooledConn {
	p.mu.Lock()
	n := len(p.idle)
	if n == 0 {
		p.mu.Unlock()
		return nil
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	var stale []*pooledConn
	if now.Sub(c.idleSince) >= idleTimeout {
		// The top is the freshest: when it is stale, so are all the others.
		stale = append(p.idle, c)
		p.idle = nil
		c = nil
	}
	p.mu.Unlock()
	for _, s := range stale {
		s.Close()
	}
	return c
}

// put keeps c for the next query, or closes it when the pool is closed or
// holds maxIdle already. Connections idle for idleTimeout are closed on
// the way, so an idle client does not hold sockets open for long without
// a janitor goroutine.
func (p *connPool) put(c *pooledConn, now time.Time, maxIdle int, idleTimeout time.Duration) {
	c.idleSince = now
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdle {
		p.mu.Unlock()
		c.Close()
		return
	}
	stale := 0
	for stale < len(p.idle) && now.Sub(p.idle[stale].idleSince) >= idleTimeout {
		stale++
	}
	var toClose []*pooledConn
	if stale > 0 {
		toClose = make([]*pooledConn, stale)
		copy(toClose, p.idle[:stale])
		n := copy(p.idle, p.idle[stale:])
		clear(p.idle[n:])
		p.idle = p.idle[:n]
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	for _, s := range toClose {
		s.Close()
	}
}

// close closes the idle connections and makes put close the ones still in
// use when they come back.
func (p *connPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}
