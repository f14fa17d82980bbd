package resolver_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// blockCase is a query whose answer the policy decides.
type blockCase struct {
	name, from, qname string
	qtype             uint16
	rcode             int
	ede               uint16 // 0: none
	edeText           string // in the EDE's EXTRA-TEXT
	soa               bool   // an SOA in the authority section (NXDOMAIN, NODATA)
	answer            func(t *testing.T, rr []dns.RR)
	moved             map[string]uint64 // statistics moved by the UDP query
}

func wantA(addr string) func(*testing.T, []dns.RR) {
	return func(t *testing.T, rr []dns.RR) {
		t.Helper()
		if len(rr) != 1 {
			t.Fatalf("answer %v, want one A %s", rr, addr)
		}
		if a, ok := rr[0].(*dns.A); !ok || !a.A.Equal(net.ParseIP(addr)) {
			t.Fatalf("answer %v, want A %s", rr, addr)
		}
	}
}

func wantNone(t *testing.T, rr []dns.RR) {
	t.Helper()
	if len(rr) != 0 {
		t.Fatalf("answer %v, want none", rr)
	}
}

// checkBlock asks tc over netw and checks the answer.
func checkBlock(t *testing.T, e *testEnv, netw string, tc blockCase, edns bool) {
	t.Helper()
	var size uint16
	if edns {
		size = 1232
	}
	r := e.mustAsk(netw, tc.from, query(tc.qname, tc.qtype, size, false))
	if r.Rcode != tc.rcode {
		t.Fatalf("rcode %s, want %s: %v", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode], r)
	}
	tc.answer(t, r.Answer)
	hasSOA := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == dns.TypeSOA
	if hasSOA != tc.soa {
		t.Errorf("authority %v, want an SOA: %v", r.Ns, tc.soa)
	}
	if hasSOA && r.Ns[0].Header().Ttl > 60 {
		t.Errorf("SOA TTL %d, want ≤ dns.block.ttl (60)", r.Ns[0].Header().Ttl)
	}
	ede, ok := edeOf(r)
	switch {
	case !edns:
		if r.IsEdns0() != nil {
			t.Errorf("an OPT for a client without EDNS: %v", r.IsEdns0())
		}
	case tc.ede == 0 && ok:
		t.Errorf("EDE %v, want none", ede)
	case tc.ede != 0 && (!ok || ede.InfoCode != tc.ede || !strings.Contains(ede.ExtraText, tc.edeText)):
		t.Errorf("EDE %v, want code %d with %q", ede, tc.ede, tc.edeText)
	}
}

