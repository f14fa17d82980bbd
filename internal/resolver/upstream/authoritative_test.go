package upstream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// authoritative answers as a zone's server would: AA set for names under
// zone, a referral (no AA, NS in authority) for those under sub, REFUSED
// for anything outside the zone. It refuses while down is set.
func authoritative(zone, sub string, down *atomic.Bool) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		name := q.Question[0].Name
		r := new(dns.Msg)
		switch {
		case down != nil && down.Load(), !dns.IsSubDomain(zone, name):
			r.SetRcode(q, dns.RcodeRefused)
		case sub != "" && dns.IsSubDomain(sub, name):
			r.SetReply(q)
			r.Ns = append(r.Ns, &dns.NS{Hdr: dns.RR_Header{Name: sub, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 300}, Ns: "ns." + sub})
		case q.Question[0].Qtype == dns.TypeSOA && dns.CanonicalName(name) == zone:
			r.SetReply(q)
			r.Authoritative = true
			r.Answer = append(r.Answer, &dns.SOA{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300},
				Ns: "ns." + zone, Mbox: "admin." + zone, Serial: 1, Refresh: 60, Retry: 60, Expire: 600, Minttl: 60})
		default:
			r = reply(q, 1)
			r.Authoritative, r.RecursionAvailable = true, false
		}
		return [][]byte{wire(r)}
	}
}

// TestAuthoritativeForwarders: a client for a zone's authoritative servers
// asks without RD, takes an answer with AA, does not take a referral (the
// next server is asked, then ErrAllFailed) without marking the server
// down, and probes a down server with the zone's SOA, which brings it back
// where ". NS" would be refused.
func TestAuthoritativeForwarders(t *testing.T) {
	var down atomic.Bool
	srv := startFake(t, "127.0.0.1", authoritative("corp.example.", "sub.corp.example.", &down))
	c, _ := newClient(t, Config{Authoritative: true, ProbeName: "corp.example", Timeout: 200 * time.Millisecond, MaxTime: time.Second}, srv.addr)

	ans, err := c.Exchange(context.Background(), question("Www.Corp.Example.", dns.TypeA))
	if err != nil || len(ans.Answer) != 1 || !ans.Authoritative {
		t.Fatalf("answer %v, err %v", ans, err)
	}
	seen := srv.seen()
	if len(seen) != 1 || seen[0].msg.RecursionDesired {
		t.Fatalf("queries %+v: want one, without RD", seen)
	}

	_, err = c.Exchange(context.Background(), question("x.sub.corp.example.", dns.TypeA))
	if !errors.Is(err, ErrAllFailed) {
		t.Fatalf("referral: err %v, want ErrAllFailed", err)
	}
	if st, _ := c.Status(); !st[0].Up {
		t.Fatalf("a referral marked the server down: %+v", st[0])
	}

	down.Store(true)
	if _, err := c.Exchange(context.Background(), question("a.corp.example.", dns.TypeA)); !errors.Is(err, ErrAllFailed) {
		t.Fatalf("refusing server: err %v", err)
	}
	if st, _ := c.Status(); st[0].Up {
		t.Fatalf("a REFUSED left the server up: %+v", st[0])
	}
	down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for st, _ := c.Status(); !st[0].Up; st, _ = c.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("not probed back within 10 s: %+v", st[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	var probe *dns.Msg
	for _, s := range srv.seen() {
		if s.msg.Question[0].Qtype == dns.TypeSOA {
			probe = s.msg
		}
	}
	if probe == nil || probe.Question[0].Name != "corp.example." || probe.RecursionDesired {
		t.Fatalf("probe %v: want corp.example. SOA without RD", probe)
	}
}

// TestRecursiveForwardersAskWithRD: the default client still sets RD, and
// a recursive forwarder's answer without AA is taken.
func TestRecursiveForwardersAskWithRD(t *testing.T) {
	srv := startFake(t, "127.0.0.1", answerWith(1))
	c, _ := newClient(t, Config{}, srv.addr)
	ans, err := c.Exchange(context.Background(), question("www.example.", dns.TypeA))
	if err != nil || ans.Authoritative {
		t.Fatalf("answer %v, err %v", ans, err)
	}
	if s := srv.seen(); len(s) != 1 || !s[0].msg.RecursionDesired {
		t.Fatalf("queries %+v: want one with RD", s)
	}
}
