package resolver_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// burstKind is what one query of a burst is, and what its reply must be.
type burstKind int

const (
	burstHit     burstKind = iota // a cached name, in the letter case of the query
	burstMiss                     // a name nobody asked: the slow path
	burstFormErr                  // QDCOUNT 2: FORMERR from the reader
	burstBadVers                  // EDNS version 1: BADVERS from the reader
)

// burst is n queries sent back to back, without reading, so that the
// server's recvmmsg finds many of them at once: every fourth kind in turn,
// each with its own id and, for hits, its own spelling of the name.
func burst(t testing.TB, n int, tag string) (pkts [][]byte, kinds map[uint16]burstKind, names map[uint16]string) {
	t.Helper()
	kinds, names = map[uint16]burstKind{}, map[uint16]string{}
	for i := range n {
		id := uint16(0x1000 + i)
		k := burstKind(i % 4)
		var m *dns.Msg
		switch k {
		case burstHit:
			name := "BaTcH.test."
			if i%8 == 0 {
				name = "bAtCh.TEST."
			}
			m = query(name, dns.TypeA, 1232, false)
		case burstMiss:
			m = query(fmt.Sprintf("%s-%d.batch.test", tag, i), dns.TypeA, 1232, false)
		case burstFormErr:
			m = query("formerr.test", dns.TypeA, 1232, false)
			m.Question = append(m.Question, m.Question[0])
		case burstBadVers:
			m = query("badvers.test", dns.TypeA, 1232, false)
			m.IsEdns0().SetVersion(1)
		}
		m.Id = id
		kinds[id], names[id] = k, m.Question[0].Name
		pkts = append(pkts, mustPack(t, m))
	}
	return pkts, kinds, names
}

// TestUDPBatches: bursts of queries that a socket's reader takes several
// at a time (recvmmsg) and answers several at a time (sendmmsg), with
// batches of 1, of 3 (a burst spans many batches) and the default: every
// query gets its own reply — its id, its spelling of the name, its rcode —
// hits, misses handed to the slow path, FORMERR and BADVERS mixed in one
// batch, from several clients at once; the statistics count each query
// once, as the per-packet reader did.
func TestUDPBatches(t *testing.T) {
	for _, size := range []int{1, 3, 0} {
		t.Run(fmt.Sprintf("udp_batch=%d", size), func(t *testing.T) {
			e := newEnv(t, func(c *resolver.Config) { c.UDPBatch = size })
			e.mustAsk("udp", "", query("batch.test", dns.TypeA, 1232, false)) // the hits' cache entry
			const clients, perClient = 3, 40
			before := e.stats("questions", "packetcache-hits", "packetcache-misses", "client-parse-errors")
			conns := make([]*net.UDPConn, clients)
			all := make([]map[uint16]burstKind, clients)
			allNames := make([]map[uint16]string, clients)
			for c := range clients {
				conns[c] = e.udpClient("")
				var pkts [][]byte
				pkts, all[c], allNames[c] = burst(t, perClient, fmt.Sprintf("s%dc%d", size, c))
				for _, p := range pkts {
					if _, err := conns[c].Write(p); err != nil {
						t.Fatal(err)
					}
				}
			}
			for c := range clients {
				got := map[uint16]bool{}
				for range perClient {
					b := readUDP(t, conns[c], bound)
					if b == nil {
						t.Fatalf("client %d: %d of %d replies within %v", c, len(got), perClient, bound)
					}
					m := mustUnpack(t, b)
					k, ok := all[c][m.Id]
					if !ok || got[m.Id] {
						t.Fatalf("client %d: reply id %#x unexpected or twice", c, m.Id)
					}
					got[m.Id] = true
					want := map[burstKind]int{burstHit: dns.RcodeSuccess, burstMiss: dns.RcodeSuccess,
						burstFormErr: dns.RcodeFormatError, burstBadVers: dns.RcodeBadVers}[k]
					if !m.Response || m.Rcode != want {
						t.Errorf("client %d id %#x: rcode %s, want %s", c, m.Id, dns.RcodeToString[m.Rcode], dns.RcodeToString[want])
					}
					if k == burstHit || k == burstMiss {
						if len(m.Question) != 1 || m.Question[0].Name != allNames[c][m.Id] || len(m.Answer) != 1 {
							t.Errorf("client %d id %#x: question %v answer %v, want %q answered", c, m.Id, m.Question, m.Answer, allNames[c][m.Id])
						}
					}
					if k == burstHit && !strings.Contains(string(b), "\x05"+allNames[c][m.Id][:5]) {
						t.Errorf("client %d id %#x: raw reply lacks the question as asked (%q)", c, m.Id, allNames[c][m.Id])
					}
				}
			}
			n := uint64(clients * perClient / 4)
			e.wantMoved("bursts", before, map[string]uint64{
				"questions":           3 * n, // hits, misses, BADVERS; FORMERR is not a question
				"packetcache-hits":    n,
				"packetcache-misses":  n,
				"client-parse-errors": n,
			})
		})
	}
}