// TestBlockedAnswers: each action answers as docs/policy.md says, over UDP
// and TCP, with EDNS (the EDE: 17 when the subscriber's settings decided,
// 15 for the operator's global layer) and without (no OPT at all).
func TestBlockedAnswers(t *testing.T) {
	e := newEnv(t, nil)
	cases := []blockCase{
		{name: "category, subscriber settings: NXDOMAIN, EDE 17", from: "127.0.0.2", qname: "bad.test", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: policy.EDEFiltered, edeText: "category: category:3 feed=threats key=bad.test",
			soa: true, answer: wantNone, moved: map[string]uint64{"nxdomain-answers": 1, "all-outqueries": 0}},
		{name: "a name below the category's", from: "127.0.0.2", qname: "www.bad.test", qtype: dns.TypeAAAA,
			rcode: dns.RcodeNameError, ede: policy.EDEFiltered, edeText: "key=bad.test", soa: true, answer: wantNone},
		{name: "global blocklist: EDE 15", from: "127.0.0.1", qname: "global.test", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: policy.EDEBlocked, edeText: "blocklist: blocklist:global.test", soa: true, answer: wantNone},
		{name: "global blocklist for a subscriber: still EDE 15", from: "127.0.0.2", qname: "www.global.test", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: policy.EDEBlocked, edeText: "blocklist:global.test", soa: true, answer: wantNone},
		{name: "nodata", from: "127.0.0.3", qname: "blocked.test", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, ede: policy.EDEFiltered, edeText: "blocklist:blocked.test", soa: true, answer: wantNone,
			moved: map[string]uint64{"noerror-answers": 1}},
		{name: "refused", from: "127.0.0.4", qname: "blocked.test", qtype: dns.TypeA,
			rcode: dns.RcodeRefused, ede: policy.EDEFiltered, edeText: "blocklist:blocked.test", answer: wantNone},
		{name: "redirect A", from: "127.0.0.6", qname: "blocked.test", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, ede: policy.EDEFiltered, edeText: "blocklist:blocked.test", answer: wantA("192.0.2.99")},
		{name: "redirect AAAA", from: "127.0.0.6", qname: "www.blocked.test", qtype: dns.TypeAAAA,
			rcode: dns.RcodeSuccess, ede: policy.EDEFiltered, answer: func(t *testing.T, rr []dns.RR) {
				if len(rr) != 1 || !rr[0].(*dns.AAAA).AAAA.Equal(net.ParseIP("2001:db8::99")) {
					t.Fatalf("answer %v, want AAAA 2001:db8::99", rr)
				}
			}},
		{name: "redirect, a type it has no address for: NODATA", from: "127.0.0.6", qname: "blocked.test", qtype: dns.TypeMX,
			rcode: dns.RcodeSuccess, ede: policy.EDEFiltered, soa: true, answer: wantNone},
		{name: "cname, the target chased", from: "127.0.0.7", qname: "blocked.test", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, ede: policy.EDEFiltered, edeText: "blocklist:blocked.test", answer: func(t *testing.T, rr []dns.RR) {
				if len(rr) != 2 || rr[0].(*dns.CNAME).Target != "blockpage.test." || rr[1].Header().Name != "blockpage.test." ||
					!rr[1].(*dns.A).A.Equal(upstreamA) {
					t.Fatalf("answer %v, want CNAME blockpage.test. and its A", rr)
				}
			}},
		{name: "filtering off", from: "127.0.0.8", qname: "bad.test", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: wantA("192.0.2.1")},
		{name: "no session, no block", from: "127.0.0.20", qname: "bad.test", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: wantA("192.0.2.1")},
		{name: "scheduled category block", from: "127.0.0.9", qname: "bad.test", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, ede: policy.EDEFiltered, edeText: "category:3", soa: true, answer: wantNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			var names []string
			for n := range tc.moved {
				names = append(names, n)
			}
			before := e.stats(names...)
			checkBlock(t, e, "udp", tc, true)
			e.wantMoved("udp", before, tc.moved)
			checkBlock(t, e, "tcp", tc, true)
			checkBlock(t, e, "udp", tc, false)
			checkBlock(t, e, "tcp", tc, false)
		})
	}
}

// TestBlockedDrop: a drop action sends nothing: over UDP no reply (counted
// policy-drops), over TCP the connection is closed.
func TestBlockedDrop(t *testing.T) {
	e := newEnv(t, nil)
	c := e.udpClient("127.0.0.5")
	if _, err := c.Write(mustPack(t, query("blocked.test", dns.TypeA, 1232, false))); err != nil {
		t.Fatal(err)
	}
	e.waitStat("policy-drops", 1)
	if b := readUDP(t, c, 200*time.Millisecond); b != nil {
		t.Fatalf("dropped query answered: %x", b)
	}
	tc := e.tcpClient("127.0.0.5")
	writeTCP(t, tc, mustPack(t, query("blocked.test", dns.TypeA, 1232, false)))
	if b, closed := readTCP(t, tc); !closed {
		t.Fatalf("dropped TCP query answered: %x", b)
	}
	e.waitStat("policy-drops", 2)
	if r := e.mustAsk("udp", "127.0.0.5", query("fine.test", dns.TypeA, 1232, false)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("an allowed name for the same client: %v", r)
	}
}

