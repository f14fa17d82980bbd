package resolver_test

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Forwarder modes of a switchUpstream.
const (
	modeAnswer    = iota
	modeBlackhole // reads every query and never answers
	modeSlow      // answers after slowDelay
)

// switchUpstream is a forwarder on loopback (UDP and TCP on one port) whose
// mode a test switches: answering, black-holed (its sockets stay bound and
// read, nothing comes back, as a forwarder behind a dropping firewall) or
// slow. A question's TTL is its name's "tN" label (t30.x.test.: 30 s),
// else 300; its A record is 192.0.2.1. It counts the client queries per
// name (a probe, ". NS", aside).
type switchUpstream struct {
	addr      netip.AddrPort
	mode      atomic.Int32
	slowDelay time.Duration

	mu   sync.Mutex
	seen map[string]int
	all  atomic.Int64
}

func startSwitchUpstream(t testing.TB) *switchUpstream {
	t.Helper()
	u := &switchUpstream{seen: map[string]int{}, slowDelay: 2500 * time.Millisecond}
	u.addr = serveDNS(t, dns.HandlerFunc(u.serve))
	return u
}

// ttlOf reads a name's "tN" label.
func ttlOf(name string) uint32 {
	for _, l := range dns.SplitDomainName(name) {
		if len(l) > 1 && l[0] == 't' {
			if n, err := strconv.Atoi(l[1:]); err == nil {
				return uint32(n)
			}
		}
	}
	return 300
}

func (u *switchUpstream) serve(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 {
		return
	}
	q := req.Question[0]
	if q.Name != "." {
		u.all.Add(1)
		u.mu.Lock()
		u.seen[strings.ToLower(q.Name)]++
		u.mu.Unlock()
	}
	switch u.mode.Load() {
	case modeBlackhole:
		return
	case modeSlow:
		time.Sleep(u.slowDelay)
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	if q.Qtype == dns.TypeA && q.Name != "." {
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttlOf(q.Name)},
			A: net.IPv4(192, 0, 2, 1).To4()}}
	}
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(1232, opt.Do())
	}
	_ = w.WriteMsg(m)
}

// asked is how many client queries for name (any case) the forwarder got.
func (u *switchUpstream) asked(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[strings.ToLower(dns.Fqdn(name))]
}

// fakeClock is a clock a test moves forward: the real time plus an offset,
// so that the forwarder client's own timeouts stay real.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) add(d time.Duration) { c.off.Add(int64(d)) }
func answeredWithData(m *dns.Msg) bool {
	return m != nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0
}
func firstTTL(m *dns.Msg) uint32 { return m.Answer[0].Header().Ttl }