// TestUDPOversizeQuery: a UDP query longer than the reader's 4 KiB slot
// (a valid query padded with an EDNS option) is answered FORMERR and
// counted in client-parse-errors, never answered from its first 4 KiB;
// one just under the slot is answered normally.
func TestUDPOversizeQuery(t *testing.T) {
	e := newEnv(t, nil)
	padded := func(total int) []byte {
		m := query("pad.test", dns.TypeA, 1232, false)
		m.Id = badID
		base := len(mustPack(t, m))
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_PADDING{Padding: make([]byte, total-base-4)})
		b := mustPack(t, m)
		if len(b) != total {
			t.Fatalf("padded query is %d bytes, want %d", len(b), total)
		}
		return b
	}
	before := e.stats("client-parse-errors", "questions")
	checkBadReply(t, e.rawUDP("", padded(5000)), dns.RcodeFormatError)
	e.wantMoved("oversize", before, map[string]uint64{"client-parse-errors": 1, "questions": 0})

	before = e.stats("client-parse-errors", "questions")
	m := mustUnpack(t, e.rawUDP("", padded(4000)))
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("a 4000-byte query: %v", m)
	}
	e.wantMoved("just under", before, map[string]uint64{"client-parse-errors": 0, "questions": 1})
}

// TestUDPBatchConfig: dns.udp_batch above MaxUDPBatch is refused by New.
func TestUDPBatchConfig(t *testing.T) {
	_, err := resolver.New(resolver.Config{
		Listen:     []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")},
		Forwarders: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")},
		Engine:     testEngine(t, nil),
		UDPBatch:   resolver.MaxUDPBatch + 1,
	})
	if err == nil || !strings.Contains(err.Error(), "dns.udp_batch") {
		t.Fatalf("New with udp_batch %d: err %v, want a dns.udp_batch error", resolver.MaxUDPBatch+1, err)
	}
}

// TestDefaultUDPSockets: dns.udp_sockets 0 means half of GOMAXPROCS and
// never none, so a single-core machine still serves UDP.
func TestDefaultUDPSockets(t *testing.T) {
	for procs, want := range map[int]int{1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 16: 8} {
		if got := resolver.DefaultUDPSockets(procs); got != want {
			t.Errorf("DefaultUDPSockets(%d) = %d, want %d", procs, got, want)
		}
	}
}

// TestUDPBatchAddressFamilies: the batched reader answers on an IPv6
// address and on the IPv4 wildcard (a dual-stack socket on Linux, whose
// clients' addresses come as IPv4-mapped IPv6 and whose replies go out to
// an IPv4 address): hits and misses, several in one batch.
func TestUDPBatchAddressFamilies(t *testing.T) {
	if c, err := net.ListenPacket("udp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here (%v): CI has one", err)
	} else {
		_ = c.Close()
	}
	for _, tc := range []struct{ listen, dial string }{{"[::1]:0", "::1"}, {"0.0.0.0:0", "127.0.0.1"}} {
		t.Run(tc.listen, func(t *testing.T) {
			e := newEnv(t, func(c *resolver.Config) { c.Listen = []netip.AddrPort{netip.MustParseAddrPort(tc.listen)} })
			srv := netip.AddrPortFrom(netip.MustParseAddr(tc.dial), e.r.UDPAddrs()[0].Port())
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(srv))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const n = 20
			for i := range n {
				m := query(fmt.Sprintf("fam%d.test", i%2), dns.TypeA, 1232, false) // two names: misses, then hits
				m.Id = uint16(i + 1)
				if _, err := c.Write(mustPack(t, m)); err != nil {
					t.Fatal(err)
				}
			}
			got := map[uint16]bool{}
			for range n {
				b := readUDP(t, c, bound)
				if b == nil {
					t.Fatalf("%d of %d replies within %v", len(got), n, bound)
				}
				m := mustUnpack(t, b)
				if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || got[m.Id] {
					t.Fatalf("reply %v (id seen before: %v)", m, got[m.Id])
				}
				got[m.Id] = true
			}
		})
	}
}

