package upstream

import (
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
