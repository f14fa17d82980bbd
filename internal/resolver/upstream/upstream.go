package upstream

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Defaults for the zero fields of Config.
const (
	DefaultTimeout     = 1500 * time.Millisecond
	DefaultMaxTime     = 4 * time.Second
	DefaultRounds      = 2
	DefaultUDPSize     = 1232 // DNS Flag Day 2020: fits the common 1280-byte IPv6 MTU without fragments
	DefaultMaxUDPUses  = 64
	DefaultMaxIdleUDP  = 1024 // see Config.MaxIdleUDP
	DefaultMaxIdleTCP  = 8
	DefaultIdleTimeout = 10 * time.Second
	DefaultMaxInFlight = 2048 // PowerDNS's max-mthreads default: as many queries may wait on the network at once
	DefaultNearMissMax = 1    // PowerDNS's spoof-nearmiss-max default since 4.5
)

// MaxForwarders bounds Config.Forwarders: an Exchange tracks its forwarders
// in one 64-bit word.
const MaxForwarders = 64

// Errors returned by Exchange; test with errors.Is.
var (
	// ErrAllFailed: no forwarder gave a usable answer within the bounds
	// (every attempt timed out, failed, was refused, or answered SERVFAIL,
	// REFUSED, FORMERR, NOTIMP, BADVERS or any rcode but NOERROR, NXDOMAIN
	// and YXDOMAIN: isForwarderFailure). The caller answers SERVFAIL.
	ErrAllFailed = errors.New("upstream: no forwarder answered")
	// ErrBadQuery: the query cannot be forwarded (not exactly one
	// question, not a standard query, or a name that does not pack). The
	// caller answers FORMERR or NOTIMP.
	ErrBadQuery = errors.New("upstream: query cannot be forwarded")
	// ErrClosed: Exchange after Close.
	ErrClosed = errors.New("upstream: client closed")
)

// Config configures a Client. Zero fields take the defaults above.
type Config struct {
	// Forwarders are the recursive resolvers queries are sent to, the
	// resolver's `forwarders` config key. At least one, at most
	// MaxForwarders, no duplicates, no unspecified address or zero port.
	Forwarders []netip.AddrPort
	// Strategy is the order an Exchange asks the forwarders in (the
	// resolver's `forwarder_strategy`): StrategyFastest (the zero value)
	// or StrategyOrdered. Either way a failing forwarder goes after the
	// healthy ones until a background probe finds it answering again.
	Strategy Strategy
	// Timeout bounds one attempt: waiting for one forwarder's answer over
	// UDP, or, after a truncated one, over TCP (connecting included).
	Timeout time.Duration
	// MaxTime bounds a whole Exchange, retries included: past it Exchange
	// returns ErrAllFailed. A context deadline that comes sooner wins.
	MaxTime time.Duration
	// Rounds is how many times an Exchange may go through the forwarders
	// (each round tries each once, the fastest first). Later rounds skip
	// forwarders that answered with a failure rcode: asking again would
	// only repeat it.
	Rounds int
	// UDPSize is the EDNS0 UDP payload size advertised to forwarders;
	// answers bigger than this come truncated and are fetched over TCP.
	// At least 512.
	UDPSize uint16
	// MaxUDPUses is how many queries one UDP socket carries before it is
	// closed, so that source ports keep changing (a socket is also closed
	// after any timeout, error or stray packet).
	MaxUDPUses int
	// MaxIdleUDP and MaxIdleTCP bound the idle sockets kept per forwarder.
	// MaxIdleUDP's default is high (half of MaxInFlight's): under a burst
	// of misses the queries in flight rise and fall by hundreds, and with
	// room for 64 idle sockets most of those that came back were closed
	// only for new ones to be made a moment later (socket, connect,
	// epoll registration and close: about a twentieth of a miss's CPU in
	// bench/resolver.sh's miss phase). An idle socket costs a file
	// descriptor and is closed after IdleTimeout; its port was the
	// kernel's random pick, and MaxUDPUses still rotates it.
	MaxIdleUDP int
	MaxIdleTCP int
	// IdleTimeout is how long an idle connection is kept for reuse. It is
	// below the idle timeouts of common resolvers' TCP servers (Unbound,
	// BIND: 30 s; RFC 7766 suggests several seconds), so that a kept
	// connection is seldom found closed by the other end.
	IdleTimeout time.Duration
	// MaxInFlight bounds the queries waiting on forwarders at once, hence
	// the sockets open; a query finding no slot before its deadline fails
	// (counted as resource-limits).
	MaxInFlight int
	// NearMissMax is PowerDNS's spoof-nearmiss-max: an answer that arrives
	// after more than this many replies to the same question with a wrong
	// id is dropped as a likely spoof, and the attempt fails. Negative
	// turns the check off; zero means the default, 1.
	NearMissMax int
	// Metrics receives the counts; nil counts nothing.
	Metrics Metrics
	// Authoritative: the forwarders are a zone's authoritative servers,
	// not recursive resolvers (a forward zone without recurse). Queries go
	// out without RD, and only an answer with AA set is taken: a referral
	// or any other answer without AA says the server is not the authority
	// for that name, and the next forwarder is asked (the server's health
	// is not charged: it answered). Probes ask ProbeName's SOA, which an
	// authority answers, instead of ". NS", which it refuses.
	Authoritative bool
	// ProbeName is the name a background probe asks about: "" is the root
	// (". NS"); a forward zone's client asks its zone (ProbeName SOA), as
	// a server that serves one zone may refuse the root.
	ProbeName string
}

