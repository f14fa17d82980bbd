package resolver

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// udpSocket is one SO_REUSEPORT socket and its reader.
type udpSocket struct {
	conn   *net.UDPConn
	addr   netip.AddrPort
	reader *cache.PacketReader
	shard  *stats.Shard
	batch  *udpBatch // the reader's buffers, dns.udp_batch datagrams
}

// maxUDPQuery is the largest UDP query read whole; a larger one is
// answered FORMERR. A query is a header, a name of at most 255 bytes, and
// an OPT whose options (cookies, client subnet, padding) stay far below
// this: PowerDNS reads 512 bytes and drops the rest (truncated-drops).
// Per-slot buffers of this size keep a batch small (udp_batch × 4 KiB).
const maxUDPQuery = 4096

// replyCap is the capacity each reply slot starts with: a packet-cache
// answer never exceeds the client's payload size (at most 65535, usually
// 1232 or less); a slot that has to grow keeps its larger buffer.
const replyCap = 4096

func newUDPSocket(conn *net.UDPConn, addr netip.AddrPort, reader *cache.PacketReader, shard *stats.Shard,
	size int) (*udpSocket, error) {
	b, err := newUDPBatch(conn, size)
	if err != nil {
		return nil, err
	}
	return &udpSocket{conn: conn, addr: addr, reader: reader, shard: shard, batch: b}, nil
}

func (s *udpSocket) close() { _ = s.conn.Close() }

// udpBatch is a socket reader's buffers: the datagrams of one recvmmsg and
// the replies of one sendmmsg, allocated once. A reply names the datagram
// it answers (to), not an address: the system call's form of the source
// address (batchIO) goes back unchanged, never decoded and encoded again.
type udpBatch struct {
	in   [][]byte         // datagram buffers, maxUDPQuery bytes each
	size []int            // bytes read into each
	from []netip.AddrPort // each datagram's source
	out  [][]byte         // replies queued
	to   []int            // the datagram (index into in) each reply answers
	bufs [][]byte         // reply buffers, one per out slot, reused across batches
	n    int              // replies queued in out
	io   batchIO          // the system calls' own arrays (udp_linux.go)
}

func newUDPBatch(conn *net.UDPConn, size int) (*udpBatch, error) {
	b := &udpBatch{in: make([][]byte, size), size: make([]int, size), from: make([]netip.AddrPort, size),
		out: make([][]byte, size), to: make([]int, size), bufs: make([][]byte, size)}
	for i := range size {
		b.in[i] = make([]byte, maxUDPQuery)
		b.bufs[i] = make([]byte, 0, replyCap)
	}
	if err := b.io.init(conn, b); err != nil {
		return nil, err
	}
	return b, nil
}

// slot is the buffer the next reply is appended to.
func (b *udpBatch) slot() []byte { return b.bufs[b.n][:0] }

// queue adds reply (built in slot()) to datagram i's source.
func (b *udpBatch) queue(reply []byte, i int) {
	b.bufs[b.n] = reply[:0] // keep a buffer that had to grow
	b.out[b.n] = reply
	b.to[b.n] = i
	b.n++
}

