package resolver

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// The order of a query's steps, and why (the entry, serve.go, runs the
// first four for every transport on the adapter's goroutine: a UDP
// packet-cache hit never leaves its socket's reader; TCP does not use the
// packet cache, and its policy is found on the slow path, in resolve):
//
//  1. allow_from: a client outside it is refused before anything is spent
//     on it: its UDP packets dropped, its TCP connections closed on accept
//     (counted unauthorized-udp/-tcp).
//  2. parse (dnswire, over UDP and TCP alike): a malformed query gets
//     FORMERR, another opcode NOTIMP, and a packet without a header or a
//     response nothing (over TCP the connection is closed); counted
//     client-parse-errors, or ignored-packets for what is not a query. An
//     EDNS version other than 0 gets BADVERS, before the packet cache.
//  3. client → policy (policy.Engine.PolicyFor): the subscriber index finds
//     the session by longest prefix; its compiled policy is cached by the
//     documents of its layers, shared by every session with the same ones.
//     This comes before the cache because the packet cache is keyed by the
//     policy, never by the subscriber.
//  4. packet cache (question, DO, CD, EDNS, the policy's CacheKey): a hit
//     is answered from wire bytes, id and case patched.
//  5. debug: with dns.debug, a CHAOS TXT query answers the trace. A
//     query for _dns.resolver.arpa gets the node's DDR answer (ddr.go).
//     Then, until the node's policy data has loaded once (unready.go):
//     with resolver.unready closed a SERVFAIL with EDE 14 "Not Ready";
//     with open the steps below, on what has loaded, the answer counted
//     and marked (ReasonUnready). The packet cache (step 4) is skipped
//     meanwhile, both ways, so nothing answered then is kept.
//  6. decide (policy.DecideInto) on the name: steps 1–7 of docs/policy.md's evaluation order
//     need no answer; a block, a redirect or an RPZ action is answered
//     here, without asking upstream.
//  7. record cache, else the forwarders: the answer for the name, shared
//     by every policy class. A query type no resolver is asked for (zone
//     transfers, TSIG, OPT, RRSIG, …) is SERVFAIL here, as PowerDNS
//     answers it, without asking the forwarders: their REFUSED would make
//     them rest for every client. An expired record still within
//     record_cache.serve_stale answers, with TTL 30 and EDE 3, when the
//     forwarders fail or take more than 1.8 s (stale.go), and is not
//     stored in the packet cache.
//  8. the answer: when the name's decision was the default allow (not
//     filtering off, an allowlist or an RPZ passthru: those let the whole
//     answer through), the names of its CNAME chain are decided as query
//     names (policy.Input.Chain: CNAME cloaking cannot hide a blocked
//     name behind an allowed one), then, when the policy has
//     blocked_networks, each A/AAAA as the answer address (step 8 of the
//     evaluation order). A chain name or an address that blocks gets the block of a
//     direct query, for the name asked. The record cache holds the answer
//     for every class, so this runs on its hits too, and the packet cache
//     keeps the outcome under the policy's key.
//  9. the reply, sized for the client, stored in the packet cache under the
//     policy's key (its lifetime cut at the next minute when the policy has
//     schedules, whose windows open and close on minutes), with the
//     decision's summary beside it (its verdict, action and reason only
//     when there is no observer: svcpf_resolver_decisions_total counts the
//     hits by them).
//  10. the observer (Config.Observer), once the reply is handed to the
//     transport: from the adapter's goroutine for what the entry answered
//     itself (a packet-cache hit reports the summary stored with it), from
//     the slow path for the rest (observer.go).