// Client forwards queries to the configured forwarders. It is safe for
// concurrent use; each in-flight query has its own socket.
type Client struct {
	// set is the forwarders and the strategy; SetForwarders swaps it
	// whole, and an Exchange reads it once, at its start.
	set         atomic.Pointer[forwarderSet]
	setMu       sync.Mutex // serialises SetForwarders
	timeout     time.Duration
	maxTime     time.Duration
	rounds      int
	udpSize     uint16
	maxUDPUses  int
	maxIdleUDP  int
	maxIdleTCP  int
	idleTimeout time.Duration
	nearMissMax int
	metrics     Metrics
	auth        bool   // Config.Authoritative
	probeName   string // Config.ProbeName, as a FQDN; "" the root

	slots  chan struct{}
	bufs   sync.Pool // *[]byte of bufLen: the query packet, then the UDP read buffer
	bufLen int
	closed atomic.Bool
}

// queryArea is the front of an Exchange's buffer holding the packed query
// after two bytes for the TCP length prefix. A query (one question of at
// most 255 bytes and our OPT record) is under 300 bytes.
const queryArea = 2 + 510

// New validates cfg and returns a Client. It opens no socket: those are
// made on demand, per forwarder.
func New(cfg Config) (*Client, error) {
	c := &Client{
		timeout:     orDefault(cfg.Timeout, DefaultTimeout),
		maxTime:     orDefault(cfg.MaxTime, DefaultMaxTime),
		rounds:      orDefault(cfg.Rounds, DefaultRounds),
		udpSize:     orDefault(cfg.UDPSize, DefaultUDPSize),
		maxUDPUses:  orDefault(cfg.MaxUDPUses, DefaultMaxUDPUses),
		maxIdleUDP:  orDefault(cfg.MaxIdleUDP, DefaultMaxIdleUDP),
		maxIdleTCP:  orDefault(cfg.MaxIdleTCP, DefaultMaxIdleTCP),
		idleTimeout: orDefault(cfg.IdleTimeout, DefaultIdleTimeout),
		nearMissMax: orDefault(cfg.NearMissMax, DefaultNearMissMax),
		metrics:     cfg.Metrics,
		auth:        cfg.Authoritative,
	}
	if cfg.ProbeName != "" {
		c.probeName = dns.Fqdn(cfg.ProbeName)
		if _, ok := dns.IsDomainName(c.probeName); !ok {
			return nil, fmt.Errorf("upstream: probe name %q is not a domain name", cfg.ProbeName)
		}
	}
	if c.metrics == nil {
		c.metrics = NopMetrics{}
	}
	maxInFlight := orDefault(cfg.MaxInFlight, DefaultMaxInFlight)
	switch {
	case c.timeout < 0, c.maxTime < 0, c.rounds < 0, c.maxUDPUses < 0, c.maxIdleUDP < 0,
		c.maxIdleTCP < 0, c.idleTimeout < 0, maxInFlight < 0:
		return nil, errors.New("upstream: negative timeout, rounds, uses, idle or in-flight limit")
	case c.timeout > c.maxTime:
		return nil, fmt.Errorf("upstream: timeout %v longer than max time %v", c.timeout, c.maxTime)
	case c.udpSize < dns.MinMsgSize:
		return nil, fmt.Errorf("upstream: UDP size %d under %d", c.udpSize, dns.MinMsgSize)
	}
	set, err := c.newSet(cfg.Forwarders, cfg.Strategy, nil)
	if err != nil {
		return nil, err
	}
	c.set.Store(set)
	c.slots = make(chan struct{}, maxInFlight)
	// A forwarder may answer up to our advertised size over UDP; 4 KiB at
	// least, so that one overstepping a small advertised size a little is
	// still read. A datagram longer than the buffer arrives cut and is
	// ignored as unparsable.
	c.bufLen = queryArea + max(int(c.udpSize), 4096)
	c.bufs.New = func() any {
		b := make([]byte, c.bufLen)
		return &b
	}
	return c, nil
}

