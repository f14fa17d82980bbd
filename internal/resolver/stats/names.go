package stats

// Counter is one of the statistics the resolver counts itself: an index
// into every shard's array of atomic counters. The statistics computed on
// read (uptime, process and cache gauges, qa-latency) and the ones a
// forwarder never moves have no Counter.
type Counter uint8

// The counters, named after their PowerDNS statistic. Most are monotonic;
// ConcurrentQueries and TCPClients go up and down (Inc and Dec).
const (
	AllOutqueries Counter = iota
	Answers0To1
	Answers1To10
	Answers10To100
	Answers100To1000
	AnswersSlow
	Auth4Answers0To1
	Auth4Answers1To10
	Auth4Answers10To100
	Auth4Answers100To1000
	Auth4AnswersSlow
	Auth6Answers0To1
	Auth6Answers1To10
	Auth6Answers10To100
	Auth6Answers100To1000
	Auth6AnswersSlow
	CacheHits
	CacheMisses
	CaseMismatches
	ChainResends
	ClientParseErrors
	ConcurrentQueries
	DNSSECQueries
	IgnoredPackets
	IPv6Outqueries
	IPv6Questions
	NoPacketError
	NoEDNSOutqueries
	NoErrorAnswers
	NXDomainAnswers
	OutgoingTimeouts
	Outgoing4Timeouts
	Outgoing6Timeouts
	OverCapacityDrops
	PacketCacheHits
	PacketCacheMisses
	PolicyDrops
	PolicyResultCustom
	PolicyResultDrop
	PolicyResultNoAction
	PolicyResultNoData
	PolicyResultNXDomain
	PolicyResultTruncate
	Questions
	ResourceLimits
	ServerParseErrors
	ServFailAnswers
	SpoofPrevents
	TCPClientOverflow
	TCPClients
	TCPOutqueries
	TCPQuestions
	TooOldDrops
	UnauthorizedTCP
	UnauthorizedUDP
	UnexpectedPackets
	Unreachables

	numCounters
)

// kind says where a statistic's value comes from.
type kind uint8

const (
	kindCounter kind = iota // summed over the shards
	kindUpDown              // summed over the shards, read as signed, never below 0
	kindRead                // computed when read
	kindZero                // cannot move in a forwarder; zero says why
)

// promType is the statistic's Prometheus type: PowerDNS 4.8's, except
// malloc-bytes (a gauge: Go's heap shrinks) and dlg-only-drops (not in 4.8).
type promType uint8

const (
	promCounter promType = iota
	promGauge
)

// def describes one statistic of the statistics API.
type def struct {
	name    string
	help    string
	prom    promType
	kind    kind
	counter Counter                          // kindCounter, kindUpDown
	read    func(*Counters, *reading) uint64 // kindRead
	zero    string                           // kindZero: why it stays 0
}

func counter(name string, c Counter, help string) def {
	return def{name: name, help: help, prom: promCounter, kind: kindCounter, counter: c}
}

func upDown(name string, c Counter, help string) def {
	return def{name: name, help: help, prom: promGauge, kind: kindUpDown, counter: c}
}

func computed(name string, p promType, read func(*Counters, *reading) uint64, help string) def {
	return def{name: name, help: help, prom: p, kind: kindRead, read: read}
}

// recursive is a statistic the recursor keeps (Config.Recursive): it
// moves in recursive mode and reads 0 in forward mode.
func recursive(name string, p promType, help string) def {
	return def{name: name, help: help, prom: p, kind: kindRead,
		read: func(c *Counters, _ *reading) uint64 {
			if c.recursive == nil {
				return 0
			}
			return c.recursive(name)
		}}
}

func zero(name string, p promType, why, help string) def {
	return def{name: name, help: help, prom: p, kind: kindZero, zero: why}
}

// Reasons a statistic cannot move in svc-pf's resolver, a forwarder with
// caches and no DNSSEC validation. The README lists the same.
const (
	whyDNSSEC = "no DNSSEC validation: the resolver passes the DO bit and the upstream's records through unvalidated"
	whyDead   = "the EDNS PING draft was abandoned: PowerDNS 4.8 never counts it either, and the resolver sends no EDNS PING"
)