// serve reads queries until the socket is closed, a batch at a time: one
// recvmmsg returns every datagram waiting (up to dns.udp_batch), the
// packet-cache hits among them are answered from wire bytes (steps 1–4 of
// pipeline.go) into the batch's reply buffers, the misses go to a
// goroutine each (the loop never waits for a forwarder), and one sendmmsg
// writes all the replies. Under load a system call carries many packets,
// at low load a batch is one packet and nothing waits for a batch to fill.
// No allocation on the hit path (batchIO decodes the sources in place).
func (s *udpSocket) serve(r *Resolver) {
	b := s.batch
	var q dnswire.Query
	var key cache.PacketKey
	memo := newPolicyMemo()
	for {
		n, err := b.io.read(b)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		// One clock reading and one view per batch: the batch arrived at
		// once, and a view changed during it applies from the next.
		now := r.now()
		v := r.engine.View()
		memo.lookAhead(&v, b.from[:n])
		for i := range n {
			if !b.from[i].IsValid() {
				continue // not an IP source: nothing to answer
			}
			s.handle(r, b, i, now, &v, &q, &key, memo)
		}
		if err := s.flush(b); errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// handle answers one datagram: queued in b, or handed to the slow path, or
// dropped.
func (s *udpSocket) handle(r *Resolver, b *udpBatch, i int, now time.Time, v *policy.View,
	q *dnswire.Query, key *cache.PacketKey, memo *policyMemo) {
	pkt, from := b.in[i][:b.size[i]], b.from[i]
	client := from.Addr().Unmap()
	if !r.allowed(client) {
		s.shard.Inc(stats.UnauthorizedUDP) // dropped, as PowerDNS does
		return
	}
	err := q.Parse(pkt)
	if err == nil && len(pkt) >= maxUDPQuery {
		err = dnswire.ErrTruncated // read cut at maxUDPQuery: not the whole query
	}
	if err != nil {
		var pe dnswire.ParseError
		errors.As(err, &pe)
		countParseError(s.shard, pe)
		if pe != 0 && !pe.Drop() {
			b.queue(dnswire.AppendError(b.slot(), q, pe.Rcode(), ourUDPSize), i)
		}
		return
	}
	s.shard.Question(false, client.Is6())
	if q.EDNS.DO {
		s.shard.Inc(stats.DNSSECQueries)
	}
	if q.BadVersion() {
		// RFC 6891 §6.1.3, before the packet cache: its key has no EDNS
		// version.
		b.queue(dnswire.AppendError(b.slot(), q, dnswire.RcodeBadVers, ourUDPSize), i)
		s.shard.Replied(dnswire.RcodeBadVers, r.now().Sub(now))
		return
	}
	p := memo.policyFor(r.engine, v, client, i)
	keyed := key.SetQuery(q, p.CacheKey())
	if keyed {
		if ans, ok := s.reader.Get(key, q.RawName(), now, b.slot()); ok && len(ans) <= q.EDNS.MaxUDP() {
			dnswire.PatchHeader(ans, q)
			b.queue(ans, i)
			s.shard.PacketCacheHit(int(ans[3] & 0x0f))
			return
		}
	}
	s.shard.Inc(stats.PacketCacheMisses)
	if !r.inflight.acquire(clientKey{addr: client}) {
		// Dropped, as PowerDNS drops past max-mthreads: a client over
		// its bound is flooding (or everyone is), and a reply would
		// cost the reader a slot of its batch and could reflect a
		// forged source's flood; a stub that is not flooding asks
		// again after its timeout.
		s.shard.Inc(stats.OverCapacityDrops)
		return
	}
	// One allocation carries the query and its packet-cache key (the
	// key's bytes, not the fixed array: ~350 bytes less per miss). A key
	// SetQuery refused is unset: nothing is appended.
	n := len(pkt)
	pkt = key.Append(append(make([]byte, 0, n+key.Len()), pkt...))
	go func() {
		defer r.inflight.release(clientKey{addr: client})
		growStack(n)
		s.slowPath(r, pkt[:n:n], pkt[n:], from, client, p, now)
	}()
}

// slowPathStack is what a miss's goroutine needs at its deepest (miekg/dns
// unpacking the forwarder's answer inside Exchange, ~4.5 KiB): over 4 KiB,
// within 8.
const slowPathStack = 8 << 10

// growStack grows the calling goroutine's stack to slowPathStack at once,
// while it is nearly empty. A new goroutine starts with the runtime's
// adaptive size (2 or 4 KiB under bench/resolver.sh's miss load: the
// average depth of the stacks the last GC scanned); the miss path outgrew
// it deep inside the forwarder's answer (dns.UnpackDomainName), where the
// runtime copied the stack and adjusted the pointers of its ~15 frames,
// once per miss: runtime.morestack was ~6 % of a miss's CPU, half of it
// that copy. A frame this large makes the runtime double the stack until
// it fits, here, where one frame is copied; what is left is allocating
// the 8 KiB stack, which the runtime frees when the goroutine ends (it is
// not the starting size). Running the whole miss on top of a reserve, to
// lift that average to 8 KiB, was tried: the average still stayed under
// 4 KiB in bench/resolver.sh, and the reserve made the deepest point
// overflow 8 KiB instead. The array is read at an index known only at run
// time (i is any number) so that the compiler keeps it.
//
//go:noinline
func growStack(i int) byte {
	var frame [slowPathStack - 3<<10]byte
	return frame[uint(i)%uint(len(frame))]
}

// flush writes the queued replies, as few sendmmsg calls as the kernel
// allows; a reply the kernel refuses (a vanished route, a full buffer) is
// skipped, as a failed sendto was. The slots are cleared so that the batch
// does not keep the replies' buffers referenced twice.
func (s *udpSocket) flush(b *udpBatch) error {
	var err error
	for done := 0; done < b.n; {
		var n int
		n, err = b.io.write(b, done)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				break
			}
			// sendmmsg fails only on the first reply it could not send:
			// skip that one.
			n = 1
		}
		done += n
	}
	clear(b.out[:b.n])
	b.n = 0
	return err
}