func orDefault[T int | uint16 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Close closes the idle connections; queries in flight finish and close
// theirs. Exchange then returns ErrClosed.
func (c *Client) Close() error {
	c.closed.Store(true)
	for _, f := range c.set.Load().fwds {
		f.retire()
	}
	return nil
}

// Exchange forwards q and returns the forwarder's answer, or an error that
// Is ErrAllFailed within MaxTime (or the context's deadline, if sooner) when
// no forwarder gave one. q is not modified.
//
// The answer carries q's id and q's question exactly (letter case
// included), whatever case the forwarder echoed. Its rcode is NOERROR,
// NXDOMAIN or YXDOMAIN: any other (SERVFAIL, REFUSED, FORMERR, NOTIMP,
// BADVERS, …) means that forwarder failed, and the next one is asked.
// Its OPT record, if any, is the forwarder's, answering our EDNS (payload
// size Config.UDPSize, the client's DO bit): the caller rebuilds EDNS and
// sizes the reply for its own client.
//
// Each attempt sends a fresh random id from a socket of its own, and the
// reply must echo id and question (see checkReply); anything else read
// meanwhile is ignored, counted, and the wait goes on until the attempt's
// deadline. A truncated UDP answer is asked again over TCP from the same
// forwarder, and the rest of this Exchange stays on TCP.
func (c *Client) Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if q == nil || len(q.Question) != 1 || q.Response || q.Opcode != dns.OpcodeQuery {
		return nil, ErrBadQuery
	}
	start := time.Now()
	deadline := start.Add(c.maxTime)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.acquire(ctx, deadline); err != nil {
		return nil, err
	}
	defer func() { <-c.slots }()

	bufp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bufp)
	buf := *bufp
	packed, err := appendQuery(buf[2:queryArea], q, c.udpSize, !c.auth)
	if err != nil {
		return nil, badQuery(err)
	}
	wire := buf[:2+len(packed)]
	binary.BigEndian.PutUint16(wire, uint16(len(wire)-2))
	want := expected{qtype: q.Question[0].Qtype, qclass: q.Question[0].Qclass}
	if want.name, _, err = dns.UnpackDomainName(wire[2:], headerLen); err != nil {
		return nil, badQuery(err)
	}
	ex := exchange{c: c, ctx: ctx, wire: wire, want: &want, rbuf: buf[queryArea:], deadline: deadline}

	var orderBuf [8]*forwarder
	set := c.set.Load()
	fwds := order(start, set.fwds, set.strategy, orderBuf[:0])
	var gaveFailure uint64 // bit i: fwds[i] answered with a failure rcode
	var lastErr error
	attempts := 0