// query is one query on the slow path.
type query struct {
	req       *dns.Msg
	client    netip.Addr
	clientID  string // an encrypted transport's client id ("": none)
	idBy      uint8  // how the session was found (clientid.go: idBySource …)
	transport policy.Transport
	start     time.Time
	shard     *stats.Shard
	// policy is the client's, when the caller already found it (the
	// entry, for the packet cache's key): the reply is then decided by
	// the policy it will be stored under. nil: resolve finds it (and sets
	// it).
	policy *policy.Policy
	// sess is the client's session when it was found with policy (for
	// the observer, which then does not look it up again).
	sess found
	// sum, when not nil, gets the summary of the decision that shaped
	// the reply (for the observer, and the packet cache beside it).
	sum *Summary
	// fromRecords: the record cache answered where the forwarders would
	// have been asked.
	fromRecords bool
	// stale: the answer came from expired records (serve-stale, stale.go);
	// the packet cache does not keep it.
	stale bool
	// head is the decision that shaped the reply (zero: none), which the
	// packet cache keeps beside it.
	head noteHead
}

// decided counts the decision that shaped q's reply
// (svcpf_resolver_decisions_total) and keeps it for the packet cache and
// the observer.
func (q *query) decided(d *policy.Decision) {
	q.head = headOf(d)
	q.shard.Decided(q.head[0], q.head[2])
	if q.sum != nil {
		summarize(q.sum, d)
	}
}

// resolve answers q; a nil reply means drop.
func (r *Resolver) resolve(ctx context.Context, q *query) *dns.Msg {
	req := q.req
	if len(req.Question) != 1 {
		return errorReply(req, dns.RcodeFormatError)
	}
	qs := req.Question[0]
	v := r.engine.View()
	p := q.policy
	if p == nil {
		p = r.identify(&v, q) // clientid.go: the client id, else the source address
		q.policy = p
	}

	// 5. debug
	if qs.Qclass == dns.ClassCHAOS {
		if r.cfg.Debug && qs.Qtype == dns.TypeTXT {
			return r.debugReply(req, q)
		}
		return errorReply(req, dns.RcodeRefused)
	}
	if qs.Qclass != dns.ClassINET {
		return errorReply(req, dns.RcodeNotImplemented)
	}
	if strings.EqualFold(qs.Name, ddrName) {
		return r.ddrReply(req) // ddr.go: the node's own answer, for every client
	}

	// Not ready (unready.go): SERVFAIL, or an answer from what has
	// loaded, marked. Once ready, one atomic load.
	if !r.ready.Load() {
		if why := r.Waiting(); why != "" {
			r.unready.count(why)
			if r.unready.closed {
				q.markUnready()
				return notReadyReply(req, why)
			}
			defer q.markUnready() // after q.decided, deferred below
		}
	}

	// 6. decide on the name
	name := strings.ToLower(strings.TrimSuffix(qs.Name, "."))
	sc := r.decisions.Get().(*decideScratch)
	defer r.decisions.Put(sc)
	d, in := &sc.d, &sc.in
	*in = policy.Input{Domain: name, QType: qs.Qtype, Time: r.now(), RPZ: v.RPZ, Transport: q.transport}
	if name == "" {
		in.Domain = "."
	}
	policy.DecideInto(d, in, p, v.Categories)
	defer q.decided(d) // the last decision, whichever return it takes
	if d.Verdict != policy.VerdictAllow {
		r.countPolicy(q.shard, d, v.RPZ != nil)
		return r.blockedReply(ctx, req, q, d, p)
	}

	// 7. record cache, else the forwarders
	reply, chain := r.forward(ctx, req, q, sc.chain[:0])

	// 8. the answer's CNAME chain, then its addresses. A chain too long or
	// looping never gets here: forward answers it SERVFAIL, and the record
	// cache does not hold it.
	if d.Reason == policy.ReasonDefault && len(chain) > 0 {
		in.Chain = chain
		policy.DecideInto(d, in, p, v.Categories)
	}
	r.countPolicy(q.shard, d, v.RPZ != nil)
	if d.Verdict != policy.VerdictAllow {
		return r.blockedReply(ctx, req, q, d, p)
	}
	if reply.Rcode != dns.RcodeSuccess || d.Reason != policy.ReasonDefault || !p.HasNetworks() {
		return reply
	}
	in.Chain = nil // allowed: each address adds step 8 alone
	for _, rr := range reply.Answer {
		var a netip.Addr
		switch x := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(x.A.To4())
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(x.AAAA)
		default:
			continue
		}
		in.AnswerAddr = a
		policy.DecideInto(d, in, p, v.Categories)
		if d.Verdict != policy.VerdictAllow {
			return r.blockedReply(ctx, req, q, d, p)
		}
	}
	return reply
}