// slowPath answers a packet-cache miss through the pipeline and stores the
// reply under the policy's key.
//
// key holds the packet-cache key's bytes (cache.PacketKey.Append), empty
// when the query has none.
func (s *udpSocket) slowPath(r *Resolver, pkt, key []byte, from netip.AddrPort, client netip.Addr, p *policy.Policy,
	start time.Time) {
	s.shard.Inc(stats.ConcurrentQueries)
	defer s.shard.Dec(stats.ConcurrentQueries)
	req := unpackQuery(pkt, s.shard)
	if req == nil {
		s.formErr(r, pkt, from, start)
		return
	}
	ctx := queryContext(start)
	reply := r.resolve(ctx, &query{req: req, client: client, start: start, shard: s.shard, policy: p})
	if reply == nil {
		return // drop
	}
	// The reply is packed into a pooled buffer: the packet cache copies
	// it and the kernel has it once written. A UDP reply is cut to at
	// most ourUDPSize, the buffer's length.
	sc := r.replyBufs.Get().(*replyScratch)
	defer r.replyBufs.Put(sc)
	wire, err := finish(sc.buf, req, reply, false)
	if err != nil {
		s.shard.Inc(stats.ServerParseErrors)
		wire, _ = finish(sc.buf, req, errorReply(req, dns.RcodeServerFailure), false)
	}
	if p.HasSchedules() {
		clampToMinute(wire, r.now())
	}
	if len(key) > 0 && cacheable(req, reply) {
		r.storePacket(key, wire)
	}
	_ = sc.out.send(s, wire, from)
	s.shard.Replied(reply.Rcode, r.now().Sub(start))
}

// formErr answers FORMERR to a query unpackQuery refused. Out of
// slowPath's frame, which every miss's stack holds.
//
//go:noinline
func (s *udpSocket) formErr(r *Resolver, pkt []byte, from netip.AddrPort, start time.Time) {
	sc := r.replyBufs.Get().(*replyScratch)
	defer r.replyBufs.Put(sc)
	_ = sc.out.send(s, appendFormErr(sc.buf[:0], pkt), from)
	s.shard.Replied(dnswire.RcodeFormatError, r.now().Sub(start))
}

// replyScratch is what the UDP slow path writes its reply with, recycled
// through Resolver.replyBufs: the buffer the reply is packed into, and
// the sender that writes it (udp_linux.go: a raw sendto, with the
// destination's sockaddr and the function the socket's RawConn calls made
// once, not per reply).
type replyScratch struct {
	buf []byte // ourUDPSize bytes
	out replySender
}

func newReplyScratch() any {
	sc := &replyScratch{buf: make([]byte, ourUDPSize)}
	sc.out.init()
	return sc
}

// storePacket stores a miss's reply under the key bytes slowPath was
// handed. Out of slowPath's frame: the key's array is on the stack only
// while the entry is stored, not under the whole miss.
//
//go:noinline
func (r *Resolver) storePacket(keyBytes, wire []byte) {
	var key cache.PacketKey
	if key.SetBytes(keyBytes) {
		_, _ = r.packets.Put(&key, wire, r.now())
	}
}

// cacheable says whether a reply may be replayed to the policy class:
// not a truncation, not the debug trace (it names the client).
func cacheable(req, reply *dns.Msg) bool {
	return !reply.Truncated && req.Question[0].Qclass == dns.ClassINET
}

// clampToMinute lowers every TTL of wire to the seconds left in the
// current minute: a policy with schedules may decide otherwise at the next
// one.
func clampToMinute(wire []byte, now time.Time) {
	var offs [64]uint16
	if _, list, err := dnswire.ScanAnswer(wire, offs[:0]); err == nil {
		dnswire.ClampTTLs(wire, list, uint32(max(60-now.Second(), 1)))
	}
}
