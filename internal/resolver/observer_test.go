package resolver_test

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// recorder is an Observer that keeps a copy of every event.
type recorder struct {
	mu  sync.Mutex
	evs []resolver.Answered
}

func (o *recorder) Answered(a *resolver.Answered) {
	c := *a // the event is reused after the call, its strings may be views: copy what is kept
	c.Name, c.ClientID = strings.Clone(a.Name), strings.Clone(a.ClientID)
	s := &c.Subscriber
	s.Org, s.SessionID, s.Username, s.DeviceID, s.Location = strings.Clone(s.Org), strings.Clone(s.SessionID),
		strings.Clone(s.Username), strings.Clone(s.DeviceID), strings.Clone(s.Location)
	c.Decision.Rule, c.Decision.Policy = strings.Clone(a.Decision.Rule), strings.Clone(a.Decision.Policy)
	c.Decision.Categories = slices.Clone(a.Decision.Categories)
	c.Reply = slices.Clone(a.Reply)
	o.mu.Lock()
	o.evs = append(o.evs, c)
	o.mu.Unlock()
}

// next waits (within bound) for event i and returns it.
func (o *recorder) next(t *testing.T, i int) resolver.Answered {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		o.mu.Lock()
		n := len(o.evs)
		var ev resolver.Answered
		if n > i {
			ev = o.evs[i]
		}
		o.mu.Unlock()
		if n > i {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("observer: event %d not seen within %v (%d seen)", i, bound, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (o *recorder) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.evs)
}

func observed(t *testing.T, mod func(*resolver.Config)) (*testEnv, *recorder) {
	rec := &recorder{}
	e := newEnv(t, func(c *resolver.Config) {
		c.Observer = rec
		if mod != nil {
			mod(c)
		}
	})
	return e, rec
}

// sameDecision compares what the observer must report alike for a miss
// and the hit it filled.
func sameDecision(t *testing.T, what string, got, want resolver.Answered) {
	t.Helper()
	if got.Decision.Verdict != want.Decision.Verdict || got.Decision.Action != want.Decision.Action ||
		got.Decision.Reason != want.Decision.Reason || got.Decision.Rule != want.Decision.Rule ||
		!slices.Equal(got.Decision.Categories, want.Decision.Categories) || got.Decision.Policy != want.Decision.Policy ||
		got.Subscriber != want.Subscriber ||
		got.Name != want.Name || got.Type != want.Type || got.Rcode != want.Rcode || got.Transport != want.Transport {
		t.Errorf("%s: %+v, want the same decision, subscriber and question as %+v", what, got, want)
	}
}

// TestObserverUDPMissThenHit: over UDP, a blocked and an allowed name,
// each asked twice: the miss and the packet-cache hit it filled report the
// same decision and subscriber, the hit cached=packet.
func TestObserverUDPMissThenHit(t *testing.T) {
	e, rec := observed(t, nil)
	const alice = "127.0.0.2" // blocks category 3; bad.test is in it
	tests := []struct {
		name   string
		rcode  int
		want   resolver.Summary
		cached resolver.Cached // the first answer's
	}{
		{"bad.test", dns.RcodeNameError, resolver.Summary{Verdict: policy.VerdictBlock, Action: policy.ActionNXDomain,
			Reason: policy.ReasonCategory, Rule: "category:3 feed=threats key=bad.test", Categories: []uint16{3}}, resolver.CachedNone},
		{"www.ok.test", dns.RcodeSuccess, resolver.Summary{Verdict: policy.VerdictAllow, Action: policy.ActionAllow,
			Reason: policy.ReasonDefault}, resolver.CachedNone},
	}
	i := 0
	for _, tt := range tests {
		for round, cached := range []resolver.Cached{tt.cached, resolver.CachedPacket} {
			before := time.Now()
			r := e.mustAsk("udp", alice, query(tt.name, dns.TypeA, 1232, false))
			if r.Rcode != tt.rcode {
				t.Fatalf("%s: rcode %d, want %d", tt.name, r.Rcode, tt.rcode)
			}
			ev := rec.next(t, i)
			after := time.Now() // the event seen (the reply's time may follow the client's receipt)
			i++
			if ev.Name != tt.name+"." || ev.Type != dns.TypeA || ev.Transport != policy.TransportUDP ||
				ev.Client.Addr() != netip.MustParseAddr(alice) || ev.Rcode != tt.rcode || ev.Cached != cached {
				t.Errorf("%s round %d: %+v, want name, type, udp, client %s, rcode %d, cached %q", tt.name, round, ev, alice, tt.rcode, cached)
			}
			d := ev.Decision
			if d.Verdict != tt.want.Verdict || d.Action != tt.want.Action || d.Reason != tt.want.Reason || d.Rule != tt.want.Rule ||
				!slices.Equal(d.Categories, tt.want.Categories) {
				t.Errorf("%s round %d: decision %+v, want %+v", tt.name, round, d, tt.want)
			}
			if s := ev.Subscriber; s.Org != "acme" || s.Username != "alice" || s.SessionID == "" || s.Handle == 0 {
				t.Errorf("%s round %d: subscriber %+v, want acme's alice with her session id and handle", tt.name, round, s)
			}
			if ev.Took < 0 || ev.Took > bound {
				t.Errorf("%s round %d: took %v", tt.name, round, ev.Took)
			}
			// At is the reply's time, and Took ends there: both after the
			// question was sent, and before the event was seen.
			if arrived := ev.At.Add(-ev.Took); ev.At.Before(before) || ev.At.After(after) || arrived.Before(before) {
				t.Errorf("%s round %d: at %v, took %v: not within the exchange %v … %v", tt.name, round, ev.At, ev.Took,
					before, after)
			}
			if len(d.Policy) != 16 {
				t.Errorf("%s round %d: policy fingerprint %q, want the effective settings' 16 hex digits", tt.name, round, d.Policy)
			}
			// The reply as the client got it (a dnstap consumer logs it).
			var sent dns.Msg
			if err := sent.Unpack(ev.Reply); err != nil || sent.Id != r.Id || sent.Rcode != r.Rcode || len(sent.Answer) != len(r.Answer) {
				t.Errorf("%s round %d: observed reply %v (%v), want the one the client got: %v", tt.name, round, &sent, err, r)
			}
		}
		sameDecision(t, tt.name+": the hit", rec.next(t, i-1), rec.next(t, i-2))
	}
	if n := e.stat("packetcache-hits"); n != 2 {
		t.Errorf("packetcache-hits %d, want 2", n)
	}
}

// TestObserverTCP: over TCP, through the same entry: the transport says
// tcp, a blocked name's decision is reported, and an allowed name asked
// again comes from the record cache (TCP does not use the packet cache).
func TestObserverTCP(t *testing.T) {
	e, rec := observed(t, nil)
	const bob = "127.0.0.3" // blocks blocked.test with NODATA
	e.mustAsk("tcp", bob, query("blocked.test", dns.TypeA, 1232, false))
	ev := rec.next(t, 0)
	if ev.Transport != policy.TransportTCP || ev.Client.Addr() != netip.MustParseAddr(bob) || ev.Cached != resolver.CachedNone ||
		ev.Decision.Verdict != policy.VerdictBlock || ev.Decision.Reason != policy.ReasonBlocklist ||
		ev.Decision.Action != policy.ActionNoData || ev.Decision.Rule != "blocklist:blocked.test" ||
		ev.Subscriber.Username != "bob" || ev.Rcode != dns.RcodeSuccess || ev.Name != "blocked.test." {
		t.Errorf("blocked over TCP: %+v", ev)
	}
	for i, want := range []resolver.Cached{resolver.CachedNone, resolver.CachedRecord} {
		e.mustAsk("tcp", bob, query("tcp.ok.test", dns.TypeA, 1232, false))
		ev := rec.next(t, 1+i)
		if ev.Transport != policy.TransportTCP || ev.Cached != want || ev.Decision.Verdict != policy.VerdictAllow ||
			ev.Decision.Reason != policy.ReasonDefault || ev.Subscriber.Username != "bob" {
			t.Errorf("allowed over TCP, round %d: %+v, want cached %q", i, ev, want)
		}
	}
}

// TestObserverNoDecision: what is answered without a decision reaches the
// observer with an empty one (FORMERR from dnswire or from miekg/dns on
// the slow path, NOTIMP, BADVERS, over UDP and TCP);
// what is not answered does not (a response, a client outside
// allow_from); a query the policy drops is reported with RcodeDropped.
func TestObserverNoDecision(t *testing.T) {
	e, rec := observed(t, func(c *resolver.Config) {
		c.AllowFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/28")} // 127.0.0.16 and up refused
	})
	notimp := query("op.test", dns.TypeA, 0, false)
	notimp.Opcode = dns.OpcodeStatus
	badvers := query("badvers.test", dns.TypeA, 1232, false)
	badvers.IsEdns0().SetVersion(1)
	formerr := mustPack(t, query("form.test", dns.TypeA, 0, false))
	formerr[5] = 2 // QDCOUNT 2, one question there
	// dnswire accepts it, miekg/dns does not (an ECS option of family 3):
	// the slow path's FORMERR.
	ecs := query("ecs.test", dns.TypeA, 1232, false)
	ecs.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: dns.EDNS0SUBNET, Data: []byte{0, 3, 24, 0, 192, 0, 2}}}
	response := query("resp.test", dns.TypeA, 0, false)
	response.Response = true

	// Not answered: nothing observed.
	c := e.udpClient("127.0.0.20") // outside allow_from
	if _, err := c.Write(mustPack(t, query("refused.test", dns.TypeA, 0, false))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.udpClient("").Write(mustPack(t, response)); err != nil {
		t.Fatal(err)
	}
	tcpResp := e.tcpClient("")
	writeTCP(t, tcpResp, mustPack(t, response))
	if _, closed := readTCP(t, tcpResp); !closed {
		t.Fatal("a response over TCP: the connection stays open")
	}
	e.waitStat("unauthorized-udp", 1)
	e.waitStat("ignored-packets", 2)
	if n := rec.count(); n != 0 {
		t.Fatalf("%d events for queries not answered", n)
	}

	i := 0
	for _, netw := range []string{"udp", "tcp"} {
		for _, tt := range []struct {
			pkt   []byte
			rcode int
			name  string
		}{
			{mustPack(t, notimp), dns.RcodeNotImplemented, ""}, // dnswire stops at the opcode
			{mustPack(t, badvers), dns.RcodeBadVers, "badvers.test."},
			{formerr, dns.RcodeFormatError, ""},
			{mustPack(t, ecs), dns.RcodeFormatError, "ecs.test."},
		} {
			if netw == "udp" {
				e.rawUDP("", tt.pkt)
			} else {
				c := e.tcpClient("")
				writeTCP(t, c, tt.pkt)
				if _, closed := readTCP(t, c); closed {
					t.Fatalf("tcp rcode %d: connection closed", tt.rcode)
				}
			}
			ev := rec.next(t, i)
			i++
			if ev.Rcode != tt.rcode || ev.Decision.Verdict != "" || ev.Transport.String() != netw || ev.Name != tt.name {
				t.Errorf("%s, rcode %d: %+v, want no decision, name %q", netw, tt.rcode, ev, tt.name)
			}
		}
	}
	// A policy drop: no reply, one event.
	if _, err := e.udpClient("127.0.0.5").Write(mustPack(t, query("blocked.test", dns.TypeA, 0, false))); err != nil {
		t.Fatal(err)
	}
	ev := rec.next(t, i)
	if ev.Rcode != resolver.RcodeDropped || ev.Decision.Action != policy.ActionDrop || ev.Subscriber.Username != "dave" {
		t.Errorf("a policy drop: %+v", ev)
	}
	if n := rec.count(); n != i+1 {
		t.Errorf("%d events, want %d", n, i+1)
	}
}
