package resolver_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// answerFor answers a raw query with one A record; nil when it does not
// unpack. edit may change the answer before it is packed.
func answerFor(q []byte, edit func(*dns.Msg)) []byte {
	req := new(dns.Msg)
	if req.Unpack(q) != nil || len(req.Question) != 1 {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
		A: upstreamA}}
	if edit != nil {
		edit(m)
	}
	b, _ := m.Pack()
	return b
}

// TestUpstreamFailures: a forwarder that is down, silent, slow, answers
// garbage, another question, or a failure rcode gets the client a SERVFAIL
// within the bound, over UDP and TCP, counted in servfail-answers and in
// the statistic that says why; the SERVFAIL is not cached.
func TestUpstreamFailures(t *testing.T) {
	garbage := func(q []byte) [][]byte {
		if len(q) < 2 {
			return nil
		}
		short := []byte{q[0], q[1], 0x81}
		// Our id, QR set, one question that does not parse.
		junk := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, bytes.Repeat([]byte{0x3f}, 30)...)
		return [][]byte{short, junk}
	}
	mismatch := func(q []byte) [][]byte {
		return [][]byte{answerFor(q, func(m *dns.Msg) {
			m.Question[0].Name = "other.test."
			m.Answer[0].Header().Name = "other.test."
		})}
	}
	rcode := func(rc int) func([]byte) [][]byte {
		return func(q []byte) [][]byte {
			return [][]byte{answerFor(q, func(m *dns.Msg) { m.Rcode, m.Answer = rc, nil })}
		}
	}
	silent := func([]byte) [][]byte { return nil }
	correct := func(q []byte) [][]byte { return [][]byte{answerFor(q, nil)} }

	cases := []struct {
		name  string
		fwd   func(t *testing.T) netip.AddrPort
		moved []string // each moves by at least one per query
	}{
		{"down (port unreachable)", func(t *testing.T) netip.AddrPort { return closedPort(t) }, []string{"unreachables"}},
		{"silent", func(t *testing.T) netip.AddrPort { return rawUpstream(t, 0, silent) },
			[]string{"outgoing-timeouts", "outgoing4-timeouts"}},
		{"slow (answers after 3s)", func(t *testing.T) netip.AddrPort { return rawUpstream(t, 3*time.Second, correct) },
			[]string{"outgoing-timeouts"}},
		{"garbage", func(t *testing.T) netip.AddrPort { return rawUpstream(t, 0, garbage) },
			[]string{"server-parse-errors", "outgoing-timeouts"}},
		{"mismatched question", func(t *testing.T) netip.AddrPort { return rawUpstream(t, 0, mismatch) },
			[]string{"unexpected-packets", "outgoing-timeouts"}},
		{"SERVFAIL", func(t *testing.T) netip.AddrPort { return rawUpstream(t, 0, rcode(dns.RcodeServerFailure)) }, nil},
		{"REFUSED", func(t *testing.T) netip.AddrPort { return rawUpstream(t, 0, rcode(dns.RcodeRefused)) }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fwd := tc.fwd(t)
			e := newEnv(t, func(c *resolver.Config) {
				c.Forwarders = []netip.AddrPort{fwd}
				c.Upstream = upstream.Config{Timeout: 200 * time.Millisecond, MaxTime: 600 * time.Millisecond}
			})
			for _, netw := range []string{"udp", "tcp", "udp"} { // the second UDP query: the SERVFAIL was not cached
				names := append([]string{"servfail-answers", "packetcache-hits", "all-outqueries"}, tc.moved...)
				before := e.stats(names...)
				start := time.Now()
				r := e.mustAsk(netw, "", query("www.example.test", dns.TypeA, 1232, false))
				if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
					t.Fatalf("%s: rcode %s, %d answers; want SERVFAIL", netw, dns.RcodeToString[r.Rcode], len(r.Answer))
				}
				if took := time.Since(start); took > bound {
					t.Errorf("%s: SERVFAIL after %v", netw, took)
				}
				e.wantMoved(netw, before, map[string]uint64{"servfail-answers": 1, "packetcache-hits": 0})
				for _, n := range append([]string{"all-outqueries"}, tc.moved...) {
					if e.stat(n) == before[n] {
						t.Errorf("%s: %s did not move", netw, n)
					}
				}
			}
		})
	}
}

// TestUpstreamFailover: with a dead forwarder first, the query is answered
// by the second one.
func TestUpstreamFailover(t *testing.T) {
	dead, good := closedPort(t), startUpstream(t).addr
	e := newEnv(t, func(c *resolver.Config) { c.Forwarders = []netip.AddrPort{dead, good} })
	for _, netw := range []string{"udp", "tcp"} {
		r := e.mustAsk(netw, "", query("failover-"+netw+".test", dns.TypeA, 1232, false))
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("%s: %v", netw, r)
		}
	}
}
