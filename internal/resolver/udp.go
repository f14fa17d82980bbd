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
// recvmmsg returns every datagram waiting (up to dns.udp_batch), each is
// handed to the entry (serve.go), which answers the packet-cache hits
// among them from wire bytes (steps 1–4 of pipeline.go) into the batch's
// reply buffers and hands the misses to a goroutine each (the loop never
// waits for a forwarder), and one sendmmsg writes all the replies. Under
// load a system call carries many packets, at low load a batch is one
// packet and nothing waits for a batch to fill. No allocation on the hit
// path (batchIO decodes the sources in place).
func (s *udpSocket) serve(r *Resolver) {
	b := s.batch
	memo := newPolicyMemo()
	f := newFront(r, s.shard, s.reader, memo)
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
		// A batch of one has nothing to overlap its loads with.
		parsed := n > 1 && s.reader != nil && r.ready.Load()
		if parsed {
			f.warm(&v, b, n)
		}
		for i := range n {
			if !b.from[i].IsValid() {
				continue // not an IP source: nothing to answer
			}
			rq := request{from: b.from[i], transport: policy.TransportUDP, pkt: b.in[i][:b.size[i]],
				start: now, cut: b.size[i] >= maxUDPQuery, parsed: parsed}
			if reply, out := f.serve(s, &rq, &v, i, b.slot()); out == outReply {
				b.queue(reply, i)
			}
		}
		if err := s.flush(b); errors.Is(err, net.ErrClosed) {
			return
		}
	}
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

// recursiveStack is slowPathStack for recursive mode: the recursor's
// iteration, the validator and miekg/dns unpacking a DNSSEC answer (eight
// records for an NSEC3 NXDOMAIN, each RRSIG's and NSEC3's names) run
// deeper than a forwarder's exchange. With 8 KiB the miss goroutine still
// outgrew its stack, twice, deep inside the answer: runtime.newstack was
// 5.3 % of svc-pf's CPU in bench/recursor.sh's miss-nx phase (dnssec:
// validate, perf record of the process), 1.8 % with 32 KiB grown at the
// start. It costs an in-flight recursive miss 32 KiB of stack instead of
// 8 while it runs; forward mode keeps 8.
const recursiveStack = 32 << 10

// growRecursiveStack is growStack to recursiveStack.
//
//go:noinline
func growRecursiveStack(i int) byte {
	var frame [recursiveStack - 3<<10]byte
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

// replyScratch is what the slow path writes its reply with, recycled
// through Resolver.replyBufs: the buffer the reply is packed into, and
// the sender a UDP socket writes it with (udp_linux.go: a raw sendto, with
// the destination's sockaddr and the function the socket's RawConn calls
// made once, not per reply).
type replyScratch struct {
	buf []byte // ourUDPSize bytes
	out replySender
}

func newReplyScratch() any {
	sc := &replyScratch{buf: make([]byte, ourUDPSize)}
	sc.out.init()
	return sc
}

// cacheable says whether a reply may be replayed to the policy class:
// not a truncation, not the debug trace (it names the client).
func cacheable(req, reply *dns.Msg) bool {
	return !reply.Truncated && req.Question[0].Qclass == dns.ClassINET
}

// The socket is the replier of its slow-path queries: a reply is one
// datagram, a dropped query gets nothing.

func (s *udpSocket) send(sc *replyScratch, wire []byte, to netip.AddrPort) error {
	return sc.out.send(s, wire, to)
}
func (s *udpSocket) dropped() {}
func (s *udpSocket) done()    {}

// clampToMinute lowers every TTL of wire to the seconds left in the
// current minute: a policy with schedules may decide otherwise at the next
// one.
func clampToMinute(wire []byte, now time.Time) {
	var offs [64]uint16
	if _, list, err := dnswire.ScanAnswer(wire, offs[:0]); err == nil {
		dnswire.ClampTTLs(wire, list, uint32(max(60-now.Second(), 1)))
	}
}