// defs lists every statistic of the API in its order, which is byte order
// (PowerDNS keeps them in a std::map): Lookup searches it. A table, not
// state: nothing writes it after package initialisation.
var defs = [...]def{
	counter("all-outqueries", AllOutqueries, "Outgoing queries to the forwarders (UDP and TCP) since starting."),
	counter("answers-slow", AnswersSlow, "Queries answered after more than 1 second."),
	counter("answers0-1", Answers0To1, "Queries answered within 1 millisecond."),
	counter("answers1-10", Answers1To10, "Queries answered within 1 to 10 milliseconds."),
	counter("answers10-100", Answers10To100, "Queries answered within 10 to 100 milliseconds."),
	counter("answers100-1000", Answers100To1000, "Queries answered within 100 milliseconds to 1 second."),
	counter("auth4-answers-slow", Auth4AnswersSlow, "Upstream answers over IPv4 that took more than 1 second."),
	counter("auth4-answers0-1", Auth4Answers0To1, "Upstream answers over IPv4 within 1 millisecond."),
	counter("auth4-answers1-10", Auth4Answers1To10, "Upstream answers over IPv4 within 1 to 10 milliseconds."),
	counter("auth4-answers10-100", Auth4Answers10To100, "Upstream answers over IPv4 within 10 to 100 milliseconds."),
	counter("auth4-answers100-1000", Auth4Answers100To1000, "Upstream answers over IPv4 within 100 milliseconds to 1 second."),
	counter("auth6-answers-slow", Auth6AnswersSlow, "Upstream answers over IPv6 that took more than 1 second."),
	counter("auth6-answers0-1", Auth6Answers0To1, "Upstream answers over IPv6 within 1 millisecond."),
	counter("auth6-answers1-10", Auth6Answers1To10, "Upstream answers over IPv6 within 1 to 10 milliseconds."),
	counter("auth6-answers10-100", Auth6Answers10To100, "Upstream answers over IPv6 within 10 to 100 milliseconds."),
	counter("auth6-answers100-1000", Auth6Answers100To1000, "Upstream answers over IPv6 within 100 milliseconds to 1 second."),
	computed("cache-entries", promGauge, func(c *Counters, _ *reading) uint64 { return call(c.cacheEntries) }, "Entries in the record cache."),
	counter("cache-hits", CacheHits, "Queries answered from the record cache without an outgoing query (packet cache hits not included)."),
	counter("cache-misses", CacheMisses, "Queries that needed an outgoing query."),
	counter("case-mismatches", CaseMismatches, "Forwarder answers whose question differed from the query only in letter case."),
	counter("chain-resends", ChainResends, "Queries joined to an identical outgoing query already in flight."),
	counter("client-parse-errors", ClientParseErrors, "Client packets that could not be parsed."),
	upDown("concurrent-queries", ConcurrentQueries, "Queries being resolved now."),
	zero("dlg-only-drops", promCounter, "delegation-only zones are a recursor feature (removed from PowerDNS in 4.5; 4.8 has no such statistic)", "Answers dropped by delegation-only zones (never counted)."),
	counter("dnssec-queries", DNSSECQueries, "Queries received with the DO bit set."),
	recursive("dnssec-result-bogus", promCounter, "Responses in the DNSSEC Bogus state (recursive mode; 0 in forward mode: forwarded answers are not validated)."),
	recursive("dnssec-result-indeterminate", promCounter, "Responses in the DNSSEC Indeterminate state (recursive mode; 0 in forward mode: forwarded answers are not validated)."),
	recursive("dnssec-result-insecure", promCounter, "Responses in the DNSSEC Insecure state (recursive mode; 0 in forward mode: forwarded answers are not validated)."),
	recursive("dnssec-result-nta", promCounter, "Responses under a negative trust anchor (recursive mode; 0 in forward mode: forwarded answers are not validated)."),
	recursive("dnssec-result-secure", promCounter, "Responses in the DNSSEC Secure state (recursive mode; 0 in forward mode: forwarded answers are not validated)."),
	recursive("dnssec-validations", promCounter, "Responses for which a DNSSEC validation was asked for (recursive mode; 0 in forward mode: forwarded answers are not validated)."),
	recursive("dont-outqueries", promCounter, "Outgoing queries not sent because dont_query bars their server's address (recursive mode; 0 in forward mode, where only the configured forwarders are asked, which PowerDNS exempts too)."),
	zero("edns-ping-matches", promCounter, whyDead, "Servers that sent a valid EDNS PING response (never counted)."),
	zero("edns-ping-mismatches", promCounter, whyDead, "Servers that sent an invalid EDNS PING response (never counted)."),
	recursive("failed-host-entries", promGauge, "Authoritative servers that failed in the last minute and have not answered since (recursive mode; 0 in forward mode)."),
	computed("fd-usage", promGauge, func(*Counters, *reading) uint64 { return openFDs() }, "Open file descriptors of the process."),
	counter("ignored-packets", IgnoredPackets, "Non-query packets received on the DNS listeners."),
	counter("ipv6-outqueries", IPv6Outqueries, "Outgoing UDP queries over IPv6."),
	counter("ipv6-questions", IPv6Questions, "Queries received over IPv6 UDP."),
	computed("malloc-bytes", promGauge, func(*Counters, *reading) uint64 { return heapBytes() }, "Bytes in live Go heap objects."),
	zero("max-mthread-stack", promGauge, "no MThreads: queries run on goroutines, whose stacks the Go runtime grows and moves", "Largest MThread stack used (none in a Go resolver)."),
	computed("negcache-entries", promGauge, func(c *Counters, _ *reading) uint64 { return call(c.negCacheEntries) }, "Entries in the negative answer cache."),
	counter("no-packet-error", NoPacketError, "Failed reads on the DNS listeners."),
	counter("noedns-outqueries", NoEDNSOutqueries, "Outgoing queries sent without EDNS."),
	counter("noerror-answers", NoErrorAnswers, "NOERROR answers since starting."),
	zero("noping-outqueries", promCounter, whyDead, "Outgoing queries without EDNS PING (never counted)."),
	recursive("nsset-invalidations", promCounter, "Nameserver sets dropped because none of their servers worked (recursive mode; 0 in forward mode)."),
	recursive("nsspeeds-entries", promGauge, "Entries in the nameserver speeds map (recursive mode; 0 in forward mode)."),
	counter("nxdomain-answers", NXDomainAnswers, "NXDOMAIN answers since starting."),
	counter("outgoing-timeouts", OutgoingTimeouts, "Outgoing queries that timed out."),
	counter("outgoing4-timeouts", Outgoing4Timeouts, "Outgoing IPv4 queries that timed out."),
	counter("outgoing6-timeouts", Outgoing6Timeouts, "Outgoing IPv6 queries that timed out."),
	counter("over-capacity-drops", OverCapacityDrops, "Queries refused because the concurrent query limit, in all or per client, was reached."),
	computed("packetcache-entries", promGauge, func(c *Counters, _ *reading) uint64 { return call(c.packetCacheEntries) }, "Entries in the packet cache."),
	counter("packetcache-hits", PacketCacheHits, "Queries answered from the packet cache."),
	counter("packetcache-misses", PacketCacheMisses, "Queries not found in the packet cache."),
	counter("policy-drops", PolicyDrops, "Queries dropped by a policy decision (drop action or Lua)."),
	counter("policy-result-custom", PolicyResultCustom, "Queries an operator RPZ zone answered with its own records (local data, CNAME); as in PowerDNS, RPZ results only: subscriber blocks are not counted here. It keeps PowerDNS's meaning; svc-pf's own verdicts (blocklists, categories, allowlists…) are counted in svcpf_resolver_decisions_total."),
	counter("policy-result-drop", PolicyResultDrop, "Queries an operator RPZ zone dropped (rpz-drop); RPZ results only, as in PowerDNS. It keeps PowerDNS's meaning; svc-pf's own verdicts (blocklists, categories, allowlists…) are counted in svcpf_resolver_decisions_total."),
	counter("policy-result-noaction", PolicyResultNoAction, "Queries an operator RPZ zone saw and did not act on (PASSTHRU included); moves only when RPZ zones are configured, whatever the subscriber's settings decide. It keeps PowerDNS's meaning; svc-pf's own verdicts (blocklists, categories, allowlists…) are counted in svcpf_resolver_decisions_total."),
	counter("policy-result-nodata", PolicyResultNoData, "Queries an operator RPZ zone answered NODATA (CNAME *.); RPZ results only, as in PowerDNS. It keeps PowerDNS's meaning; svc-pf's own verdicts (blocklists, categories, allowlists…) are counted in svcpf_resolver_decisions_total."),
	counter("policy-result-nxdomain", PolicyResultNXDomain, "Queries an operator RPZ zone answered NXDOMAIN (CNAME .); RPZ results only, as in PowerDNS. It keeps PowerDNS's meaning; svc-pf's own verdicts (blocklists, categories, allowlists…) are counted in svcpf_resolver_decisions_total."),
	counter("policy-result-truncate", PolicyResultTruncate, "UDP queries an operator RPZ zone truncated to force TCP (rpz-tcp-only); RPZ results only, as in PowerDNS. It keeps PowerDNS's meaning; svc-pf's own verdicts (blocklists, categories, allowlists…) are counted in svcpf_resolver_decisions_total."),
	computed("qa-latency", promGauge, (*Counters).qaLatency, "Average answer latency in microseconds, exponentially weighted over recent answers."),
	counter("questions", Questions, "Queries received from clients."),
	computed("real-memory-usage", promGauge, func(*Counters, *reading) uint64 { return residentBytes() }, "Resident memory of the process in bytes."),
	counter("resource-limits", ResourceLimits, "Outgoing queries that failed on a local resource limit (no file descriptors, no route)."),
	zero("security-status", promGauge, "no security polling: 0 is PowerDNS's 'no data'", "Security status from security polling (not polled: 0)."),
	counter("server-parse-errors", ServerParseErrors, "Upstream answers that could not be parsed."),
	counter("servfail-answers", ServFailAnswers, "SERVFAIL answers since starting."),
	counter("spoof-prevents", SpoofPrevents, "Upstream answers dropped as likely spoofed."),
	computed("sys-msec", promCounter, func(_ *Counters, r *reading) uint64 { return r.rusage().sys }, "CPU milliseconds spent in system mode."),
	counter("tcp-client-overflow", TCPClientOverflow, "TCP connections refused because the client had too many."),
	upDown("tcp-clients", TCPClients, "TCP client connections open now."),
	counter("tcp-outqueries", TCPOutqueries, "Outgoing TCP queries since starting."),
	counter("tcp-questions", TCPQuestions, "Queries received over TCP since starting."),
	recursive("throttle-entries", promGauge, "Servers throttled now (recursive mode; 0 in forward mode)."),
	recursive("throttled-out", promCounter, "Outgoing queries not sent because their server was throttled (recursive mode; 0 in forward mode)."),
	recursive("throttled-outqueries", promCounter, "The same count as throttled-out, under PowerDNS's second name for it."),
	counter("too-old-drops", TooOldDrops, "Queries dropped because they waited too long before being handled."),
	computed("udp-in-errors", promCounter, func(_ *Counters, r *reading) uint64 { return r.snmp().inErrors }, "UDP InErrors of the host (/proc/net/snmp)."),
	computed("udp-noport-errors", promCounter, func(_ *Counters, r *reading) uint64 { return r.snmp().noPorts }, "UDP NoPorts of the host (/proc/net/snmp)."),
	computed("udp-recvbuf-errors", promCounter, func(_ *Counters, r *reading) uint64 { return r.snmp().rcvbufErrors }, "UDP RcvbufErrors of the host (/proc/net/snmp)."),
	computed("udp-sndbuf-errors", promCounter, func(_ *Counters, r *reading) uint64 { return r.snmp().sndbufErrors }, "UDP SndbufErrors of the host (/proc/net/snmp)."),
	counter("unauthorized-tcp", UnauthorizedTCP, "TCP connections refused by allow_from (closed at accept, as PowerDNS does)."),
	counter("unauthorized-udp", UnauthorizedUDP, "UDP queries refused by allow_from."),
	counter("unexpected-packets", UnexpectedPackets, "Upstream answers that matched no outstanding query."),
	counter("unreachables", Unreachables, "Outgoing queries that failed because the forwarder was unreachable."),
	computed("uptime", promCounter, func(c *Counters, _ *reading) uint64 { return c.uptime() }, "Seconds since the resolver started."),
	computed("user-msec", promCounter, func(_ *Counters, r *reading) uint64 { return r.rusage().user }, "CPU milliseconds spent in user mode."),
}

// call reads a size callback; an absent one reads 0.
func call(f func() uint64) uint64 {
	if f == nil {
		return 0
	}
	return f()
}
