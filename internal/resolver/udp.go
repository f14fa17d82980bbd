package resolver

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// maxSlowInFlight bounds the queries on the slow path at once; more are
// dropped and counted (over-capacity-drops), as PowerDNS does past
// max-mthreads, so that a flood of misses cannot exhaust memory.
const maxSlowInFlight = 8192

// udpSocket is one SO_REUSEPORT socket and its reader.
type udpSocket struct {
	conn   *net.UDPConn
	addr   netip.AddrPort
	reader *cache.PacketReader
	shard  *stats.Shard
	slow   chan struct{} // the slow path's semaphore, shared by the sockets
}

func (s *udpSocket) close() { _ = s.conn.Close() }

// serve reads queries until the socket is closed. Packet-cache hits are
// answered here from wire bytes (steps 1–4 of pipeline.go) without an
// allocation; misses go to a goroutine each.
func (s *udpSocket) serve(r *Resolver) {
	buf := make([]byte, 65535)
	out := make([]byte, 0, 65535)
	var q dnswire.Query
	var key cache.PacketKey
	memo := newPolicyMemo()
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		client := from.Addr().Unmap()
		if !r.allowed(client) {
			s.shard.Inc(stats.UnauthorizedUDP) // dropped, as PowerDNS does
			continue
		}
		if err := q.Parse(buf[:n]); err != nil {
			var pe dnswire.ParseError
			errors.As(err, &pe)
			countParseError(s.shard, pe)
			if pe != 0 && !pe.Drop() {
				out = dnswire.AppendError(out[:0], &q, pe.Rcode(), ourUDPSize)
				_, _ = s.conn.WriteToUDPAddrPort(out, from)
			}
			continue
		}
		now := r.now()
		s.shard.Question(false, client.Is6())
		if q.EDNS.DO {
			s.shard.Inc(stats.DNSSECQueries)
		}
		if q.BadVersion() {
			// RFC 6891 §6.1.3, before the packet cache: its key has no
			// EDNS version.
			out = dnswire.AppendError(out[:0], &q, dnswire.RcodeBadVers, ourUDPSize)
			_, _ = s.conn.WriteToUDPAddrPort(out, from)
			s.shard.Replied(dnswire.RcodeBadVers, r.now().Sub(now))
			continue
		}
		v := r.engine.View()
		p := memo.policy(r.engine, &v, client)
		keyed := key.SetQuery(&q, p.CacheKey())
		if keyed {
			if ans, ok := s.reader.Get(&key, q.RawName(), now, out[:0]); ok && len(ans) <= q.EDNS.MaxUDP() {
				dnswire.PatchHeader(ans, &q)
				_, _ = s.conn.WriteToUDPAddrPort(ans, from)
				s.shard.PacketCacheHit(int(ans[3] & 0x0f))
				continue
			}
		}
		s.shard.Inc(stats.PacketCacheMisses)
		select {
		case s.slow <- struct{}{}:
		default:
			s.shard.Inc(stats.OverCapacityDrops)
			continue
		}
		pkt := bytes.Clone(buf[:n])
		var k *cache.PacketKey
		if keyed {
			kc := key
			k = &kc
		}
		go func() {
			defer func() { <-s.slow }()
			s.slowPath(r, pkt, from, client, k, now, p.HasSchedules())
		}()
	}
}

// slowPath answers a packet-cache miss through the pipeline and stores the
// reply under the policy's key.
func (s *udpSocket) slowPath(r *Resolver, pkt []byte, from netip.AddrPort, client netip.Addr, key *cache.PacketKey,
	start time.Time, schedules bool) {
	s.shard.Inc(stats.ConcurrentQueries)
	defer s.shard.Dec(stats.ConcurrentQueries)
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		s.shard.Inc(stats.ClientParseErrors)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply := r.resolve(ctx, &query{req: req, client: client, start: start, shard: s.shard})
	if reply == nil {
		return // drop
	}
	wire, err := finish(req, reply, false)
	if err != nil {
		s.shard.Inc(stats.ServerParseErrors)
		wire, _ = finish(req, errorReply(req, dns.RcodeServerFailure), false)
	}
	if schedules {
		clampToMinute(wire, r.now())
	}
	if key != nil && cacheable(req, reply) {
		_, _ = r.packets.Put(key, wire, r.now())
	}
	_, _ = s.conn.WriteToUDPAddrPort(wire, from)
	s.shard.Replied(reply.Rcode, r.now().Sub(start))
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