// rpzZone is the operator's RPZ zone of the tests, in PowerDNS's syntax.
const rpzZone = `$TTL 60
@ SOA ns.operator.rpz. h.operator.rpz. 1 3600 600 86400 60
nx.rpz.test CNAME .
nodata.rpz.test CNAME *.
drop.rpz.test CNAME rpz-drop.
tc.rpz.test CNAME rpz-tcp-only.
local.rpz.test A 198.51.100.7
txt.rpz.test TXT "hello" "world"
cn.rpz.test CNAME target.test.
*.wild.rpz.test CNAME .
pass.rpz.test CNAME rpz-passthru.
bad.test CNAME rpz-passthru.
`

// rpzSnapshot loads rpzZone as a node does: a zone file named in the
// config, loaded by rpz.New.
func rpzSnapshot(t testing.TB) policy.RPZ {
	t.Helper()
	file := filepath.Join(t.TempDir(), "operator.rpz")
	if err := os.WriteFile(file, []byte(rpzZone), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := rpz.New(rpz.Config{Zones: []rpz.ZoneConfig{{Name: "operator", File: file}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	return set.RPZ()
}

// TestRPZ: each RPZ action answers as PowerDNS does and moves its
// policy-result-* statistic; queries RPZ does not act on move
// policy-result-noaction.
func TestRPZ(t *testing.T) {
	e := newEnv(t, func(c *resolver.Config) { c.Engine = testEngine(t, rpzSnapshot(t)) })
	cases := []struct {
		blockCase
		result string
	}{
		{blockCase{name: "nxdomain", from: "127.0.0.1", qname: "nx.rpz.test", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			ede: policy.EDEBlocked, edeText: "rpz:operator trigger=nx.rpz.test action=nxdomain", soa: true, answer: wantNone}, "nxdomain"},
		{blockCase{name: "nodata", from: "127.0.0.2", qname: "nodata.rpz.test", qtype: dns.TypeA, rcode: dns.RcodeSuccess,
			ede: policy.EDEBlocked, edeText: "action=nodata", soa: true, answer: wantNone}, "nodata"},
		{blockCase{name: "wildcard", from: "127.0.0.1", qname: "a.b.wild.rpz.test", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			ede: policy.EDEBlocked, edeText: "trigger=*.wild.rpz.test", soa: true, answer: wantNone}, "nxdomain"},
		{blockCase{name: "local A", from: "127.0.0.1", qname: "local.rpz.test", qtype: dns.TypeA, rcode: dns.RcodeSuccess,
			ede: policy.EDEBlocked, edeText: "action=redirect", answer: wantA("198.51.100.7")}, "custom"},
		{blockCase{name: "local A, AAAA asked: NODATA", from: "127.0.0.1", qname: "local.rpz.test", qtype: dns.TypeAAAA,
			rcode: dns.RcodeSuccess, ede: policy.EDEBlocked, soa: true, answer: wantNone}, "custom"},
		{blockCase{name: "local TXT", from: "127.0.0.1", qname: "txt.rpz.test", qtype: dns.TypeTXT, rcode: dns.RcodeSuccess,
			ede: policy.EDEBlocked, answer: func(t *testing.T, rr []dns.RR) {
				if len(rr) != 1 || strings.Join(rr[0].(*dns.TXT).Txt, "") != "helloworld" {
					t.Fatalf("answer %v, want TXT helloworld", rr)
				}
			}}, "custom"},
		{blockCase{name: "local CNAME, chased", from: "127.0.0.1", qname: "cn.rpz.test", qtype: dns.TypeA, rcode: dns.RcodeSuccess,
			ede: policy.EDEBlocked, answer: func(t *testing.T, rr []dns.RR) {
				if len(rr) != 2 || rr[0].(*dns.CNAME).Target != "target.test." || !rr[1].(*dns.A).A.Equal(upstreamA) {
					t.Fatalf("answer %v, want CNAME target.test. and its A", rr)
				}
			}}, "custom"},
		{blockCase{name: "passthru", from: "127.0.0.1", qname: "pass.rpz.test", qtype: dns.TypeA, rcode: dns.RcodeSuccess,
			answer: wantA("192.0.2.1")}, "noaction"},
		{blockCase{name: "passthru beats the subscriber's category", from: "127.0.0.2", qname: "bad.test", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: wantA("192.0.2.1")}, "noaction"},
		{blockCase{name: "no trigger", from: "127.0.0.1", qname: "clean.test", qtype: dns.TypeA, rcode: dns.RcodeSuccess,
			answer: wantA("192.0.2.1")}, "noaction"},
	}
	results := []string{"policy-result-noaction", "policy-result-nxdomain", "policy-result-nodata", "policy-result-custom",
		"policy-result-drop", "policy-result-truncate"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			before := e.stats(results...)
			checkBlock(t, e, "udp", tc.blockCase, true)
			moved := map[string]uint64{}
			for _, n := range results {
				moved[n] = 0
			}
			moved["policy-result-"+tc.result] = 1
			e.wantMoved("udp", before, moved)
			checkBlock(t, e, "tcp", tc.blockCase, true)
		})
	}

	t.Run("drop", func(t *testing.T) {
		e := e.with(t)
		before := e.stats("policy-result-drop", "policy-drops")
		c := e.udpClient("")
		if _, err := c.Write(mustPack(t, query("drop.rpz.test", dns.TypeA, 1232, false))); err != nil {
			t.Fatal(err)
		}
		e.waitStat("policy-drops", before["policy-drops"]+1)
		if b := readUDP(t, c, 200*time.Millisecond); b != nil {
			t.Fatalf("RPZ drop answered: %x", b)
		}
		e.wantMoved("udp", before, map[string]uint64{"policy-result-drop": 1, "policy-drops": 1})
	})

	t.Run("tcp-only", func(t *testing.T) {
		e := e.with(t)
		before := e.stats("policy-result-truncate", "policy-result-noaction")
		r := e.mustAsk("udp", "", query("tc.rpz.test", dns.TypeA, 1232, false))
		if !r.Truncated || len(r.Answer) != 0 || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("UDP: %v, want an empty answer with TC", r)
		}
		r = e.mustAsk("udp", "", query("tc.rpz.test", dns.TypeA, 1232, false))
		if !r.Truncated {
			t.Fatalf("UDP again (not from a cache): %v, want TC", r)
		}
		r = e.mustAsk("tcp", "", query("tc.rpz.test", dns.TypeA, 1232, false))
		if r.Truncated || len(r.Answer) != 1 {
			t.Fatalf("TCP: %v, want the forwarder's answer", r)
		}
		e.wantMoved("tcp-only", before, map[string]uint64{"policy-result-truncate": 2, "policy-result-noaction": 1})
	})
}

// TestDebugTrace: with dns.debug, a CHAOS TXT query for a name answers the
// decision's trace for the asking client, never from the packet cache;
// without, CHAOS is REFUSED.
func TestDebugTrace(t *testing.T) {
	e := newEnv(t, func(c *resolver.Config) { c.Debug = true })
	for i, st := range []struct {
		from, want string
	}{
		{"127.0.0.2", "reason category"},
		{"127.0.0.2", "reason category"},
		{"127.0.0.20", "reason default"},
	} {
		for _, netw := range []string{"udp", "tcp"} {
			m := query("bad.test", dns.TypeTXT, 1232, false)
			m.Question[0].Qclass = dns.ClassCHAOS
			r := e.mustAsk(netw, st.from, m)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%d %s: %v", i, netw, r)
			}
			txt := strings.Join(r.Answer[0].(*dns.TXT).Txt, "\n")
			if !strings.Contains(txt, "client "+st.from) || !strings.Contains(txt, st.want) {
				t.Errorf("%d %s: trace %q, want the client and %q", i, netw, txt, st.want)
			}
		}
	}
	if n := e.stat("packetcache-hits"); n != 0 {
		t.Errorf("packetcache-hits %d: a trace was replayed", n)
	}
}
