package upstream

import (
	"sync/atomic"
	"time"
)

// Metrics receives what the client counts about its outgoing queries. The
// names in the comments are the PowerDNS Recursor 4.8 statistics each call
// feeds, so that the PowerDNS-compatible statistics API can report them under those names.
// Every method is called on the query path: implementations must be cheap
// and safe for concurrent use.
type Metrics interface {
	// OutQuery is one query to a forwarder, counted as it is about to go
	// out (a TCP connection that is then refused included): all-outqueries,
	// plus tcp-outqueries when tcp, and ipv6-outqueries for UDP to an IPv6
	// forwarder (PowerDNS counts ipv6-outqueries over UDP only).
	OutQuery(ipv6, tcp bool)
	// Answer is one reply accepted as the answer to a query, rtt after it
	// was sent: auth4-answers0-1 … auth4-answers-slow, or auth6-… when ipv6.
	Answer(ipv6 bool, rtt time.Duration)
	// Timeout is one attempt that got no acceptable reply before its
	// deadline: outgoing-timeouts, plus outgoing4-timeouts or
	// outgoing6-timeouts.
	Timeout(ipv6 bool)
	// Unreachable is one attempt the network refused at the forwarder's
	// end (ICMP port or host unreachable, connection refused or reset):
	// unreachables.
	Unreachable()
	// ResourceLimit is one attempt that failed on our side (no socket, no
	// route) or one query that found every in-flight slot taken until its
	// deadline: resource-limits.
	ResourceLimit()
	// UnexpectedPacket is one reply that does not belong to the query
	// waiting on the socket (other id, other question, not a response) and
	// was ignored: unexpected-packets.
	UnexpectedPacket()
	// ServerParseError is one reply that could not be parsed and was
	// ignored: server-parse-errors.
	ServerParseError()
	// SpoofPrevent is one answer dropped because it came after too many
	// near misses (the right question with a wrong id), which looks like
	// an attempt to guess the id: spoof-prevents.
	SpoofPrevent()
	// CaseMismatch is one accepted answer whose question differed from the
	// query's only in letter case: case-mismatches.
	CaseMismatch()
}

// NopMetrics counts nothing; it is the default when Config.Metrics is nil.
type NopMetrics struct{}

func (NopMetrics) OutQuery(bool, bool)        {}
func (NopMetrics) Answer(bool, time.Duration) {}
func (NopMetrics) Timeout(bool)               {}
func (NopMetrics) Unreachable()               {}
func (NopMetrics) ResourceLimit()             {}
func (NopMetrics) UnexpectedPacket()          {}
func (NopMetrics) ServerParseError()          {}
func (NopMetrics) SpoofPrevent()              {}
func (NopMetrics) CaseMismatch()              {}

// answerBucketCount is the number of PowerDNS answer latency buckets.
const answerBucketCount = 5

// answerBucketIndex places rtt in PowerDNS's answer latency buckets. Its
// histogram counts whole microseconds into the first bucket whose bound is
// at least the value: up to 1 ms, 10 ms, 100 ms, 1 s, and the rest.
func answerBucketIndex(rtt time.Duration) int {
	switch us := rtt.Microseconds(); {
	case us <= 1000:
		return 0
	case us <= 10_000:
		return 1
	case us <= 100_000:
		return 2
	case us <= 1_000_000:
		return 3
	default:
		return 4
	}
}

// answerBucketSuffix is the statistic name suffix of bucket i, as in
// auth4-answers0-1 … auth4-answers-slow.
func answerBucketSuffix(i int) string {
	switch i {
	case 0:
		return "0-1"
	case 1:
		return "1-10"
	case 2:
		return "10-100"
	case 3:
		return "100-1000"
	default:
		return "-slow"
	}
}

// AnswerBucket names the PowerDNS latency bucket of rtt: "0-1", "1-10",
// "10-100", "100-1000" (milliseconds, upper bounds included) or "-slow"
// (over a second), the
// suffix of the auth4-answers… and auth6-answers… statistics, for a
// Metrics implementation that keeps them itself.
func AnswerBucket(rtt time.Duration) string {
	return answerBucketSuffix(answerBucketIndex(rtt))
}

// Counters is a Metrics that keeps every count in memory, for the PowerDNS-compatible statistics API's
// statistics API (Snapshot names them as PowerDNS does) and for tests. The
// zero value is ready to use.
type Counters struct {
	allOut, tcpOut, ipv6Out         atomic.Uint64
	timeouts, timeouts4, timeouts6  atomic.Uint64
	unreachables, resourceLimits    atomic.Uint64
	unexpected, parseErrors, spoofs atomic.Uint64
	caseMismatches                  atomic.Uint64
	auth4, auth6                    [answerBucketCount]atomic.Uint64
}

var _ Metrics = (*Counters)(nil)

func (c *Counters) OutQuery(ipv6, tcp bool) {
	c.allOut.Add(1)
	if tcp {
		c.tcpOut.Add(1)
	} else if ipv6 {
		c.ipv6Out.Add(1)
	}
}

func (c *Counters) Answer(ipv6 bool, rtt time.Duration) {
	if ipv6 {
		c.auth6[answerBucketIndex(rtt)].Add(1)
	} else {
		c.auth4[answerBucketIndex(rtt)].Add(1)
	}
}

func (c *Counters) Timeout(ipv6 bool) {
	c.timeouts.Add(1)
	if ipv6 {
		c.timeouts6.Add(1)
	} else {
		c.timeouts4.Add(1)
	}
}

func (c *Counters) Unreachable()      { c.unreachables.Add(1) }
func (c *Counters) ResourceLimit()    { c.resourceLimits.Add(1) }
func (c *Counters) UnexpectedPacket() { c.unexpected.Add(1) }
func (c *Counters) ServerParseError() { c.parseErrors.Add(1) }
func (c *Counters) SpoofPrevent()     { c.spoofs.Add(1) }
func (c *Counters) CaseMismatch()     { c.caseMismatches.Add(1) }

// Snapshot returns every count under its PowerDNS statistic name
// ("all-outqueries", "auth4-answers0-1", …). Counts are read one by one, so
// a snapshot taken under load is not one instant.
func (c *Counters) Snapshot() map[string]uint64 {
	s := map[string]uint64{
		"all-outqueries":      c.allOut.Load(),
		"tcp-outqueries":      c.tcpOut.Load(),
		"ipv6-outqueries":     c.ipv6Out.Load(),
		"outgoing-timeouts":   c.timeouts.Load(),
		"outgoing4-timeouts":  c.timeouts4.Load(),
		"outgoing6-timeouts":  c.timeouts6.Load(),
		"unreachables":        c.unreachables.Load(),
		"resource-limits":     c.resourceLimits.Load(),
		"unexpected-packets":  c.unexpected.Load(),
		"server-parse-errors": c.parseErrors.Load(),
		"spoof-prevents":      c.spoofs.Load(),
		"case-mismatches":     c.caseMismatches.Load(),
	}
	for i := range answerBucketCount {
		s["auth4-answers"+answerBucketSuffix(i)] = c.auth4[i].Load()
		s["auth6-answers"+answerBucketSuffix(i)] = c.auth6[i].Load()
	}
	return s
}