// decideScratch is a slow-path query's decision and its input, reused
// through Resolver.decisions: a fresh Decision with room for its trace and
// categories was the largest allocation of a cache miss (about 870 bytes
// with its input), and every byte allocated per query is paid again by the
// garbage collector. Nothing of it outlives resolve: the reply copies what
// it needs (blockedReply's EDE text is a new string).
type decideScratch struct {
	d     policy.Decision
	in    policy.Input
	chain []string // the answer's CNAME chain, for in.Chain
}

func newDecideScratch() any {
	return &decideScratch{d: policy.Decision{
		Trace:      make([]policy.TraceEntry, 0, policy.TraceCap),
		Categories: make([]feed.Category, 0, 4),
	}, chain: make([]string, 0, policy.MaxChain)}
}

// countPolicy moves the policy-result-* statistics as PowerDNS does for
// RPZ: noaction for every query that RPZ saw and did not act on.
func (r *Resolver) countPolicy(sh *stats.Shard, d *policy.Decision, haveRPZ bool) {
	if !haveRPZ {
		return
	}
	if d.Reason != policy.ReasonRPZ {
		sh.Inc(stats.PolicyResultNoAction)
		return
	}
	switch rpz.ResultOf(d) {
	case rpz.ResultDrop:
		sh.Inc(stats.PolicyResultDrop)
	case rpz.ResultNXDomain:
		sh.Inc(stats.PolicyResultNXDomain)
	case rpz.ResultNoData:
		sh.Inc(stats.PolicyResultNoData)
	case rpz.ResultTruncate:
		sh.Inc(stats.PolicyResultTruncate)
	case rpz.ResultCustom:
		sh.Inc(stats.PolicyResultCustom)
	default:
		sh.Inc(stats.PolicyResultNoAction)
	}
}

// forward answers an allowed query from the record cache or the
// forwarders; SERVFAIL when none answers in time. It appends the answer's
// CNAME chain to chain and returns it (step 8 decides its names): a
// forwarder's answer is cut to that chain before it is cached, so the
// chain is read once per answer.
func (r *Resolver) forward(ctx context.Context, req *dns.Msg, q *query, chain []string) (*dns.Msg, []string) {
	qs := req.Question[0]
	if unsupportedType(qs.Qtype) {
		return errorReply(req, dns.RcodeServerFailure), chain
	}
	opt := req.IsEdns0()
	do := opt != nil && opt.Do()
	key := cache.RecordKey{Name: qs.Name, Type: qs.Qtype, Class: qs.Qclass, DO: do, CD: req.CheckingDisabled, AD: req.AuthenticatedData}
	now := r.now()
	if ra, ok := r.records.Get(key, now); ok {
		q.shard.Inc(stats.CacheHits)
		q.fromRecords = true
		if ra.Refresh {
			r.refresh(key, reasonPrefetch)
		}
		m := new(dns.Msg)
		m.SetReply(req)
		m.Rcode, m.AuthenticatedData = ra.Rcode, ra.AuthenticatedData
		m.Answer, m.Ns = ra.Answer, ra.Ns
		// Stored answers had their chain bounded (below): ok holds.
		chain, _ = answerChain(qs.Name, m.Answer, chain)
		return m, chain
	}
	q.shard.Inc(stats.CacheMisses)
	// Serve-stale (stale.go): expired records to fall back on shorten the
	// wait for the forwarders, and answer when they fail.
	sa, haveStale := r.records.GetStale(key, now)
	if haveStale && sa.Failing {
		return r.staleReply(req, q, sa, chain)
	}
	up, err := r.exchangeOrStale(ctx, req, key, sa, haveStale)
	if err != nil {
		r.log.Debug("forwarders failed", "name", qs.Name, "type", dns.TypeToString[qs.Qtype], "err", err, "stale", haveStale)
		if m, ok := bogusReply(req, err); ok {
			// A bogus answer is never replaced by stale records: the
			// zone's data may be what an attacker forged.
			return m, chain
		}
		if haveStale {
			return r.staleReply(req, q, sa, chain)
		}
		return errorReply(req, dns.RcodeServerFailure), chain
	}
	base := len(chain)
	chain, ok := r.accept(qs, up, chain)
	if !ok {
		return errorReply(req, dns.RcodeServerFailure), chain[:base]
	}
	_, _ = r.records.Put(key, up, now)
	// The forwarder's message becomes the reply (Exchange returns a new
	// one, never shared, and Put copies what it keeps): its header is
	// rewritten as SetReply would write it, with the forwarder's rcode and
	// AD bit, rather than a second message built and the sections moved
	// over (a Msg, its question and extra slices per miss).
	up.MsgHdr = dns.MsgHdr{Id: req.Id, Response: true, Opcode: req.Opcode,
		RecursionDesired: req.RecursionDesired, CheckingDisabled: req.CheckingDisabled,
		Rcode: up.Rcode, AuthenticatedData: up.AuthenticatedData}
	up.Question = req.Question[:1:1]
	up.Compress = false // the glue and RRSIGs scrub left pass through; the OPT is ours
	return up, chain
}