// TestUDPMissRepliesCached: concurrent misses of several kinds and sizes
// (the slow path packs each reply into a pooled buffer and carries the
// packet-cache key as bytes to its goroutine) each get their own answer,
// and asked again each is a packet-cache hit with that same answer: no
// reply is stored under another query's key or with another reply's
// bytes.
func TestUDPMissRepliesCached(t *testing.T) {
	e := newEnv(t, nil)
	type ask struct {
		name  string
		qtype uint16
		do    bool
		size  uint16
	}
	var asks []ask
	for i := range 12 {
		asks = append(asks,
			ask{fmt.Sprintf("m%d.pool.test.", i), dns.TypeA, false, 1232},
			ask{fmt.Sprintf("m%d.pool.test.", i), dns.TypeAAAA, false, 0},
			ask{fmt.Sprintf("nx.m%d.pool.test.", i), dns.TypeA, false, 1232},
			ask{fmt.Sprintf("s%d.pool.test.", i), dns.TypeA, true, 4096})
	}
	asks = append(asks, ask{"big.test.", dns.TypeA, false, 1232})
	send := func(c *net.UDPConn, idBase uint16) map[uint16]*dns.Msg {
		t.Helper()
		for i, a := range asks {
			m := query(a.name, a.qtype, a.size, a.do)
			m.Id = idBase + uint16(i)
			if _, err := c.Write(mustPack(t, m)); err != nil {
				t.Fatal(err)
			}
		}
		got := map[uint16]*dns.Msg{}
		for range asks {
			b := readUDP(t, c, bound)
			if b == nil {
				t.Fatalf("%d of %d replies within %v", len(got), len(asks), bound)
			}
			m := mustUnpack(t, b)
			got[m.Id] = m
		}
		return got
	}
	// answerOf is a reply's sections without TTLs, which age between the
	// two rounds.
	answerOf := func(m *dns.Msg) string {
		var s strings.Builder
		fmt.Fprintf(&s, "%s %v |", dns.RcodeToString[m.Rcode], m.Question)
		for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			for _, rr := range sec {
				rr = dns.Copy(rr)
				rr.Header().Ttl = 0
				s.WriteString(" " + rr.String())
			}
			s.WriteString(" |")
		}
		return s.String()
	}
	c := e.udpClient("")
	first := send(c, 0x2000)
	for i, a := range asks {
		m := first[0x2000+uint16(i)]
		if m == nil || len(m.Question) != 1 || m.Question[0].Name != a.name || m.Question[0].Qtype != a.qtype {
			t.Fatalf("%s/%s: reply %v", a.name, dns.TypeToString[a.qtype], m)
		}
		if len(m.Answer)+len(m.Ns) == 0 || m.Answer != nil && m.Answer[0].Header().Name != a.name {
			t.Errorf("%s/%s: answered %v %v", a.name, dns.TypeToString[a.qtype], m.Answer, m.Ns)
		}
		if (m.IsEdns0() != nil) != (a.size != 0) {
			t.Errorf("%s/%s: EDNS in the reply %v, in the query %v", a.name, dns.TypeToString[a.qtype], m.IsEdns0() != nil, a.size != 0)
		}
	}
	before := e.stats("packetcache-hits", "packetcache-misses")
	again := send(c, 0x3000)
	for i, a := range asks {
		if got, want := answerOf(again[0x3000+uint16(i)]), answerOf(first[0x2000+uint16(i)]); got != want {
			t.Errorf("%s/%s from the packet cache:\n%s\nwant\n%s", a.name, dns.TypeToString[a.qtype], got, want)
		}
	}
	e.wantMoved("asked again", before, map[string]uint64{"packetcache-hits": uint64(len(asks)), "packetcache-misses": 0})
}
