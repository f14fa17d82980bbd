package resolver

import (
	"errors"
	"net/netip"
	"strings"
	"time"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// The one entry for every transport. A transport adapter (udp.go, tcp.go,
// which DoT also runs on; doh.go, doq.go) owns its sockets: reading, framing, writing,
// its own bounds. Everything a query goes through once it is read is
// here, the same for every transport: allow_from, parsing, counting,
// BADVERS and FORMERR, the packet cache, the slow path's slots, the
// decision (pipeline.go), the reply and the observer. An adapter hands
// each query to front.serve and writes what it returns; a query that goes
// to the slow path is answered through the adapter's replier.

// request is one query as an adapter hands it to the entry.
type request struct {
	from      netip.AddrPort // the client's address
	transport policy.Transport
	// clientID is the client id an encrypted transport reads (a DoH path
	// segment, a TLS SNI label); "" for UDP and TCP, where the source
	// address alone identifies the subscriber.
	clientID string
	pkt      []byte    // the query
	start    time.Time // when it arrived (a UDP batch's clock)
	// cut: the transport read only part of the message (a datagram larger
	// than maxUDPQuery): answered FORMERR.
	cut bool
	// owned: pkt is the query's own buffer (a TCP message), which the
	// slow path may keep; otherwise the adapter reuses it (a UDP batch
	// slot) and the slow path gets a copy.
	owned bool
	// inline: the adapter's goroutine is this query's own and waits for
	// its answer anyway (a DoH request's handler, a DoQ stream's): the
	// slow path runs on it, and serve returns outPending once the
	// replier has the answer. A goroutine of its own, started and waited
	// for, was a third of a DoH cache hit's CPU (bench/encrypted.sh).
	inline bool
	// inlineHit: as inline, but only when the record cache holds the
	// answer (heldAnswer): the adapter's goroutine reads other queries
	// too (an HTTP/2 connection's reader) and must not wait for the
	// forwarders, while a goroutine of its own for an answer at hand
	// (started, its stack grown, its reply written alone) was most of
	// what a DoH record-cache hit cost besides HTTP/2.
	inlineHit bool
	// held is the replier of a slow path run inline, when it is not the
	// one serve is given (nil: that one): a stream's reader queues the
	// answers it builds itself and writes those ready together at once,
	// while a miss's goroutine writes its own.
	held replier
	// parsed: the query is parsed already, at serve's index i of the
	// front's batch (front.warm).
	parsed bool
}

// outcome is what an adapter does after front.serve.
type outcome uint8

const (
	// outReply: send the reply serve returned.
	outReply outcome = iota
	// outPending: the slow path owns the query and answers it through the
	// adapter's replier.
	outPending
	// outClose: no reply. A datagram is dropped; a stream is closed (what
	// came was not a query, or a client outside allow_from).
	outClose
)

// replier is how the slow path hands a reply back to the adapter the
// query came from. Its methods are called from the query's goroutine.
type replier interface {
	// send writes a reply; to is the query's source (a datagram's
	// destination; a stream knows its own). sc's buffers are free for the
	// adapter to use until send returns.
	send(sc *replyScratch, wire []byte, to netip.AddrPort) error
	// dropped: the policy dropped the query. Nothing over a datagram; a
	// stream closes its connection, as PowerDNS does.
	dropped()
	// done: the slow path is over with the query (called once per
	// outPending, after send or dropped).
	done()
}

// front is the entry's state for one adapter reader (a UDP socket's
// reader, a TCP connection's): scratch space reused query after query,
// used by one goroutine at a time. Nothing of it reaches the slow path.
type front struct {
	r     *Resolver
	shard *stats.Shard
	// reader is the transport's handle on the packet cache; nil: the
	// transport does not use it (TCP: its replies are not cut to a
	// datagram's size, and a tcp-only RPZ rule decides otherwise there),
	// and the slow path finds the client's policy.
	reader *cache.PacketReader
	// memo finds the policy, the packet cache's key, without the engine's
	// shared cache (the UDP reader's, with lookAhead); set with reader.
	memo *policyMemo
	q    dnswire.Query
	key  cache.PacketKey
	obs  frontObs // the observer's event and its scratch (Config.Observer)
	// batch is a UDP batch parsed ahead (warm); the UDP reader's only.
	batch parsedBatch
}

// parsedBatch is a UDP batch's queries, parsed before any of them is
// served, and the packet-cache keys they will be looked up under.
type parsedBatch struct {
	q    []dnswire.Query
	err  []error
	keys []cache.PacketKey
}

// warm parses the first n datagrams of b and reads the packet cache's
// memory for all of them at once (cache.PacketReader.Warm) before any is
// served: a hit from one of many subscribers finds the cache's lines cold,
// and one query after another, each hit would wait for its three or four
// loads from memory in turn (the packet cache's lookup was about a tenth
// of a hit's CPU in bench/resolver.sh's hit-subs, most of it waiting for
// the bucket). serve then takes the queries as parsed here (rq.parsed)
// and finds the policies in the memo. Only for the reader's own batches,
// with the packet cache in use (f.reader, ready).
func (f *front) warm(v *policy.View, b *udpBatch, n int) {
	pb := &f.batch
	if len(pb.q) < n {
		pb.q, pb.err, pb.keys = make([]dnswire.Query, len(b.in)), make([]error, len(b.in)), make([]cache.PacketKey, len(b.in))
	}
	for i := range n {
		q, k := &pb.q[i], &pb.keys[i]
		k.Reset()
		pb.err[i] = q.Parse(b.in[i][:b.size[i]])
		if pb.err[i] != nil || !b.from[i].IsValid() || q.BadVersion() {
			continue // serve answers these without the cache
		}
		p, _ := f.memo.policyFor(f.r.engine, v, b.from[i].Addr().Unmap(), i)
		k.SetQuery(q, p.CacheKey())
	}
	f.reader.Warm(pb.keys[:n])
}

// frontObs is what the reader's own observer calls use.
type frontObs struct {
	ev   Answered
	name []byte    // the question's text
	cats [8]uint16 // a packet-cache hit's categories (more: allocated)
}

func newFront(r *Resolver, shard *stats.Shard, reader *cache.PacketReader, memo *policyMemo) *front {
	return &front{r: r, shard: shard, reader: reader, memo: memo}
}

// serve runs steps 1–4 of pipeline.go on rq, under view v (i is rq's
// index in the batch the memo's lookAhead prepared). A reply answered
// here (a packet-cache hit, FORMERR, NOTIMP, BADVERS, a stream's refusal
// for capacity) is appended to dst and returned with outReply; a miss
// takes a slow-path slot and goes to a goroutine of its own, or runs on
// the caller's with rq.inline (outPending);
// the rest is outClose. A packet-cache hit allocates nothing.
func (f *front) serve(w replier, rq *request, v *policy.View, i int, dst []byte) ([]byte, outcome) {
	r, sh, q := f.r, f.shard, &f.q
	client := rq.from.Addr().Unmap()
	// 1. allow_from
	if !r.allowed(client) {
		sh.Inc(unauthorized(rq.transport)) // a datagram dropped, a stream closed, as PowerDNS does
		return nil, outClose
	}
	// 2. parse
	var err error
	if rq.parsed {
		q, err = &f.batch.q[i], f.batch.err[i]
	} else {
		err = q.Parse(rq.pkt)
	}
	if err == nil && rq.cut {
		err = dnswire.ErrTruncated // not the whole query
	}
	if err != nil {
		var pe dnswire.ParseError
		errors.As(err, &pe)
		countParseError(sh, pe)
		if pe == 0 || pe.Drop() {
			return nil, outClose // no header, or a response: nothing to answer
		}
		reply := dnswire.AppendError(dst, q, pe.Rcode(), ourUDPSize)
		if r.obs != nil {
			f.observe(rq, q, v, client, found{}, pe.Rcode(), reply, nil, CachedNone)
		}
		return reply, outReply
	}
	sh.Question(rq.transport, client.Is6())
	if q.EDNS.DO {
		sh.Inc(stats.DNSSECQueries)
	}
	if q.BadVersion() {
		// RFC 6891 §6.1.3, before the packet cache: its key has no EDNS
		// version.
		reply := dnswire.AppendError(dst, q, dnswire.RcodeBadVers, ourUDPSize)
		sh.Replied(dnswire.RcodeBadVers, r.now().Sub(rq.start))
		if r.obs != nil {
			f.observe(rq, q, v, client, found{}, dnswire.RcodeBadVers, reply, nil, CachedNone)
		}
		return reply, outReply
	}
	// 3. client → policy, 4. the packet cache
	var p *policy.Policy
	// The client's session, when the memo found it: passed by value (its
	// address taken, it would move to the heap for every query, hits
	// without an observer included: the slow path's goroutine captures it).
	var sess found
	keyed, key := false, &f.key
	// While the policy data has not loaded (unready.go) the packet cache
	// is neither read nor written: what is answered then must not outlive
	// it. Once ready this is one atomic load.
	if f.reader != nil && r.ready.Load() {
		p, sess = f.memo.policyFor(r.engine, v, client, i)
		if rq.parsed {
			key = &f.batch.keys[i] // warm built it, under the same policy
			keyed = key.Len() > 0
		} else {
			keyed = key.SetQuery(q, p.CacheKey())
		}
		if keyed {
			ans, note, ok, refresh := f.reader.GetRefresh(key, q.RawName(), rq.start, dst)
			if refresh {
				r.prefetchQuery(q) // stale.go: due for a background refresh
			}
			if ok && (!rq.transport.Datagram() || len(ans) <= q.EDNS.MaxUDP()) {
				dnswire.PatchHeader(ans, q)
				sh.PacketCacheHit(int(ans[3] & 0x0f))
				countNote(sh, note)
				if r.obs != nil {
					f.observe(rq, q, v, client, sess, int(ans[3]&0x0f), ans, note, CachedPacket)
				}
				return ans, outReply
			}
		}
		sh.Inc(stats.PacketCacheMisses)
	}
	// the slow path
	ck := clientKey{addr: client}
	if !r.inflight.acquire(ck) {
		// Over the client's bound (or the slow path's). A datagram is
		// dropped, as PowerDNS drops past max-mthreads: a client over
		// its bound is flooding (or everyone is), and a reply would cost
		// the reader a slot of its batch and could reflect a forged
		// source's flood; a stub that is not flooding asks again after
		// its timeout. A stream gets SERVFAIL, which a stub takes as "try
		// again or elsewhere": a dropped query would leave it waiting on
		// its connection. Counted in over-capacity-drops only, so that
		// questions = answers* + packetcache-hits + over-capacity-drops +
		// policy-drops still holds.
		sh.Inc(stats.OverCapacityDrops)
		if rq.transport.Datagram() {
			return nil, outClose
		}
		reply := dnswire.AppendError(dst, q, dnswire.RcodeServerFailure, ourUDPSize)
		if r.obs != nil {
			f.observe(rq, q, v, client, sess, dnswire.RcodeServerFailure, reply, nil, CachedNone)
		}
		return reply, outReply
	}
	// One allocation carries the query and its packet-cache key (the
	// key's bytes, not the fixed array: ~350 bytes less per miss), unless
	// the query's buffer is its own and there is no key.
	n, pkt := len(rq.pkt), rq.pkt
	keyLen := 0
	if keyed {
		keyLen = key.Len()
	}
	if keyed || !rq.owned {
		pkt = append(make([]byte, 0, n+keyLen), pkt...)
		if keyed {
			pkt = key.Append(pkt)
		}
	}
	t, from, start, cached, id := rq.transport, rq.from, rq.start, f.reader != nil, rq.clientID
	if rq.inline || rq.inlineHit && f.heldAnswer(q) {
		if rq.held != nil {
			w = rq.held
		}
		func() {
			// deferred: net/http recovers a handler's panic, and the
			// slot must come back then too
			defer w.done()
			defer r.inflight.release(ck)
			r.slowPath(w, sh, t, pkt[:n:n], pkt[n:], from, client, p, sess, start, cached, id)
		}()
		return nil, outPending
	}
	go func() {
		defer w.done()
		defer r.inflight.release(clientKey{addr: client})
		if r.rec != nil {
			growRecursiveStack(n)
		} else {
			growStack(n)
		}
		r.slowPath(w, sh, t, pkt[:n:n], pkt[n:], from, client, p, sess, start, cached, id)
	}()
	return nil, outPending
}

// heldAnswer reports whether the record cache holds a fresh answer to q
// (the slow path will not ask the forwarders for it, but for a block's
// CNAME target, rarely). The name's text goes to f.obs.name, the
// front's scratch, looked up without a copy.
func (f *front) heldAnswer(q *dnswire.Query) bool {
	if !q.HasQuestion() || q.QClass != dns.ClassINET {
		return false
	}
	f.obs.name = dnswire.AppendNameText(f.obs.name[:0], q.Name())
	k := cache.RecordKey{Name: unsafe.String(unsafe.SliceData(f.obs.name), len(f.obs.name)), Type: q.QType, Class: q.QClass,
		DO: q.EDNS.Present && q.EDNS.DO}
	return f.r.records.Holds(k, f.r.now())
}

// unauthorized is the counter of a query refused by allow_from.
func unauthorized(t policy.Transport) stats.Counter {
	if t == policy.TransportUDP || t == policy.TransportDoQ {
		return stats.UnauthorizedUDP
	}
	return stats.UnauthorizedTCP
}

// slowPath answers a packet-cache miss through the pipeline (steps 5–9)
// and hands the reply to w; over a transport that uses the packet cache
// (cached) it stores the reply under the policy's key.
//
// key holds the packet-cache key's bytes (cache.PacketKey.Append), empty
// when the query has none. p is the client's policy when serve found it
// (then the reply is decided by the policy it is stored under), else nil;
// sess its session, when serve found it with p. clientID is the
// request's (an encrypted transport's; "" otherwise).
func (r *Resolver) slowPath(w replier, sh *stats.Shard, t policy.Transport, pkt, key []byte, from netip.AddrPort,
	client netip.Addr, p *policy.Policy, sess found, start time.Time, cached bool, clientID string) {
	sh.Inc(stats.ConcurrentQueries)
	defer sh.Dec(stats.ConcurrentQueries)
	req := unpackQuery(pkt, sh)
	if req == nil {
		r.formErr(w, sh, t, pkt, from, start, clientID)
		return
	}
	q := &query{req: req, client: client, clientID: clientID, transport: t, start: start, shard: sh, policy: p, sess: sess}
	var ob *slowObs
	if r.obs != nil {
		ob = newSlowObs(q)
	}
	reply := r.resolve(queryContext(start), q)
	if reply == nil {
		w.dropped()
		if ob != nil {
			r.observeSlow(ob, q, from, RcodeDropped, r.now())
		}
		return
	}
	// The reply is packed into a pooled buffer: the packet cache copies
	// it, the adapter writes it before send returns. A datagram's reply is
	// cut to at most ourUDPSize, the buffer's length; a stream's may be
	// longer (packed into a new buffer).
	sc := r.replyBufs.Get().(*replyScratch)
	defer r.replyBufs.Put(sc)
	wire, err := finish(sc.buf, req, reply, t)
	if err != nil || len(wire) > dnswire.MaxMsgLen {
		sh.Inc(stats.ServerParseErrors)
		reply = errorReply(req, dns.RcodeServerFailure)
		wire, _ = finish(sc.buf, req, reply, t)
	}
	if cached && q.policy != nil && q.policy.HasSchedules() {
		clampToMinute(wire, r.now())
	}
	if len(key) > 0 && !q.stale && cacheable(req, reply) {
		r.storePacket(key, wire, ob, q.head)
	}
	_ = w.send(sc, wire, from)
	at := r.now() // one reading for the latency and the observer
	sh.Replied(reply.Rcode, at.Sub(start))
	if ob != nil {
		ob.ev.Reply = wire
		r.observeSlow(ob, q, from, reply.Rcode, at)
	}
}

// formErr answers FORMERR to a query unpackQuery refused. Out of
// slowPath's frame, which every miss's stack holds.
//
//go:noinline
func (r *Resolver) formErr(w replier, sh *stats.Shard, t policy.Transport, pkt []byte, from netip.AddrPort, start time.Time,
	clientID string) {
	sc := r.replyBufs.Get().(*replyScratch)
	defer r.replyBufs.Put(sc)
	wire := appendFormErr(sc.buf[:0], pkt)
	_ = w.send(sc, wire, from)
	at := r.now()
	sh.Replied(dnswire.RcodeFormatError, at.Sub(start))
	if r.obs != nil {
		var dq dnswire.Query
		_ = dq.Parse(pkt)
		ev := &Answered{Type: dq.QType, Transport: t, Client: from, ClientID: clientID, Rcode: dnswire.RcodeFormatError, At: at,
			Took: at.Sub(start), Reply: wire}
		if dq.HasQuestion() {
			ev.Name = string(dnswire.AppendNameText(nil, dq.Name()))
		}
		v := r.engine.View()
		ev.Subscriber = subscriberOf(&v, from.Addr().Unmap())
		r.obs.Answered(ev)
	}
}

// storePacket stores a miss's reply under the key bytes slowPath was
// handed, with the decision's summary when there is an observer to report
// it on the hits, else its head (for svcpf_resolver_decisions_total). Out of slowPath's frame: the key's array is on the
// stack only while the entry is stored, not under the whole miss.
//
//go:noinline
func (r *Resolver) storePacket(keyBytes, wire []byte, ob *slowObs, head noteHead) {
	var key cache.PacketKey
	if !key.SetBytes(keyBytes) {
		return
	}
	var note []byte
	var buf [512]byte
	switch {
	case ob != nil:
		note = appendNote(buf[:0], &ob.ev.Decision)
	case head[0] != 0:
		note = appendHeadNote(buf[:0], head)
	}
	_, _ = r.packets.Put(&key, wire, note, r.now())
}

// slowObs is a slow-path query's observer event: one allocation, made
// only when there is an observer.
type slowObs struct {
	ev   Answered
	cats [8]uint16
}

func newSlowObs(q *query) *slowObs {
	ob := &slowObs{}
	ob.ev.Decision.Categories = ob.cats[:0]
	q.sum = &ob.ev.Decision
	return ob
}

// observeSlow reports a slow-path query; q.sum (ob's) holds its decision,
// at is when its reply was made.
//
//go:noinline
func (r *Resolver) observeSlow(ob *slowObs, q *query, from netip.AddrPort, rcode int, at time.Time) {
	ev := &ob.ev
	qs := q.req.Question[0]
	ev.Name, ev.Type = strings.ToLower(qs.Name), qs.Qtype
	ev.Transport, ev.Client, ev.ClientID, ev.Rcode = q.transport, from, q.clientID, rcode
	if q.fromRecords {
		ev.Cached = CachedRecord
	}
	if q.sess.known {
		ev.Subscriber = q.sess.subscriber()
	} else {
		v := r.engine.View()
		ev.Subscriber = subscriberOf(&v, q.client)
	}
	ev.At, ev.Took = at, at.Sub(q.start)
	r.obs.Answered(ev)
}

// observe reports a query answered by the reader itself: a packet-cache
// hit (note is the summary stored with it), or a reply with no decision.
// sess, when not nil, is the client's session as the policy memo found it
// under v (not looked up again when known).
//
//go:noinline
func (f *front) observe(rq *request, q *dnswire.Query, v *policy.View, client netip.Addr, sess found, rcode int,
	reply, note []byte, cached Cached) {
	o := &f.obs
	at := f.r.now()
	o.ev = Answered{Transport: rq.transport, Client: rq.from, ClientID: rq.clientID, Rcode: rcode, Cached: cached, Reply: reply,
		At: at, Took: at.Sub(rq.start)}
	if q.HasQuestion() {
		o.name = dnswire.AppendNameText(o.name[:0], q.Name())
		// A view of the reader's buffer, rewritten by its next query: an
		// observer copies what it keeps (Observer).
		o.ev.Name, o.ev.Type = unsafe.String(unsafe.SliceData(o.name), len(o.name)), q.QType
	}
	if sess.known {
		o.ev.Subscriber = sess.subscriber()
	} else {
		o.ev.Subscriber = subscriberOf(v, client)
	}
	readNote(&o.ev.Decision, note, o.cats[:0])
	f.r.obs.Answered(&o.ev)
}

// found is a client's session as the path that answered found it: known
// when it was looked up, ok when the client has one (s).
type found struct {
	s         sessionindex.Entry
	ok, known bool
}

// subscriber is the Subscriber of a known session.
func (fs *found) subscriber() Subscriber {
	if !fs.ok {
		return Subscriber{}
	}
	return subscriberFrom(fs.s)
}

// subscriberOf is the session client's address maps to under v.
func subscriberOf(v *policy.View, client netip.Addr) Subscriber {
	if v.Sessions == nil {
		return Subscriber{}
	}
	s, ok := v.Sessions.LookupIP(client)
	if !ok {
		return Subscriber{}
	}
	return subscriberFrom(s)
}

func subscriberFrom(s sessionindex.Entry) Subscriber {
	return Subscriber{Org: s.Org(), SessionID: s.ID(), Username: s.Username(), DeviceID: s.DeviceID(), Location: s.Location(),
		Handle: s.Slot() + 1}
}

// countParseError counts a packet dnswire refused as PowerDNS does: a
// response or an opcode other than QUERY is not a query at all
// (ignored-packets), anything else a query that does not parse
// (client-parse-errors).
func countParseError(sh *stats.Shard, pe dnswire.ParseError) {
	if pe == dnswire.ErrNotQuery || pe == dnswire.ErrOpcode {
		sh.Inc(stats.IgnoredPackets)
		return
	}
	sh.Inc(stats.ClientParseErrors)
}

// unpackQuery unpacks, for the pipeline, a query dnswire accepted; nil
// when miekg/dns refuses it, counted client-parse-errors, and the caller
// answers appendFormErr's FORMERR over UDP and TCP alike. dnswire checks
// what the fast path reads and skips the rest; miekg/dns also checks the
// content of every option and record: a client-subnet option of an unknown
// family, with a source prefix longer than its address, or shorter than
// its 4-byte head, a TSIG record cut short.
func unpackQuery(pkt []byte, sh *stats.Shard) *dns.Msg {
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		sh.Inc(stats.ClientParseErrors)
		return nil
	}
	return req
}

// appendFormErr appends the FORMERR for pkt, a query dnswire accepted and
// unpackQuery refused: dnswire's error reply (its id, question and EDNS
// echoed), as for the queries dnswire refuses itself.
func appendFormErr(dst, pkt []byte) []byte {
	var q dnswire.Query
	_ = q.Parse(pkt) // it parsed before: the header, question and EDNS are there
	return dnswire.AppendError(dst, &q, dnswire.RcodeFormatError, ourUDPSize)
}