rounds:
	for range c.rounds {
		for i, f := range fwds {
			if gaveFailure&(1<<i) != 0 {
				continue
			}
			if ctx.Err() != nil || !time.Now().Before(deadline) {
				break rounds
			}
			attempts++
			ans, err := ex.attempt(f)
			if err != nil {
				lastErr = err
				continue
			}
			if isForwarderFailure(ans.Rcode) {
				gaveFailure |= 1 << i
				lastErr = answeredFailure(f, ans.Rcode)
				continue
			}
			if c.auth && !ans.Authoritative {
				// A referral or a cached answer: not this server's zone
				// data. It answered, so its health stays; another server
				// of the zone may hold the name.
				gaveFailure |= 1 << i
				lastErr = notAuthoritative(f)
				continue
			}
			ans.Id = q.Id
			ans.Question = append(ans.Question[:0], q.Question[0])
			return ans, nil
		}
	}
	return nil, allFailed(ctx, q, attempts, start, lastErr)
}

// badQuery, answeredFailure and allFailed build Exchange's errors outside
// its frame. That frame is live under every read from a forwarder and
// every parse of an answer, the deepest point of a cache miss, and the
// slow path runs each miss on a new goroutine whose stack starts small and
// grows by copying (runtime.morestack was ~6 % of a miss's CPU in
// bench/resolver.sh): fmt.Errorf's argument arrays, inlined, made the
// frame 1 088 bytes; without them it is 720.
//
//go:noinline
func badQuery(err error) error { return fmt.Errorf("%w: %v", ErrBadQuery, err) }

//go:noinline
func notAuthoritative(f *forwarder) error {
	return fmt.Errorf("%s answered without AA (not authoritative for the name)", f.addr)
}

//go:noinline
func answeredFailure(f *forwarder, rcode int) error {
	return fmt.Errorf("%s answered %s", f.addr, dns.RcodeToString[rcode])
}

//go:noinline
func allFailed(ctx context.Context, q *dns.Msg, attempts int, start time.Time, lastErr error) error {
	ctxErr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && ctxErr == nil && !time.Now().Before(d) {
		// The last read timed out at the context's deadline a moment
		// before the context noticed: say so, as the caller set it.
		ctxErr = context.DeadlineExceeded
	}
	switch {
	case ctxErr != nil:
		lastErr = errors.Join(ctxErr, lastErr)
	case lastErr == nil:
		lastErr = errors.New("no time left for an attempt")
	}
	return fmt.Errorf("%w (%s, %d attempts in %v): %w", ErrAllFailed, q.Question[0].Name, attempts,
		time.Since(start).Round(time.Millisecond), lastErr)
}

// acquire takes an in-flight slot, waiting until deadline when all are
// taken: a burst waits a little rather than opening sockets without bound.
func (c *Client) acquire(ctx context.Context, deadline time.Time) error {
	select {
	case c.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for an in-flight slot: %w", ErrAllFailed, ctx.Err())
	case <-t.C:
		c.metrics.ResourceLimit()
		return fmt.Errorf("%w: all %d in-flight slots stayed busy", ErrAllFailed, cap(c.slots))
	}
}

// newID writes a fresh id into the query packet: crypto/rand, because an
// off-path attacker who can predict ids needs only guess the source port
// to poison the answer (RFC 5452).
func newID(wire []byte, want *expected) {
	var b [2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	want.id = binary.BigEndian.Uint16(b[:])
	copy(wire[2:4], b[:])
}