// accept makes a forwarder's answer to qs what the record cache keeps and
// the client gets: its escapes kept, its CNAME chain (appended to chain,
// false when too long or looping) bounded, scrubbed to the question's
// bailiwick, its TTLs clamped as a record-cache hit would say them.
func (r *Resolver) accept(qs dns.Question, up *dns.Msg, chain []string) ([]string, bool) {
	cache.EscapeOctets(up.Answer, up.Ns, up.Extra) // packed again, the forwarder's bytes
	base := len(chain)
	chain, ok := answerChain(qs.Name, up.Answer, chain)
	if !ok {
		r.log.Debug("CNAME chain too long or looping", "name", qs.Name, "type", dns.TypeToString[qs.Qtype])
		return chain, false
	}
	scrub(up, qs.Name, qs.Qtype, chain[base:])
	r.records.ClampTTLs(up) // what a hit of the record cache would say
	return chain, true
}

// deadlineOnly is a context that is never cancelled (Done is nil, Err is
// nil) but reports a deadline, for Exchange to bound itself by.
type deadlineOnly struct {
	context.Context
	deadline time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.deadline, true }

// queryTimeout bounds one client query's work on the slow path, forwarders
// included: Exchange gives up at this deadline and the client gets its
// SERVFAIL (the forwarders' own timeout and rounds fit well inside it).
const queryTimeout = 5 * time.Second

// queryContext is the context of a slow-path query that started at start:
// a deadline and nothing to cancel. Nothing cancels a query while it waits
// (a UDP client cannot take its question back; a closed TCP connection
// shows when the answer is written), and a cancellable context would cost
// a timer and a cancel context per miss, and make Exchange watch it during
// every attempt (a context.AfterFunc: about 700 bytes and a lock on the
// parent per miss). The deadline still bounds the Exchange, which checks
// it with the clock and sets it on its sockets.
func queryContext(start time.Time) context.Context {
	return deadlineOnly{Context: context.Background(), deadline: start.Add(queryTimeout)}
}

// unsupportedType reports the query types a resolver is not asked for:
// PowerDNS's list (SyncRes::isUnsupported), RFC 6895's meta types 128–254
// (TKEY, TSIG, IXFR, AXFR, MAILB, MAILA), type 0, OPT, RRSIG, NSEC3 and
// 65535. ANY (255) is asked.
func unsupportedType(t uint16) bool {
	if t >= 128 && t <= 254 {
		return true
	}
	switch t {
	case 0, dns.TypeOPT, dns.TypeRRSIG, dns.TypeNSEC3, 65535:
		return true
	}
	return false
}

// errorReply is an empty reply with rcode.
func errorReply(req *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	return m
}
